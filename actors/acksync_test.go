package actors

// Ack-sync (FAK2) on the wire: FOK1 once the ack applied, all or nothing,
// FER1 with the request id for tags not held (settled, expired) and for an
// unknown subscription.

import (
	"testing"

	"github.com/fibrilmq/fibril/wire"
)

func (c *testClient) ackSync(subscriptionID uint64, tags ...uint64) wire.Frame {
	c.t.Helper()
	id := c.id()
	c.send(&wire.AckSync{RequestID: id, Settle: wire.Settle{SubscriptionID: subscriptionID, DeliveryTags: tags}})
	return c.reply(id)
}

func TestAckSyncIsAnsweredOnceTheAckApplied(t *testing.T) {
	for _, mode := range []wire.Mode{wire.ModeDurable, wire.ModeBuffered} {
		t.Run(mode.String(), func(t *testing.T) {
			b := startBroker(t, nil)
			c := connect(t, b)
			c.mustDeclare("jobs", mode, wire.QueueOptions{})
			c.mustConfirm("jobs", boundaryOfWireMode(mode), "a", "b", "c")
			sub := c.subscribe("jobs", 3)
			got := c.deliveries(sub, 3)

			ok, isOK := c.ackSync(sub, got[0].DeliveryTag).(*wire.OK)
			if !isOK || ok.Count != 1 {
				t.Fatalf("ack-sync of a held tag: %+v", ok)
			}
			// Applied before the answer: info, read after it, shows it
			// without any waiting.
			if info := c.info("jobs"); info.Leased != 2 || info.Ready != 0 {
				t.Fatalf("after an answered ack-sync: %+v", info)
			}

			// All or nothing: one tag settled already, so neither is acked.
			refused, isError := c.ackSync(sub, got[1].DeliveryTag, got[0].DeliveryTag).(*wire.ErrorFrame)
			if !isError || refused.Code != wire.CodeUnknownDeliveryTag {
				t.Fatalf("ack-sync naming a settled tag: %+v", refused)
			}
			if info := c.info("jobs"); info.Leased != 2 {
				t.Fatalf("a refused ack-sync acked something: %+v", info)
			}
			if ok, isOK := c.ackSync(sub, got[1].DeliveryTag, got[2].DeliveryTag).(*wire.OK); !isOK || ok.Count != 2 {
				t.Fatalf("ack-sync of the two held tags: %+v", ok)
			}
			if info := c.info("jobs"); info.Leased != 0 || info.Ready != 0 {
				t.Fatalf("after acking everything: %+v", info)
			}

			unknown, isError := c.ackSync(sub+1000, 1).(*wire.ErrorFrame)
			if !isError || unknown.Code != wire.CodeUnknownSubscription {
				t.Fatalf("ack-sync on a subscription the session does not hold: %+v", unknown)
			}
		})
	}
}

// An ack-sync of a delivery whose lease expired is refused by name, and
// the message stays with its redelivery.
func TestAckSyncOfAnExpiredDeliveryIsRefused(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("leases", wire.ModeBuffered, wire.QueueOptions{LeaseTimeoutMs: 100})
	c.mustConfirm("leases", wire.BoundaryWritten, "slow")
	sub := c.subscribe("leases", 1)
	first := c.deliveries(sub, 1)[0]
	second := c.deliveries(sub, 1)[0] // the lease expired: delivered again
	if !second.Redelivered || second.Offset != first.Offset {
		t.Fatalf("redelivery %+v after %+v", second, first)
	}
	refused, isError := c.ackSync(sub, first.DeliveryTag).(*wire.ErrorFrame)
	if !isError || refused.Code != wire.CodeUnknownDeliveryTag || refused.RequestID == 0 {
		t.Fatalf("ack-sync of an expired delivery: %+v", refused)
	}
	if ok, isOK := c.ackSync(sub, second.DeliveryTag).(*wire.OK); !isOK || ok.Count != 1 {
		t.Fatalf("ack-sync of the live delivery: %+v", ok)
	}
}

func boundaryOfWireMode(mode wire.Mode) wire.Boundary {
	if mode == wire.ModeBuffered {
		return wire.BoundaryWritten
	}
	return wire.BoundaryDurable
}
