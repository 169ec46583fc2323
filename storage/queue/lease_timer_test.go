package queue

import "testing"

// A lease whose settle was in flight when its deadline was looked at, and
// whose settle the log then refused, still expires: looking at the next
// deadline, or running the expiry, while the settle is in flight must not
// forget the lease's timer. (They dropped it, and such a lease stayed
// leased until the owner changed: the soak's "queues did not drain ...
// leased 5" after ten owner kills.)
func TestALeaseWhoseSettleWasRefusedStillExpires(t *testing.T) {
	for _, look := range []string{"next deadline", "expiry run"} {
		t.Run(look, func(t *testing.T) {
			opts := Options{MaxDeliveries: 5}
			a := &applier{t: t, s: NewState(opts, 0), model: newModel(opts)}
			a.apply(Record{Kind: KindPublish, PublishMs: 1, PayloadBytes: 10})
			a.apply(Record{Kind: KindLease, Holder: 7, DeadlineMs: 100, Offsets: []uint64{0}})
			if err := a.s.claimSettle(7, []uint64{0}); err != nil { // an ack in flight
				t.Fatal(err)
			}
			switch look {
			case "next deadline":
				a.s.nextDeadlineMs()
			case "expiry run":
				if got := a.s.claimExpiredLeases(200, 10, nil); len(got) != 0 {
					t.Fatalf("expiry took %v while its ack was in flight", got)
				}
			}
			a.s.unclaim(0) // the log refused the ack
			if at, ok := a.s.nextDeadlineMs(); !ok || at != 100 {
				t.Fatalf("next deadline %d, %v; want the lease's 100", at, ok)
			}
			if got := a.s.claimExpiredLeases(200, 10, nil); len(got) != 1 || got[0] != 0 {
				t.Fatalf("expiry after the refused ack took %v, want [0]", got)
			}
		})
	}
}
