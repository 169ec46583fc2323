package acceptance

import (
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/wire"
)

// fuzzQueue is the queue the fuzzed clients' well-formed frames name. It
// is not one of the real clients' queues, so a frame that happens to be
// valid cannot take or add their messages.
const fuzzQueue = "fuzz-target"

// Bad input under load: fuzzed clients connect again and again and send
// garbage (random bytes, random bodies under every tag, mutated valid
// frames, oversized and truncated frames, stalls mid-frame, settles of
// tags they do not hold) while real clients publish and consume on a
// durable and a buffered queue. The real clients must see no error, no
// dropped connection and no lost message.
//
// FIBRIL_BADINPUT_SECONDS sets how long the fuzzers run (3, or 60 with
// FIBRIL_SOAK=1).
func TestGarbageFromOtherClientsDoesNotReachRealOnes(t *testing.T) {
	seed := testSeed(t)
	seconds := trials(t, "FIBRIL_BADINPUT_SECONDS", 3, 60)
	config := actors.DefaultConfig()
	config.DataDir, config.ListenAddr, config.HTTPAddr = t.TempDir(), "127.0.0.1:0", ""
	config.MaxBodyBytes = 64 << 10
	broker, err := actors.Start(config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := broker.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	address := broker.Addr().String()

	queues := map[string]wire.Mode{"real-durable": wire.ModeDurable, "real-buffered": wire.ModeBuffered}
	h := NewHistory()
	h.LifeStarted()
	l := startLoad(t, h, loadConfig{queues: queues, payloadBytes: 200, ratePerQueue: 1000, prefetch: 32,
		addresses: []string{address}, pauseEvery: 100 * time.Millisecond, pauseFor: 50 * time.Millisecond})
	stop := make(chan struct{})
	var fuzzers sync.WaitGroup
	var sent atomic.Int64
	for worker := range 4 {
		fuzzers.Add(1)
		go func() {
			defer fuzzers.Done()
			random := newRandom(seed + uint64(worker))
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(int64(fuzzOnce(address, random)))
			}
		}()
	}
	time.Sleep(time.Duration(seconds) * time.Second)
	close(stop)
	fuzzers.Wait()
	l.drain(60 * time.Second)
	results := checkLoad(t, h, queues)
	for _, result := range results {
		if result.Refused+result.Unknown > 0 {
			t.Errorf("%s: a real client saw %d refusals and %d unknown outcomes: %v", result.Queue,
				result.Refused, result.Unknown, refusals(h.Record(), result.Queue))
		}
		if result.Duplicates > 0 {
			t.Errorf("%s: a real client saw %d duplicates without any restart", result.Queue, result.Duplicates)
		}
	}
	if errs := l.clientErrors.list(); len(errs) > 0 {
		t.Errorf("real clients got node errors: %v", errs)
	}
	if n := l.disconnects.Load(); n > 0 {
		t.Errorf("real clients were disconnected %d times", n)
	}
	if health := broker.Health(); !health.OK {
		t.Errorf("health after the fuzzing: %+v", health)
	}
	t.Logf("fuzzed clients sent %d garbage frames", sent.Load())
	row := Row{Case: "bad input beside real clients", Trials: 1}
	for _, result := range results {
		row.Add(result)
	}
	summary.Add(row)
}

// fuzzOnce runs one fuzzed connection and returns how many frames or
// chunks it sent.
func fuzzOnce(address string, random *rand.Rand) int {
	conn, err := net.DialTimeout("tcp", address, time.Second)
	if err != nil {
		time.Sleep(10 * time.Millisecond)
		return 0
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	go func() { _, _ = io.Copy(io.Discard, conn) }() // read whatever the node answers
	writer := wire.NewWriter(conn, 1<<20)
	strategy := random.IntN(7)
	if strategy != 0 {
		if writer.WriteFrame(&wire.Hello{Versions: []uint16{wire.ProtocolVersion}, ClientName: "fuzz"}) != nil {
			return 0
		}
	}
	sent := 0
	for range 1 + random.IntN(20) {
		var chunk []byte
		switch strategy {
		case 0, 1: // random bytes, with or without hello first
			chunk = randomBytes(random, random.IntN(2048))
		case 2: // a random body under a random tag, known or not
			chunk = rawFrame(randomTag(random), randomBytes(random, random.IntN(512)))
		case 3: // a valid frame with some bytes flipped
			chunk = mutate(random, validFrame(random))
		case 4: // a body length over the node's limit, then silence
			chunk = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(wire.TagPublish)), 1<<30)
		case 5: // a frame cut short, then a stall
			frame := validFrame(random)
			chunk = frame[:random.IntN(len(frame))]
		case 6: // well-formed requests the node must refuse
			chunk = validFrame(random)
		}
		if _, err := conn.Write(chunk); err != nil {
			break
		}
		_ = writer.Flush()
		sent++
		if strategy == 4 || strategy == 5 {
			time.Sleep(time.Duration(random.IntN(50)) * time.Millisecond)
			break
		}
	}
	return sent
}

func randomBytes(random *rand.Rand, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(random.Uint32())
	}
	return out
}

func randomTag(random *rand.Rand) wire.Tag {
	tags := wire.Tags()
	if random.IntN(4) == 0 {
		return wire.Tag(random.Uint32())
	}
	return tags[random.IntN(len(tags))]
}

func rawFrame(tag wire.Tag, body []byte) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(tag))
	out = binary.BigEndian.AppendUint32(out, uint32(len(body)))
	return append(out, body...)
}

// validFrame encodes a well-formed client frame about the fuzz queue or
// about subscriptions and tags the fuzzed session does not have.
func validFrame(random *rand.Rand) []byte {
	id := random.Uint64()%1000 + 1
	tags := []uint64{random.Uint64(), random.Uint64() % 10}
	frames := []wire.Frame{
		&wire.Declare{RequestID: id, Queue: fuzzQueue},
		&wire.Publish{Queue: []byte(fuzzQueue), Messages: []wire.PublishMessage{
			{Seq: random.Uint64() % 5, MessageID: []byte("fuzz"), Payload: randomBytes(random, random.IntN(64))}}},
		&wire.Subscribe{RequestID: id, Queue: fuzzQueue, Prefetch: uint32(random.IntN(10))},
		&wire.Ack{Settle: wire.Settle{SubscriptionID: random.Uint64() % 4, DeliveryTags: tags}},
		&wire.Nack{SubscriptionID: random.Uint64() % 4, DeliveryTags: tags, Requeue: true},
		&wire.Unsubscribe{RequestID: id, SubscriptionID: random.Uint64() % 4},
		&wire.GetQueueInfo{RequestID: id, Queue: "no-such-queue"},
		&wire.Ping{RequestID: id},
		&wire.Hello{Versions: []uint16{wire.ProtocolVersion}},
	}
	return frames[random.IntN(len(frames))].Encode(nil)
}

func mutate(random *rand.Rand, frame []byte) []byte {
	for range 1 + random.IntN(6) {
		frame[random.IntN(len(frame))] ^= byte(1 + random.IntN(255))
	}
	return frame
}
