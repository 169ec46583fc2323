package bench

// Machine floors: the fastest this machine can do the things a publish
// cannot avoid, measured before the cases so every result can be read as a
// multiple of its floor.
//
//   - Loopback TCP round trip: an echo server on 127.0.0.1:0 in this
//     process; the client writes one message of MessageBytes and reads the
//     same number of bytes back, one message in flight. Samples are whole
//     round trips.
//   - The same round trip after an idle gap (IdleGap, 10 ms by default):
//     the client sleeps before each one, so both sides wake from idle, as
//     every hop of a broker does at 100 messages per second. On a virtual
//     machine waking a sleeping thread costs far more than a busy round
//     trip, and this row shows how much. It is printed beside the others
//     but not used in the p50 multiples.
//   - write(2): one MessageBytes write appended to a fresh file in Dir, the
//     server's data directory (by default the system temp directory). Each
//     write extends the file, as a log append does without preallocation.
//   - write(2) + fdatasync: the same, each write followed by fdatasync of the
//     file (fsync where fdatasync does not exist), timed together.
//
// Each measurement first runs a tenth of its count (at least one) untimed,
// so connection setup and first-touch costs are not in the samples. Every
// figure is a Summary of the raw samples, like the cases' figures.

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// Default floor counts: enough samples for a meaningful p99.9 of the cheap
// floors, and about a second or two of fdatasync on a typical disk.
const (
	DefaultFloorRoundTrips   = 10_000
	DefaultFloorWrites       = 10_000
	DefaultFloorSyncedWrites = 1_000
	// DefaultFloorIdleRoundTrips round trips 10 ms apart take about 2 s.
	DefaultFloorIdleRoundTrips = 200
	DefaultFloorIdleGap        = 10 * time.Millisecond
)

// FloorOptions configure MeasureFloors.
type FloorOptions struct {
	// Dir is where the write floors run: the server's data directory.
	// Empty means os.TempDir().
	Dir          string
	MessageBytes int
	RoundTrips   int
	Writes       int
	SyncedWrites int
	// IdleRoundTrips round trips are timed IdleGap apart; 0 skips them.
	IdleRoundTrips int
	IdleGap        time.Duration
}

// DefaultFloorOptions returns the floor options of `fibrilctl bench`.
func DefaultFloorOptions() FloorOptions {
	return FloorOptions{MessageBytes: DefaultMessageBytes, RoundTrips: DefaultFloorRoundTrips,
		Writes: DefaultFloorWrites, SyncedWrites: DefaultFloorSyncedWrites,
		IdleRoundTrips: DefaultFloorIdleRoundTrips, IdleGap: DefaultFloorIdleGap}
}

// Floors are the measured floors of this machine.
type Floors struct {
	Dir               string  `json:"dir"`
	MessageBytes      int     `json:"message_bytes"`
	LoopbackRoundTrip Summary `json:"loopback_tcp_round_trip"`
	// IdleRoundTrip is empty when it was not measured.
	IdleRoundTrip Summary       `json:"loopback_tcp_round_trip_after_idle"`
	IdleGap       time.Duration `json:"idle_gap_ns,omitempty"`
	Write         Summary       `json:"write"`
	WriteSync     Summary       `json:"write_fdatasync"`
}

// StorageFloor returns the median storage operation a confirm in the mode
// waits for: write+fdatasync for durable, write for buffered.
func (f *Floors) StorageFloor(mode Mode) time.Duration {
	if mode == ModeDurable {
		return f.WriteSync.At(P50)
	}
	return f.Write.At(P50)
}

// PathFloor returns the floor of a publish-to-confirm or publish-to-delivery
// median in the mode: the median loopback round trip plus StorageFloor.
func (f *Floors) PathFloor(mode Mode) time.Duration {
	return f.LoopbackRoundTrip.At(P50) + f.StorageFloor(mode)
}

// MeasureFloors measures the three floors in turn.
func MeasureFloors(ctx context.Context, opts FloorOptions) (*Floors, error) {
	if opts.MessageBytes <= 0 || opts.RoundTrips <= 0 || opts.Writes <= 0 || opts.SyncedWrites <= 0 ||
		opts.IdleRoundTrips < 0 || (opts.IdleRoundTrips > 0 && opts.IdleGap <= 0) {
		return nil, fmt.Errorf("%w: floors %+v", ErrInvalidOptions, opts)
	}
	if opts.Dir == "" {
		opts.Dir = os.TempDir()
	}
	floors := &Floors{Dir: opts.Dir, MessageBytes: opts.MessageBytes}
	var err error
	if floors.LoopbackRoundTrip, err = MeasureLoopbackRoundTrip(ctx, opts.MessageBytes, opts.RoundTrips); err != nil {
		return nil, err
	}
	if opts.IdleRoundTrips > 0 {
		floors.IdleGap = opts.IdleGap
		if floors.IdleRoundTrip, err = measureRoundTrips(ctx, opts.MessageBytes, opts.IdleRoundTrips, opts.IdleGap); err != nil {
			return nil, err
		}
	}
	if floors.Write, err = MeasureWrites(ctx, opts.Dir, opts.MessageBytes, opts.Writes, false); err != nil {
		return nil, err
	}
	if floors.WriteSync, err = MeasureWrites(ctx, opts.Dir, opts.MessageBytes, opts.SyncedWrites, true); err != nil {
		return nil, err
	}
	return floors, nil
}

