package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"testing/iotest"
)

// goldenStream returns every golden frame back to back, and the frames.
func goldenStream() ([]byte, [][]byte) {
	var stream []byte
	var frames [][]byte
	for _, c := range goldenCases() {
		frame := c.frame.Encode(nil)
		frames = append(frames, frame)
		stream = append(stream, frame...)
	}
	return stream, frames
}

func TestReaderReadsEveryFrameWhateverTheChunking(t *testing.T) {
	stream, frames := goldenStream()
	sources := map[string]func() io.Reader{
		"whole":    func() io.Reader { return bytes.NewReader(stream) },
		"one byte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(stream)) },
		"half":     func() io.Reader { return iotest.HalfReader(bytes.NewReader(stream)) },
		"data+eof": func() io.Reader { return iotest.DataErrReader(bytes.NewReader(stream)) },
	}
	for name, source := range sources {
		t.Run(name, func(t *testing.T) {
			reader := NewReader(source(), 0)
			for i, frame := range frames {
				tag, body, err := reader.Next()
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if uint32(tag) != binary.BigEndian.Uint32(frame) || !bytes.Equal(body, frame[HeaderBytes:]) {
					t.Fatalf("frame %d: got %s %x", i, tag, body)
				}
			}
			if _, _, err := reader.Next(); err != io.EOF {
				t.Fatalf("after the last frame: %v, want io.EOF", err)
			}
		})
	}
}

// countingReader counts the bytes handed out.
type countingReader struct {
	source io.Reader
	read   int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.source.Read(p)
	c.read += n
	return n, err
}

func TestReaderRefusesOversizedFrameBeforeReadingIt(t *testing.T) {
	header := []byte{'F', 'P', 'B', '1', 0x40, 0, 0, 0} // 1 GiB body
	source := &countingReader{source: io.MultiReader(bytes.NewReader(header), bytes.NewReader(make([]byte, 1<<20)))}
	reader := NewReader(source, 1024)
	tag, body, err := reader.Next()
	if !errors.Is(err, ErrFrameTooLarge) || tag != TagPublish || body != nil {
		t.Fatalf("Next: %s %d bytes, %v", tag, len(body), err)
	}
	if cap(reader.in.buf) > readBufferBytes || source.read > readBufferBytes {
		t.Fatalf("buffer grew to %d, read %d bytes, for a refused frame", cap(reader.in.buf), source.read)
	}
	if CodeFor(err) != CodeFrameTooLarge {
		t.Fatalf("CodeFor = %s", CodeFor(err))
	}
	if _, _, again := reader.Next(); again != err {
		t.Fatalf("error not final: %v", again)
	}
}

func TestReaderReportsTruncationAndStreamErrors(t *testing.T) {
	frame := (&Ping{RequestID: 1}).Encode(nil)
	for cut := 1; cut < len(frame); cut++ {
		reader := NewReader(bytes.NewReader(frame[:cut]), 0)
		if _, _, err := reader.Next(); !errors.Is(err, ErrTruncated) {
			t.Fatalf("stream cut at %d: %v", cut, err)
		}
	}
	failure := errors.New("connection reset")
	reader := NewReader(io.MultiReader(bytes.NewReader(frame[:3]), iotest.ErrReader(failure)), 0)
	if _, _, err := reader.Next(); err != failure {
		t.Fatalf("stream error: %v", err)
	}
}

func TestReaderPassesUnknownTagsThrough(t *testing.T) {
	frame := []byte{'Z', 'Z', 'Z', '9', 0, 0, 0, 2, 'h', 'i'}
	tag, body, err := NewReader(bytes.NewReader(frame), 0).Next()
	if err != nil || tag.Known() || string(body) != "hi" {
		t.Fatalf("got %s %q %v", tag, body, err)
	}
}

func TestReaderBodyCannotClobberTheNextFrame(t *testing.T) {
	stream := append((&Ping{RequestID: 1}).Encode(nil), (&Ping{RequestID: 2}).Encode(nil)...)
	reader := NewReader(bytes.NewReader(stream), 0)
	_, first, _ := reader.Next()
	_ = append(first, 0xff, 0xff, 0xff, 0xff) // must reallocate, not overwrite
	_, second, err := reader.Next()
	var ping Ping
	if err != nil || ping.Decode(second) != nil || ping.RequestID != 2 {
		t.Fatalf("second frame damaged: %x %v", second, err)
	}
}

func TestReaderDropsBufferGrownForOneLargeFrame(t *testing.T) {
	large := (&Push{Partition: 1000, Epoch: 1, RecordCount: 1, Records: make([]byte, 3<<20)}).Encode(nil)
	small := (&Ping{RequestID: 1}).Encode(nil)
	reader := NewReader(bytes.NewReader(append(append(large, small...), small...)), 0)
	for i := 0; i < 3; i++ {
		if _, _, err := reader.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if cap(reader.in.buf) > retainBufferBytes {
		t.Fatalf("buffer kept %d bytes after the large frame", cap(reader.in.buf))
	}
}

// failingWriter fails every write after the first n bytes.
type failingWriter struct {
	accept int
	wrote  bytes.Buffer
}

var errWriteFailed = errors.New("write failed")

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.wrote.Len()+len(p) > f.accept {
		return 0, errWriteFailed
	}
	return f.wrote.Write(p)
}

func TestWriterBuffersUntilFlush(t *testing.T) {
	var out bytes.Buffer
	writer := NewWriter(&out, 0)
	var want []byte
	for _, c := range goldenCases() {
		if err := writer.WriteFrame(c.frame); err != nil {
			t.Fatal(err)
		}
		want = c.frame.Encode(want)
	}
	if out.Len() != 0 || writer.Buffered() != len(want) {
		t.Fatalf("wrote %d bytes before Flush, buffered %d", out.Len(), writer.Buffered())
	}
	if err := writer.Flush(); err != nil || !bytes.Equal(out.Bytes(), want) || writer.Buffered() != 0 {
		t.Fatalf("Flush: %v, %d bytes", err, out.Len())
	}
}

