package client_test

// RetryUnknownPublishes against the fake node: a publish whose connection
// ends before its confirm is sent again after the reconnect, with the same
// producer pair and message id, only when its queue deduplicates; it
// fails with ErrConnectionLost otherwise, and always without the option.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/client/clienttest"
	"github.com/fibrilmq/fibril/wire"
)

// producerSeqsSeen records, per FPB2 frame, its producer id and numbers.
type producerSeqsSeen struct {
	frames chan *wire.PublishIdempotent
}

func (p *producerSeqsSeen) hook(_ *clienttest.Conn, frame wire.Frame) clienttest.Action {
	if f, ok := frame.(*wire.PublishIdempotent); ok {
		copied := &wire.PublishIdempotent{ProducerID: append([]byte(nil), f.ProducerID...)}
		for _, m := range f.Messages {
			copied.Messages = append(copied.Messages, wire.PublishMessage{Seq: m.Seq, ProducerSeq: m.ProducerSeq,
				MessageID: append([]byte(nil), m.MessageID...)})
		}
		select {
		case p.frames <- copied:
		default:
		}
	}
	return clienttest.Handle
}

func TestRetryUnknownPublishesOnlyToAQueueThatDeduplicates(t *testing.T) {
	for _, tc := range []struct {
		name      string
		retry     bool
		config    client.QueueConfig
		wantRetry bool
	}{
		{"dedup queue, option on", true, client.QueueConfig{DedupWindow: time.Minute}, true},
		{"queue without dedup", true, client.QueueConfig{}, false},
		{"option off", false, client.QueueConfig{DedupWindow: time.Minute}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := startServer(t, clienttest.Config{})
			seen := &producerSeqsSeen{frames: make(chan *wire.PublishIdempotent, 16)}
			server.SetHook(seen.hook)
			c := dial(t, client.Options{Idempotent: true, RetryUnknownPublishes: tc.retry, WaitForReconnect: true}, server)
			declare(t, c, "q", tc.config)
			server.HoldConfirms(true)
			future, err := c.PublishAsync(context.Background(), "q", client.Message{MessageID: "m-1", Payload: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			first := <-seen.frames
			if string(first.ProducerID) != c.ProducerID() || first.Messages[0].ProducerSeq != future.Seq() {
				t.Fatalf("first send %+v: want producer %q, number %d", first, c.ProducerID(), future.Seq())
			}
			server.DropConnections() // the confirm is held: the outcome is unknown
			server.HoldConfirms(false)
			confirm, err := future.Wait(guardedContext(t))
			if !tc.wantRetry {
				if !errors.Is(err, client.ErrConnectionLost) {
					t.Fatalf("got %+v %v, want ErrConnectionLost (no retry)", confirm, err)
				}
				select {
				case again := <-seen.frames:
					t.Fatalf("the publish was sent again: %+v", again)
				default:
				}
				return
			}
			if err != nil {
				t.Fatalf("retried publish: %v", err)
			}
			again := <-seen.frames
			m := again.Messages[0]
			if string(again.ProducerID) != c.ProducerID() || m.ProducerSeq != future.Seq() || string(m.MessageID) != "m-1" {
				t.Fatalf("retry %+v: want the same producer pair and id", again)
			}
		})
	}
}
