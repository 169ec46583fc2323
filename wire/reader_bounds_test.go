package wire

// Memory bounds of Reader: the buffer follows the bytes that arrive,
// never the body length a header declares, and a reader under the hello
// limit holds no more than a hello. These are memory bounds (bytes held),
// not timings.

import (
	"bytes"
	"errors"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// header16MiB is an envelope that announces a 16 MiB publish body.
var header16MiB = []byte{'F', 'P', 'B', '1', 0x01, 0, 0, 0}

// scriptedSource hands out its chunks one Read at a time, calling check
// before each Read, and then ends the stream.
type scriptedSource struct {
	chunks  [][]byte
	arrived int // bytes handed out so far
	check   func(arrived int)
}

func (s *scriptedSource) Read(p []byte) (int, error) {
	if s.check != nil {
		s.check(s.arrived)
	}
	if len(s.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.chunks[0])
	if s.chunks[0] = s.chunks[0][n:]; len(s.chunks[0]) == 0 {
		s.chunks = s.chunks[1:]
	}
	s.arrived += n
	return n, nil
}

func TestReaderBufferFollowsArrivedBytes(t *testing.T) {
	const bodyBytes = 16 << 20
	body := make([]byte, bodyBytes)
	for i := range body {
		body[i] = byte(i * 7)
	}
	chunks := [][]byte{append([]byte(nil), header16MiB...)}
	for offset := 0; offset < bodyBytes; offset += 100 << 10 {
		chunks = append(chunks, body[offset:min(offset+100<<10, bodyBytes)])
	}
	source := &scriptedSource{chunks: chunks}
	reader := NewReader(source, bodyBytes)
	largest := 0
	source.check = func(arrived int) {
		held := cap(reader.in.buf)
		if held > max(readBufferBytes, 5*arrived/2) {
			t.Fatalf("buffer of %d bytes after %d bytes arrived; the bound is max(%d, 2.5 x arrived)",
				held, arrived, readBufferBytes)
		}
		largest = max(largest, held)
	}
	tag, got, err := reader.Next()
	if err != nil || tag != TagPublish || !bytes.Equal(got, body) {
		t.Fatalf("Next: %s, %d bytes, %v", tag, len(got), err)
	}
	if largest > bodyBytes+HeaderBytes+readBufferBytes {
		t.Fatalf("buffer grew to %d bytes for a body of %d", largest, bodyBytes)
	}
	t.Logf("largest buffer %d bytes for a %d-byte body", largest, bodyBytes)
}

func TestReaderHoldsNoMoreThanTwiceAndAHalfAPartialBody(t *testing.T) {
	// The case measured before this bound: 512 KiB of a declared 16 MiB
	// publish, and then the peer stops sending.
	source := &scriptedSource{chunks: [][]byte{append([]byte(nil), header16MiB...), make([]byte, 512<<10)}}
	reader := NewReader(source, 0)
	if _, _, err := reader.Next(); !errors.Is(err, ErrTruncated) {
		t.Fatalf("Next: %v", err)
	}
	if held := cap(reader.in.buf); held > 5*(512<<10+HeaderBytes)/2 {
		t.Fatalf("buffer of %d bytes holds 512 KiB of a declared 16 MiB body", held)
	}
}

func TestReaderUnderHelloLimitThenNodeLimit(t *testing.T) {
	hello := (&Hello{Versions: []uint16{1}, ClientName: "c", AuthToken: bytes.Repeat([]byte{'t'}, 4096)}).Encode(nil)
	publish := (&Publish{Queue: []byte("q"), Messages: []PublishMessage{{Seq: 1, Payload: make([]byte, 200<<10)}}}).Encode(nil)
	reader := NewReader(bytes.NewReader(append(append([]byte(nil), hello...), publish...)), MaxHelloBodyBytes)
	tag, body, err := reader.Next()
	var decoded Hello
	if err != nil || tag != TagHello || decoded.Decode(body) != nil || len(decoded.AuthToken) != 4096 {
		t.Fatalf("hello: %s %v", tag, err)
	}
	if held := cap(reader.in.buf); held > HeaderBytes+MaxHelloBodyBytes {
		t.Fatalf("a reader under the hello limit holds %d bytes", held)
	}
	reader.SetMaxBodyBytes(0)
	if tag, body, err := reader.Next(); err != nil || tag != TagPublish || len(body) != len(publish)-HeaderBytes {
		t.Fatalf("publish after hello: %s, %d bytes, %v", tag, len(body), err)
	}
	if reader.MaxBodyBytes() != DefaultMaxBodyBytes {
		t.Fatalf("MaxBodyBytes = %d", reader.MaxBodyBytes())
	}
}

func TestReaderUnderHelloLimitRefusesALargerFrameUnread(t *testing.T) {
	for _, declared := range []uint32{MaxHelloBodyBytes + 1, 1 << 20, 1 << 30} {
		header := []byte{'F', 'P', 'B', '1', byte(declared >> 24), byte(declared >> 16), byte(declared >> 8), byte(declared)}
		source := &countingReader{source: io.MultiReader(bytes.NewReader(header), bytes.NewReader(make([]byte, 64<<10)))}
		reader := NewReader(source, MaxHelloBodyBytes)
		if _, _, err := reader.Next(); !errors.Is(err, ErrFrameTooLarge) || CodeFor(err) != CodeFrameTooLarge {
			t.Fatalf("declared %d: %v", declared, err)
		}
		if held := cap(reader.in.buf); held > HeaderBytes+MaxHelloBodyBytes || source.read > HeaderBytes+MaxHelloBodyBytes {
			t.Fatalf("declared %d: buffer %d bytes, read %d bytes", declared, held, source.read)
		}
	}
}

// stallingSource sends one envelope and then blocks until released, like
// a peer that announces a body and never sends it.
type stallingSource struct {
	header  []byte
	sent    bool
	stalled *sync.WaitGroup
	release <-chan struct{}
}

func (s *stallingSource) Read(p []byte) (int, error) {
	if !s.sent {
		s.sent = true
		return copy(p, s.header), nil
	}
	s.stalled.Done()
	<-s.release
	return 0, io.EOF
}

// stalledReaders starts readers that each receive header and then
// nothing, waits until every one is blocked reading the body, and returns
// the heap they hold (live heap bytes after a GC, minus the same before
// they started) and the process RSS at that moment. It then releases them
// and checks that each saw a truncated frame.
func stalledReaders(t *testing.T, readers int, limit uint32, header []byte) (heapBytes int64, rssBytes int64) {
	t.Helper()
	var before, during runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var stalled, finished sync.WaitGroup
	release := make(chan struct{})
	errs := make(chan error, readers)
	stalled.Add(readers)
	finished.Add(readers)
	held := make([]*Reader, readers) // kept alive until measured
	for i := range readers {
		held[i] = NewReader(&stallingSource{header: header, stalled: &stalled, release: release}, limit)
		go func(reader *Reader) {
			defer finished.Done()
			_, _, err := reader.Next()
			errs <- err
		}(held[i])
	}
	stalled.Wait()
	runtime.GC()
	runtime.ReadMemStats(&during)
	rssBytes = residentBytes()
	close(release)
	finished.Wait()
	for range readers {
		if err := <-errs; !errors.Is(err, ErrTruncated) {
			t.Fatalf("a stalled reader ended with %v, want a truncated frame", err)
		}
	}
	runtime.KeepAlive(held)
	return int64(during.HeapAlloc) - int64(before.HeapAlloc), rssBytes
}

// residentBytes is the process RSS from /proc/self/status, 0 where that
// is not available.
func residentBytes() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kib << 10
		}
	}
	return 0
}

