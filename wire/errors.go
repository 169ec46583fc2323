package wire

import (
	"errors"
	"fmt"
)

// Errors a decoder, Reader or encoder reports. Each is wrapped in a
// *FrameError that names the tag and, for body errors, the field; test with
// errors.Is.
var (
	// ErrTruncated: the body (or the stream) ended before the layout did.
	ErrTruncated = errors.New("wire: truncated frame")
	// ErrMalformed: the bytes are present but break the layout: trailing
	// bytes, a bool that is not 0 or 1, an unknown enum value, invalid
	// UTF-8, a count larger than the remaining body could hold, a zero
	// request id, sequence numbers out of order.
	ErrMalformed = errors.New("wire: malformed frame")
	// ErrFrameTooLarge: the declared body length is over the reader's
	// limit, or an encoded body is over the writer's limit.
	ErrFrameTooLarge = errors.New("wire: frame too large")
	// ErrUnknownFrame: no layout is known for the tag.
	ErrUnknownFrame = errors.New("wire: unknown frame tag")
	// ErrInvalidOptions: a declare frame is well formed but its options
	// map has an unknown key or a value of the wrong type or range. The
	// frame's RequestID and Queue are decoded when this is reported, so
	// the server can answer with code invalid_options and keep the
	// connection.
	ErrInvalidOptions = errors.New("wire: invalid declare options")
	// ErrFieldTooLong: a value cannot be encoded because it is longer than
	// its length prefix allows (a string over 65535 bytes, a list over its
	// count width).
	ErrFieldTooLong = errors.New("wire: field too long to encode")
)

// FrameError is the typed error of every frame-level failure.
type FrameError struct {
	Tag    Tag    // the frame's tag (zero when the envelope itself was cut short)
	Field  string // the layout field where decoding stopped; empty for envelope errors
	Offset int    // byte offset of that field inside the body
	Detail string // what was wrong, for people
	Err    error  // one of the package's sentinel errors
}

func (e *FrameError) Error() string {
	text := fmt.Sprintf("%v: %s (%s)", e.Err, e.Tag, e.Tag.Name())
	if e.Field != "" {
		text += fmt.Sprintf(": field %q at body offset %d", e.Field, e.Offset)
	}
	if e.Detail != "" {
		text += ": " + e.Detail
	}
	return text
}

func (e *FrameError) Unwrap() error { return e.Err }

// fieldTooLong is the panic value of an encoder given a value its length
// prefix cannot hold. Append recovers it and returns it as a *FrameError.
type fieldTooLong struct {
	field  string
	length int
	limit  int
}

// Append appends f's encoding to dst like f.Encode, but returns an error
// instead of panicking when a field is too long, and refuses a body over
// maxBodyBytes (0 means DefaultMaxBodyBytes). On error dst is returned
// unchanged (its spare capacity may have been written).
func Append(dst []byte, f Frame, maxBodyBytes uint32) (out []byte, err error) {
	if maxBodyBytes == 0 {
		maxBodyBytes = DefaultMaxBodyBytes
	}
	start := len(dst)
	defer func() {
		if recovered := recover(); recovered != nil {
			tooLong, ok := recovered.(fieldTooLong)
			if !ok {
				panic(recovered)
			}
			out = dst[:start]
			err = &FrameError{Tag: f.Tag(), Field: tooLong.field, Err: ErrFieldTooLong,
				Detail: fmt.Sprintf("%d exceeds the limit of %d", tooLong.length, tooLong.limit)}
		}
	}()
	out = f.Encode(dst)
	if bodyBytes := len(out) - start - HeaderBytes; bodyBytes > int(maxBodyBytes) {
		return dst[:start], &FrameError{Tag: f.Tag(), Err: ErrFrameTooLarge,
			Detail: fmt.Sprintf("body of %d bytes exceeds the limit of %d", bodyBytes, maxBodyBytes)}
	}
	return out, nil
}
