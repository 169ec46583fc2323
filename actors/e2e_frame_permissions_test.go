package actors

// Every frame kind a client may send, against the authorization table
// (access.go, docs/security.md): the table below is kept by hand, keyed
// by tag, and the walk fails when the session takes a kind the table does
// not name, or the table names a kind the session refuses. Each rule is
// then tried over the wire: a user without the permission is refused
// (forbidden, or unknown_subscription for a subscription that is not its
// own), and a user with exactly that permission is served.

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fibrilmq/fibril/wire"
)

// The rules of the table that are not a single operation.
const (
	ruleCredential      = "credential"       // hello: the credential itself
	ruleVisible         = "any permission"   // get-queue-info
	ruleOwnSubscription = "own subscription" // settles and unsubscribe
	ruleNothing         = "nothing"          // ping, pong, error; list-queues filters instead
)

// clientFrameRules is what each client frame kind needs, as access.go's
// header and docs/security.md say. An operation rule names the operation.
var clientFrameRules = map[wire.Tag]string{
	wire.TagHello:             ruleCredential,
	wire.TagDeclare:           "declare",
	wire.TagPublish:           "publish",
	wire.TagPublishIdempotent: "publish",
	wire.TagSubscribe:         "consume",
	wire.TagAck:               ruleOwnSubscription,
	wire.TagAckSync:           ruleOwnSubscription,
	wire.TagNack:              ruleOwnSubscription,
	wire.TagRelease:           ruleOwnSubscription,
	wire.TagDiscard:           ruleOwnSubscription,
	wire.TagUnsubscribe:       ruleOwnSubscription,
	wire.TagGetQueueInfo:      ruleVisible,
	wire.TagListQueues:        ruleNothing,
	wire.TagDeleteQueue:       "admin",
	wire.TagPurgeQueue:        "admin",
	wire.TagChangeMode:        "admin",
	wire.TagPing:              ruleNothing,
	wire.TagResumePublishing:  ruleNothing,
	wire.TagPong:              ruleNothing,
	wire.TagError:             ruleNothing,
}

// sessionTakes reports whether a client session takes a frame kind: the
// reader lets its header through and the decoder makes a request of it
// (an empty body is malformed, which is not a refusal of the kind).
func sessionTakes(tag wire.Tag) bool {
	if refuseFramesClientsMayNotSend(tag) != nil {
		return false
	}
	_, _, err := newInboundDecoder().decode(tag, nil)
	return !errors.Is(err, errProtocolViolation) && !errors.Is(err, wire.ErrUnknownFrame)
}

// The table names exactly the kinds the session takes.
func TestEveryClientFrameHasAPermissionRule(t *testing.T) {
	taken := 0
	for _, tag := range wire.Tags() {
		rule, inTable := clientFrameRules[tag]
		switch takes := sessionTakes(tag); {
		case takes && !inTable:
			t.Errorf("a client may send %s (%s) and the session takes it, but it has no permission rule: "+
				"add it to access.go's table, docs/security.md and clientFrameRules", tag, tag.Name())
		case !takes && inTable:
			t.Errorf("%s (%s) has the rule %q but the session refuses it from clients", tag, tag.Name(), rule)
		case takes:
			taken++
		}
		if _, ok := frameAttempts[tag]; inTable && !ok {
			t.Errorf("%s (%s) has no attempt in frameAttempts, so the walk does not try its rule", tag, tag.Name())
		}
	}
	if taken != len(clientFrameRules) || taken < 19 {
		t.Fatalf("the session takes %d client frame kinds; the table has %d", taken, len(clientFrameRules))
	}
}

// walkQueue is the queue the walk acts on; the users' other permissions
// are on a queue the walk never touches.
const walkQueue = "walk"

// walkUsers: root may do everything; nobody holds every operation, but
// on another queue; each "only-" user holds one operation on walkQueue.
var walkUsers = []testUser{
	{"root", "root-token-0000000001", `[{"queues": "*", "allow": ["declare", "publish", "consume", "admin"]}]`},
	{"nobody", "nobody-token-00000001", `[{"queues": "elsewhere", "allow": ["declare", "publish", "consume", "admin"]}]`},
	{"only-declare", "declare-token-0000001", `[{"queues": "walk", "allow": ["declare"]}]`},
	{"only-publish", "publish-token-0000001", `[{"queues": "walk", "allow": ["publish"]}]`},
	{"only-consume", "consume-token-0000001", `[{"queues": "walk", "allow": ["consume"]}]`},
	{"only-admin", "admin-token-000000001", `[{"queues": "walk", "allow": ["admin"]}]`},
}