func TestThousandReadersAnnouncing16MiBHoldOnlyTheirFirstBuffers(t *testing.T) {
	const readers = 1000
	rssBefore := residentBytes()
	heapBytes, rssDuring := stalledReaders(t, readers, DefaultMaxBodyBytes, header16MiB)
	// Each reader holds its first buffer (32 KiB) and a few hundred bytes
	// of Reader, source and channel state; nothing is sized by the 16 MiB
	// the headers announce.
	const boundPerReader = readBufferBytes + 4<<10
	t.Logf("%d readers each announced 16 MiB and sent nothing: live heap +%d KiB (%d bytes per reader; bound %d); RSS %d MiB before, %d MiB while they waited",
		readers, heapBytes>>10, heapBytes/readers, boundPerReader, rssBefore>>20, rssDuring>>20)
	if heapBytes > readers*boundPerReader {
		t.Fatalf("%d stalled readers hold %d bytes of heap; the bound is %d", readers, heapBytes, readers*boundPerReader)
	}
}

func TestThousandReadersUnderTheHelloLimit(t *testing.T) {
	const readers = 1000
	// A header that announces a body within the hello limit, and then
	// nothing: each reader holds one hello-sized buffer.
	header := []byte{'F', 'H', 'L', '1', 0, 0, MaxHelloBodyBytes >> 8, 0}
	heapBytes, _ := stalledReaders(t, readers, MaxHelloBodyBytes, header)
	const boundPerReader = HeaderBytes + MaxHelloBodyBytes + 4<<10
	t.Logf("%d readers under the hello limit, each waiting for an %d-byte body: live heap +%d KiB (%d bytes per reader; bound %d)",
		readers, MaxHelloBodyBytes, heapBytes>>10, heapBytes/readers, boundPerReader)
	if heapBytes > readers*boundPerReader {
		t.Fatalf("%d stalled readers hold %d bytes of heap; the bound is %d", readers, heapBytes, readers*boundPerReader)
	}
}