func TestWriterFlushesAFullBuffer(t *testing.T) {
	var out bytes.Buffer
	writer := NewWriter(&out, 0)
	payload := make([]byte, 1024)
	publish := &Publish{Queue: []byte("q"), Messages: []PublishMessage{{Seq: 1, Payload: payload}}}
	for i := 0; out.Len() == 0; i++ {
		if i > 100 {
			t.Fatal("no write after 100 KiB")
		}
		publish.Messages[0].Seq = uint64(i + 1)
		if err := writer.WriteFrame(publish); err != nil {
			t.Fatal(err)
		}
	}
	if out.Len() < flushBufferBytes || writer.Buffered() != 0 {
		t.Fatalf("wrote %d, buffered %d", out.Len(), writer.Buffered())
	}
}

func TestWriterRefusesBadFramesAndStaysUsable(t *testing.T) {
	var out bytes.Buffer
	writer := NewWriter(&out, 64)
	if err := writer.WriteFrame(&Ping{RequestID: 1}); err != nil {
		t.Fatal(err)
	}
	big := &Push{Partition: 1000, Epoch: 1, RecordCount: 1, Records: make([]byte, 100)}
	if err := writer.WriteFrame(big); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
	if err := writer.WriteRaw(TagPush, make([]byte, 65)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("raw over the limit: %v", err)
	}
	long := &Subscribe{RequestID: 1, Queue: string(make([]byte, MaxStringBytes+1))}
	if err := writer.WriteFrame(long); !errors.Is(err, ErrFieldTooLong) {
		t.Fatalf("field too long: %v", err)
	}
	if err := writer.WriteRaw(TagPong, (&Pong{RequestID: 1}).Encode(nil)[HeaderBytes:]); err != nil {
		t.Fatal(err)
	}
	if err := writer.Flush(); err != nil {
		t.Fatal(err)
	}
	want := (&Pong{RequestID: 1}).Encode((&Ping{RequestID: 1}).Encode(nil))
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("wrote %x, want %x", out.Bytes(), want)
	}
	writer.SetMaxBodyBytes(0)
	if err := writer.WriteFrame(big); err != nil {
		t.Fatalf("after raising the limit: %v", err)
	}
}

func TestWriterWriteErrorIsFinal(t *testing.T) {
	writer := NewWriter(&failingWriter{accept: 0}, 0)
	if err := writer.WriteFrame(&Ping{RequestID: 1}); err != nil {
		t.Fatal(err)
	}
	if err := writer.Flush(); err != errWriteFailed {
		t.Fatalf("Flush: %v", err)
	}
	if err := writer.WriteFrame(&Ping{RequestID: 2}); err != errWriteFailed {
		t.Fatalf("after a failed write: %v", err)
	}
}

// TestReaderWriterOverAConnection runs a request-reply exchange over an
// in-memory connection, the way a client and a node use the package.
func TestReaderWriterOverAConnection(t *testing.T) {
	clientSide, serverSide := net.Pipe()
	defer clientSide.Close()
	serverDone := make(chan error, 1)
	go func() {
		defer serverSide.Close()
		reader, writer := NewReader(serverSide, 0), NewWriter(serverSide, 0)
		var publish Publish
		var confirm Confirm
		for {
			tag, body, err := reader.Next()
			if err == io.EOF {
				serverDone <- nil
				return
			}
			if err != nil {
				serverDone <- err
				return
			}
			if tag != TagPublish {
				_ = writer.WriteFrame(UnknownFrameError(tag))
				serverDone <- writer.Flush()
				return
			}
			if err := publish.Decode(body); err != nil {
				serverDone <- err
				return
			}
			first, last := publish.Messages[0].Seq, publish.Messages[len(publish.Messages)-1].Seq
			confirm.Ranges = append(confirm.Ranges[:0], ConfirmRange{First: first, Last: last, Boundary: BoundaryDurable})
			if err := writer.WriteFrame(&confirm); err != nil {
				serverDone <- err
				return
			}
			if err := writer.Flush(); err != nil {
				serverDone <- err
				return
			}
		}
	}()
	reader, writer := NewReader(clientSide, 0), NewWriter(clientSide, 0)
	publish := &Publish{Queue: []byte("orders"), Messages: []PublishMessage{{Seq: 1, Payload: []byte("a")}, {Seq: 2}}}
	if err := writer.WriteFrame(publish); err != nil {
		t.Fatal(err)
	}
	if err := writer.Flush(); err != nil {
		t.Fatal(err)
	}
	tag, body, err := reader.Next()
	var confirm Confirm
	if err != nil || tag != TagConfirm || confirm.Decode(body) != nil ||
		confirm.Ranges[0] != (ConfirmRange{First: 1, Last: 2, Boundary: BoundaryDurable}) {
		t.Fatalf("reply %s %x %v", tag, body, err)
	}
	if err := writer.WriteRaw(Tag('Q'<<24|'Q'<<16|'Q'<<8|'1'), nil); err != nil {
		t.Fatal(err)
	}
	if err := writer.Flush(); err != nil {
		t.Fatal(err)
	}
	tag, body, err = reader.Next()
	var answer ErrorFrame
	if err != nil || tag != TagError || answer.Decode(body) != nil || answer.Code != CodeUnknownFrame {
		t.Fatalf("unknown tag answered with %s %+v %v", tag, answer, err)
	}
	if err := <-serverDone; err != nil {
		t.Fatal(err)
	}
}