// frameWalk is the state the attempts share: the root connection, which
// holds a subscription with deliveries to settle.
type frameWalk struct {
	t            *testing.T
	broker       *Broker
	root         *testClient
	subscription uint64
	tags         []uint64 // delivery tags of root's subscription not settled yet
}

// attemptResult is what the node made of one frame: served, or refused
// with a code.
type attemptResult struct {
	served bool
	code   wire.Code
}

// frameAttempt sends one frame of its kind on c and reports what came of
// it. subscription and tag name root's subscription and one of its
// deliveries.
type frameAttempt func(w *frameWalk, c *testClient, subscription, tag uint64) attemptResult

var frameAttempts = map[wire.Tag]frameAttempt{
	wire.TagHello: func(w *frameWalk, c *testClient, _, _ uint64) attemptResult {
		c.send(&wire.Hello{Versions: []uint16{wire.ProtocolVersion}, AuthToken: []byte("root:not-the-token-000001")})
		return resultOf(c.waitFor("the hello's answer", func(wire.Frame) bool { return true }))
	},
	wire.TagDeclare: func(w *frameWalk, c *testClient, _, _ uint64) attemptResult {
		return resultOf(c.declare(walkQueue, wire.ModeBuffered, wire.QueueOptions{}))
	},
	wire.TagPublish: func(w *frameWalk, c *testClient, _, _ uint64) attemptResult {
		seqs := c.publish(walkQueue, "walk")
		out := c.awaitOutcomes(seqs)[seqs[0]]
		return attemptResult{served: out.confirmed, code: out.code}
	},
	wire.TagPublishIdempotent: func(w *frameWalk, c *testClient, _, _ uint64) attemptResult {
		c.nextSeq++
		seq := c.nextSeq
		c.send(&wire.PublishIdempotent{Queue: []byte(walkQueue), ProducerID: []byte("walker"),
			Messages: []wire.PublishMessage{{Seq: seq, ProducerSeq: seq, Payload: []byte("walk")}}})
		answer := c.waitFor("the idempotent publish's answer", func(frame wire.Frame) bool {
			switch frame.(type) {
			case *wire.ConfirmIdempotent, *wire.NegativeConfirm:
				return true
			}
			return false
		})
		if refusal, ok := answer.(*wire.NegativeConfirm); ok {
			return attemptResult{code: refusal.Ranges[0].Code}
		}
		return attemptResult{served: true}
	},
	wire.TagSubscribe: func(w *frameWalk, c *testClient, _, _ uint64) attemptResult {
		id := c.id()
		c.send(&wire.Subscribe{RequestID: id, Queue: walkQueue, Prefetch: 1})
		reply := c.reply(id)
		if ok, isOK := reply.(*wire.SubscribeOK); isOK {
			unsubscribe := c.id()
			c.send(&wire.Unsubscribe{RequestID: unsubscribe, SubscriptionID: ok.SubscriptionID})
			c.reply(unsubscribe)
		}
		return resultOf(reply)
	},
	wire.TagAck: func(w *frameWalk, c *testClient, subscription, tag uint64) attemptResult {
		return settleThenPing(c, &wire.Ack{Settle: wire.Settle{SubscriptionID: subscription, DeliveryTags: []uint64{tag}}})
	},
	wire.TagAckSync: func(w *frameWalk, c *testClient, subscription, tag uint64) attemptResult {
		id := c.id()
		c.send(&wire.AckSync{RequestID: id, Settle: wire.Settle{SubscriptionID: subscription, DeliveryTags: []uint64{tag}}})
		return resultOf(c.reply(id))
	},
	wire.TagNack: func(w *frameWalk, c *testClient, subscription, tag uint64) attemptResult {
		return settleThenPing(c, &wire.Nack{SubscriptionID: subscription, DeliveryTags: []uint64{tag}})
	},
	wire.TagRelease: func(w *frameWalk, c *testClient, subscription, tag uint64) attemptResult {
		return settleThenPing(c, &wire.Release{Settle: wire.Settle{SubscriptionID: subscription, DeliveryTags: []uint64{tag}}})
	},
	wire.TagDiscard: func(w *frameWalk, c *testClient, subscription, tag uint64) attemptResult {
		return settleThenPing(c, &wire.Discard{Settle: wire.Settle{SubscriptionID: subscription, DeliveryTags: []uint64{tag}}})
	},
	wire.TagUnsubscribe: func(w *frameWalk, c *testClient, subscription, _ uint64) attemptResult {
		id := c.id()
		c.send(&wire.Unsubscribe{RequestID: id, SubscriptionID: subscription})
		return resultOf(c.reply(id))
	},
	wire.TagGetQueueInfo: func(w *frameWalk, c *testClient, _, _ uint64) attemptResult {
		id := c.id()
		c.send(&wire.GetQueueInfo{RequestID: id, Queue: walkQueue})
		return resultOf(c.reply(id))
	},
	wire.TagListQueues: func(w *frameWalk, c *testClient, _, _ uint64) attemptResult {
		id := c.id()
		c.send(&wire.ListQueues{RequestID: id})
		return resultOf(c.reply(id))
	},
	wire.TagDeleteQueue: func(w *frameWalk, c *testClient, _, _ uint64) attemptResult {
		id := c.id()
		c.send(&wire.DeleteQueue{RequestID: id, Queue: walkQueue})
		result := resultOf(c.reply(id))
		if result.served { // back for the next attempts, with root's subscription
			w.reset()
		}
		return result
	},
	wire.TagPurgeQueue: func(w *frameWalk, c *testClient, _, _ uint64) attemptResult {
		id := c.id()
		c.send(&wire.PurgeQueue{RequestID: id, Queue: walkQueue})
		return resultOf(c.reply(id))
	},
	wire.TagChangeMode: func(w *frameWalk, c *testClient, _, _ uint64) attemptResult {
		id := c.id()
		c.send(&wire.ChangeMode{RequestID: id, Queue: walkQueue, Mode: wire.ModeBuffered})
		return resultOf(c.reply(id))
	},
	wire.TagPing: func(w *frameWalk, c *testClient, _, _ uint64) attemptResult {
		id := c.id()
		c.send(&wire.Ping{RequestID: id})
		return resultOf(c.reply(id))
	},
	wire.TagPong: func(w *frameWalk, c *testClient, _, _ uint64) attemptResult {
		return settleThenPing(c, &wire.Pong{RequestID: 77})
	},
	wire.TagError: func(w *frameWalk, c *testClient, _, _ uint64) attemptResult {
		return settleThenPing(c, &wire.ErrorFrame{Code: wire.CodeResourceLimit, Message: "a client's report"})
	},
	wire.TagResumePublishing: func(w *frameWalk, c *testClient, _, _ uint64) attemptResult {
		return settleThenPing(c, &wire.ResumePublishing{Queue: walkQueue})
	},
}

