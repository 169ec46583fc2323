package main

// Two diagnostics behind environment variables, for docs/performance.md's
// account of where the time goes. Neither runs in make test.
//
// FIBRIL_BENCH_PROBE=ADDR takes a running node apart at a low rate: one
// request every 10 ms (so every hop wakes from idle, as at 100 messages per
// second), 300 of each, timed from the raw samples:
//
//   - frames written straight to a socket, without the SDK: ping, and publish of
//     1 KiB to a buffered and to a durable queue, waiting for the answer;
//   - the same through the SDK: Ping, and Publish (which waits for the
//     confirm on the connection's reader);
//
//	FIBRIL_BENCH_PROBE=127.0.0.1:7420 go test ./cmd/fibrilctl -run BenchProbe -v
//
// FIBRIL_BENCH_PROFILE=FILE runs the broker in this process, runs one case
// against it through the bench command (FIBRIL_BENCH_PROFILE_CASE, default
// steady-10k; FIBRIL_BENCH_PROFILE_MODE, default buffered; 2 s warm-up,
// 10 s measured) and writes a CPU profile of the measured part to FILE.
// The benchmark's own client is in the profile too; the broker's share is
// under package actors and the actor library:
//
//	FIBRIL_BENCH_PROFILE=/tmp/cpu.pprof go test ./cmd/fibrilctl -run BenchBrokerProfile -v
//	go tool pprof -top -cum /tmp/cpu.pprof
//	go tool pprof -peek 'runtime.newstack$' /tmp/cpu.pprof

import (
	"context"
	"net"
	"os"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/bench"
	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/wire"
)

const (
	probeCount    = 300
	probeInterval = 10 * time.Millisecond
)

// probeSeries times probeCount calls of do, probeInterval apart.
func probeSeries(t *testing.T, name string, do func() error) {
	t.Helper()
	recorder := bench.NewRecorder(probeCount)
	for range probeCount {
		time.Sleep(probeInterval)
		started := time.Now()
		if err := do(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		recorder.Record(time.Since(started))
	}
	s := recorder.Summary()
	t.Logf("%-28s p50 %7.1f µs  p90 %7.1f µs  p99 %7.1f µs  (%d samples, %v apart)", name,
		float64(s.At(bench.P50))/1e3, float64(s.At(bench.P90))/1e3, float64(s.At(bench.P99))/1e3, s.Count, probeInterval)
}

// rawConnection speaks frames on a socket, one request at a time.
type rawConnection struct {
	reader *wire.Reader
	writer *wire.Writer
}

func (c rawConnection) call(frame wire.Frame) (wire.Frame, error) {
	if err := c.writer.WriteFrame(frame); err != nil {
		return nil, err
	}
	if err := c.writer.Flush(); err != nil {
		return nil, err
	}
	tag, body, err := c.reader.Next()
	if err != nil {
		return nil, err
	}
	return wire.DecodeFrame(tag, body)
}

func TestBenchProbe(t *testing.T) {
	address := os.Getenv("FIBRIL_BENCH_PROBE")
	if address == "" {
		t.Skip("set FIBRIL_BENCH_PROBE=ADDR to probe a running node")
	}
	socket, err := net.Dial("tcp", address)
	if err != nil {
		t.Fatal(err)
	}
	defer socket.Close()
	raw := rawConnection{reader: wire.NewReader(socket, 0), writer: wire.NewWriter(socket, 0)}
	if _, err := raw.call(&wire.Hello{Versions: []uint16{wire.ProtocolVersion}, ClientName: "bench probe"}); err != nil {
		t.Fatal(err)
	}
	prefix := "probe-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	modes := []wire.Mode{wire.ModeBuffered, wire.ModeDurable}
	for i, mode := range modes {
		answer, err := raw.call(&wire.Declare{RequestID: uint64(i + 1), Queue: prefix + mode.String(), Mode: mode})
		if _, ok := answer.(*wire.DeclareOKMode); err != nil || !ok {
			t.Fatalf("declare %s: %v %v", mode, answer, err)
		}
	}
	requestID, publishSeq := uint64(100), uint64(0)
	probeSeries(t, "socket ping", func() error {
		requestID++
		_, err := raw.call(&wire.Ping{RequestID: requestID})
		return err
	})
	payload := make([]byte, 1024)
	for _, mode := range modes {
		queue := []byte(prefix + mode.String())
		probeSeries(t, "socket publish "+mode.String(), func() error {
			publishSeq++
			answer, err := raw.call(&wire.Publish{Queue: queue, Messages: []wire.PublishMessage{{Seq: publishSeq, Payload: payload}}})
			if _, ok := answer.(*wire.Confirm); err == nil && !ok {
				t.Fatalf("publish answered with %v", answer)
			}
			return err
		})
	}
	ctx := context.Background()
	sdk, err := client.Dial(ctx, client.Options{Addresses: []string{address}})
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	probeSeries(t, "SDK ping", func() error { _, err := sdk.Ping(ctx); return err })
	for _, mode := range modes {
		queue := prefix + mode.String()
		probeSeries(t, "SDK publish "+mode.String(), func() error {
			_, err := sdk.Publish(ctx, queue, client.Message{Payload: payload})
			return err
		})
		if _, err := sdk.DeleteQueue(ctx, queue); err != nil {
			t.Error(err)
		}
	}
}

func TestBenchBrokerProfile(t *testing.T) {
	file := os.Getenv("FIBRIL_BENCH_PROFILE")
	if file == "" {
		t.Skip("set FIBRIL_BENCH_PROFILE=FILE to profile the broker under one case")
	}
	caseName, mode := os.Getenv("FIBRIL_BENCH_PROFILE_CASE"), os.Getenv("FIBRIL_BENCH_PROFILE_MODE")
	if caseName == "" {
		caseName = bench.CaseSteady10k
	}
	if mode == "" {
		mode = string(bench.ModeBuffered)
	}
	broker := startBroker(t, t.TempDir(), "127.0.0.1:0")
	out, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	const warmup, duration = 2 * time.Second, 10 * time.Second
	profiling := make(chan error, 1)
	go func() {
		time.Sleep(warmup)
		if err := pprof.StartCPUProfile(out); err != nil {
			profiling <- err
			return
		}
		time.Sleep(duration)
		pprof.StopCPUProfile()
		profiling <- nil
	}()
	r := fibrilctlAt(t, broker.Addr().String(), "bench", "--case", caseName, "--mode", mode,
		"--warmup", warmup.String(), "--duration", duration.String(), "--floors=false", "--quiet")
	if err := <-profiling; err != nil {
		t.Fatal(err)
	}
	if r.code != exitOK {
		t.Fatalf("bench: %+v", r)
	}
	t.Logf("profile of %s %s written to %s\n%s", caseName, mode, file, r.stdout)
}
