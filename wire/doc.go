// Package wire is Fibril's binary frame protocol: the frames clients and
// nodes speak, their codecs, a streaming Reader and Writer, and trace
// files. docs/protocol.md is the specification; this package is its
// reference implementation, and the golden vectors in testdata/wire bind
// the two together. wire imports no other Fibril package.
//
// # Frames
//
// Every frame is a 4-byte ASCII tag, a big-endian u32 body length and the
// body. The tag's last character is the layout version: a new layout is a
// new tag (FDK1, FDK2). Each frame kind is a struct (Publish, Deliver,
// Confirm, ...) whose pointer implements Frame:
//
//	buf = publish.Encode(buf[:0])   // appends envelope and body
//	err = deliver.Decode(body)      // body without the envelope
//
// Encode appends to the caller's slice and Decode reuses the value's own
// slices, so a loop that keeps its buffer and its frame values encodes and
// decodes the hot frames (publish, confirm, deliver, settles, push,
// progress) without allocating. Decoders never panic and never allocate
// for elements the body cannot hold; every failure is a *FrameError that
// wraps one of ErrTruncated, ErrMalformed, ErrFrameTooLarge,
// ErrUnknownFrame or ErrInvalidOptions.
//
// # Aliasing
//
// After a decode, every []byte field (queue names and message ids in hot
// frames, header keys and values, payloads, raw records) points into the
// body that was decoded; string fields are copies. A body read by a Reader
// lives until the Reader's next Next call, so copy what you keep longer.
// When encoding, the frame only reads its fields during Encode.
//
// # Streams
//
//	reader := wire.NewReader(conn, 0)  // 0: DefaultMaxBodyBytes
//	writer := wire.NewWriter(conn, 0)
//	for {
//		tag, body, err := reader.Next()
//		if err != nil { ... }           // io.EOF, or a *FrameError: answer, then close
//		switch tag {
//		case wire.TagPublish:
//			if err := publish.Decode(body); err != nil {
//				writer.WriteFrame(wire.ErrorFrameFor(0, err))
//				...
//			}
//		default:
//			writer.WriteFrame(wire.UnknownFrameError(tag))
//			...
//		}
//		writer.Flush()
//	}
//
// Reader and Writer each belong to one goroutine. Reader enforces the body
// limit before it reads or makes room for a body; Writer gathers frames and
// writes them on Flush (or when 64 KiB are buffered).
//
// # Errors and codes
//
// Code is the stable numeric error code of error frames and negative
// confirms. Codes 100-199 close the connection, 200-299 do not;
// Code.Retryable says whether the same request may succeed later.
// CodeFor maps this package's errors to codes, ErrorFrameFor builds the
// answering error frame and UnknownFrameError the answer to an unknown tag.
//
// # Traces
//
// A Recorder writes frames with monotonic timestamps to a trace file; a
// TraceSwitch given to Readers and Writers (SetTrace) turns recording on
// and off at run time; a TraceReader reads the file back for replay.
package wire