// resultOf reads a reply: an error frame is a refusal, anything else
// service.
func resultOf(reply wire.Frame) attemptResult {
	if refusal, ok := reply.(*wire.ErrorFrame); ok {
		return attemptResult{code: refusal.Code}
	}
	return attemptResult{served: true}
}

// settleThenPing sends a frame the node does not answer when it takes it,
// then a ping: the session handles frames in order, so an error frame it
// sent for the first comes before the pong.
func settleThenPing(c *testClient, frame wire.Frame) attemptResult {
	c.t.Helper()
	id := c.id()
	c.send(frame, &wire.Ping{RequestID: id})
	var result = attemptResult{served: true}
	for {
		reply := c.waitFor("the pong after the frame", func(reply wire.Frame) bool {
			refusal, isRefusal := reply.(*wire.ErrorFrame)
			pong, isPong := reply.(*wire.Pong)
			return isRefusal && refusal.RequestID == 0 || isPong && pong.RequestID == id
		})
		refusal, isRefusal := reply.(*wire.ErrorFrame)
		if !isRefusal {
			return result
		}
		if result.served {
			result = attemptResult{code: refusal.Code}
		}
	}
}

// reset declares walkQueue again if it is gone, fills it, and gives root
// a new subscription holding deliveries to settle (its old one ends).
func (w *frameWalk) reset() {
	w.t.Helper()
	if w.subscription != 0 {
		id := w.root.id()
		w.root.send(&wire.Unsubscribe{RequestID: id, SubscriptionID: w.subscription})
		w.root.reply(id) // ok, or unknown_subscription when a delete ended it
	}
	w.root.mustDeclare(walkQueue, wire.ModeBuffered, wire.QueueOptions{})
	w.root.mustConfirm(walkQueue, wire.BoundaryWritten, "a", "b", "c", "d", "e", "f", "g", "h")
	w.subscription = w.root.subscribe(walkQueue, 8)
	w.tags = w.tags[:0]
	for _, delivery := range w.root.deliveries(w.subscription, 8) {
		w.tags = append(w.tags, delivery.DeliveryTag)
	}
}