func untimedCount(count int) int { return max(1, count/10) }

// MeasureLoopbackRoundTrip times count round trips of messageBytes each way
// through an in-process echo server on 127.0.0.1.
func MeasureLoopbackRoundTrip(ctx context.Context, messageBytes, count int) (Summary, error) {
	return measureRoundTrips(ctx, messageBytes, count, 0)
}

// measureRoundTrips times count round trips, sleeping gap before each.
func measureRoundTrips(ctx context.Context, messageBytes, count int, gap time.Duration) (Summary, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Summary{}, fmt.Errorf("bench: loopback floor: %w", err)
	}
	defer listener.Close()
	echoDone := make(chan error, 1)
	go func() { echoDone <- echoOnce(listener, messageBytes) }()
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", listener.Addr().String())
	if err != nil {
		return Summary{}, fmt.Errorf("bench: loopback floor: %w", err)
	}
	message, reply := make([]byte, messageBytes), make([]byte, messageBytes)
	recorder := NewRecorder(count)
	clock := NewRealClock()
	for i := 0; i < untimedCount(count)+count && err == nil; i++ {
		if gap > 0 {
			time.Sleep(gap)
		}
		started := clock.Now()
		if _, err = conn.Write(message); err == nil {
			_, err = io.ReadFull(conn, reply)
		}
		if i >= untimedCount(count) {
			recorder.Record(clock.Now() - started)
		}
		if err == nil {
			err = ctx.Err()
		}
	}
	conn.Close()
	if echoErr := <-echoDone; err == nil && echoErr != nil {
		err = echoErr
	}
	if err != nil {
		return Summary{}, fmt.Errorf("bench: loopback floor: %w", err)
	}
	return recorder.Summary(), nil
}

// echoOnce accepts one connection and echoes whole messages until it closes.
func echoOnce(listener net.Listener, messageBytes int) error {
	conn, err := listener.Accept()
	if err != nil {
		return err
	}
	defer conn.Close()
	buffer := make([]byte, messageBytes)
	for {
		if _, err := io.ReadFull(conn, buffer); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if _, err := conn.Write(buffer); err != nil {
			return err
		}
	}
}

// MeasureWrites times count appends of messageBytes to a new file in dir,
// each followed by fdatasync when sync is set. The file is removed after.
func MeasureWrites(ctx context.Context, dir string, messageBytes, count int, sync bool) (Summary, error) {
	file, err := os.CreateTemp(dir, "fibril-bench-floor-*.tmp")
	if err != nil {
		return Summary{}, fmt.Errorf("bench: write floor: %w", err)
	}
	defer os.Remove(file.Name())
	defer file.Close()
	message := make([]byte, messageBytes)
	recorder := NewRecorder(count)
	clock := NewRealClock()
	for i := 0; i < untimedCount(count)+count; i++ {
		if err := ctx.Err(); err != nil {
			return Summary{}, err
		}
		started := clock.Now()
		if _, err := file.Write(message); err != nil {
			return Summary{}, fmt.Errorf("bench: write floor: %w", err)
		}
		if sync {
			if err := syncData(file); err != nil {
				return Summary{}, fmt.Errorf("bench: write floor: fdatasync: %w", err)
			}
		}
		if i >= untimedCount(count) {
			recorder.Record(clock.Now() - started)
		}
	}
	return recorder.Summary(), nil
}

func (f *Floors) writeMarkdown(b *strings.Builder) {
	fmt.Fprintf(b, "Floors of this machine, %d-byte messages, files in %s\n\n", f.MessageBytes, f.Dir)
	b.WriteString("| floor | samples | p50 µs | p99 µs | p99.9 µs | max µs |\n|---|---|---|---|---|---|\n")
	for _, row := range []struct {
		name    string
		summary Summary
	}{
		{"loopback TCP round trip", f.LoopbackRoundTrip},
		{fmt.Sprintf("loopback TCP round trip, %v apart", f.IdleGap), f.IdleRoundTrip},
		{"write(2), appending", f.Write},
		{"write(2) + fdatasync, appending", f.WriteSync},
	} {
		s := row.summary
		if s.Count == 0 {
			continue
		}
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s |\n", row.name, s.Count,
			microseconds(s.At(P50)), microseconds(s.At(P99)), microseconds(s.At(P999)), microseconds(s.Max))
	}
	fmt.Fprintf(b, "\nFloor of a p50: durable %s ms (round trip + write + fdatasync), buffered %s ms (round trip + write).\n\n",
		milliseconds(f.PathFloor(ModeDurable)), milliseconds(f.PathFloor(ModeBuffered)))
}

func microseconds(d time.Duration) string {
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond))
}