// takeTag hands out one of root's unsettled delivery tags, and the
// subscription that holds it.
func (w *frameWalk) takeTag() (subscription, tag uint64) {
	w.t.Helper()
	if len(w.tags) == 0 {
		w.reset()
	}
	tag = w.tags[0]
	w.tags = w.tags[1:]
	return w.subscription, tag
}

// Each rule, tried: a user without the permission is refused, one with
// exactly that permission is served, and a refusal leaves the connection
// open.
func TestEveryClientFrameIsAuthorizedAsDocumented(t *testing.T) {
	b, _ := startUsersBroker(t, walkUsers...)
	w := &frameWalk{t: t, broker: b, root: connectAs(t, b, walkUsers[0].credential())}
	w.reset()
	users := map[string]*testClient{}
	for _, user := range walkUsers[1:] {
		users[user.name] = connectAs(t, b, user.credential())
	}
	for _, tag := range wire.Tags() {
		rule, inTable := clientFrameRules[tag]
		if !inTable {
			continue
		}
		attempt := frameAttempts[tag]
		name := fmt.Sprintf("%s (%s, needs %s)", tag, tag.Name(), rule)
		switch rule {
		case ruleCredential:
			if got := attempt(w, dialBroker(t, b), 0, 0); got.served || got.code != wire.CodeUnauthorized {
				t.Errorf("%s with a wrong token: %+v, want unauthorized", name, got)
			}
			connectAs(t, b, walkUsers[1].credential()) // a right one passes
		case ruleOwnSubscription:
			// Another user's session names root's subscription: it is not
			// its own, whatever the user holds.
			for _, stranger := range []string{"nobody", "only-consume"} {
				subscription, deliveryTag := w.takeTag()
				if got := attempt(w, users[stranger], subscription, deliveryTag); got.served ||
					got.code != wire.CodeUnknownSubscription {
					t.Errorf("%s by %s on root's subscription: %+v, want unknown_subscription", name, stranger, got)
				}
			}
			subscription, deliveryTag := w.takeTag()
			if got := attempt(w, w.root, subscription, deliveryTag); !got.served {
				t.Errorf("%s by root on its own subscription: refused with %s", name, got.code)
			}
			if tag == wire.TagUnsubscribe {
				w.subscription = 0 // gone: the next reset does not end it again
				w.reset()
			}
		case ruleNothing:
			if got := attempt(w, users["nobody"], 0, 0); !got.served {
				t.Errorf("%s by a user without any permission here: refused with %s", name, got.code)
			}
		case ruleVisible:
			if got := attempt(w, users["nobody"], 0, 0); got.served || got.code != wire.CodeForbidden {
				t.Errorf("%s by a user without any permission on the queue: %+v, want forbidden", name, got)
			}
			for _, holder := range []string{"only-declare", "only-publish", "only-consume", "only-admin"} {
				if got := attempt(w, users[holder], 0, 0); !got.served {
					t.Errorf("%s by %s: refused with %s", name, holder, got.code)
				}
			}
		default: // one operation
			for _, user := range walkUsers[1:] {
				want := user.name == "only-"+rule
				got := attempt(w, users[user.name], 0, 0)
				if got.served != want || !want && got.code != wire.CodeForbidden {
					t.Errorf("%s by %s: %+v, want served=%v (refused: forbidden)", name, user.name, got, want)
				}
			}
		}
	}
	for user, c := range users { // every refusal left the connection open
		if got := frameAttempts[wire.TagPing](w, c, 0, 0); !got.served {
			t.Errorf("%s: no pong after the walk", user)
		}
	}
	if denied := b.Metrics().Denials("admin"); denied != 3*4 {
		t.Errorf("fibril_denials_total{operation=\"admin\"} = %v, want 12: delete, purge and change-mode, "+
			"each refused to four users", denied)
	}
}
