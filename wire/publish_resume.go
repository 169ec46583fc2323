// The resume frame of protocol version 3. Layout:
//
//	FRS1 resume-publishing  queue string
//
// A client sends it to lift the publish fence a refusal left on one queue
// of its connection (docs/protocol.md 4.3, "Order across a refusal"). It
// carries no request id and gets no answer, like a settle: it cannot fail.
package wire

// ResumePublishing (FRS1) lifts the publish fence on one queue of the
// connection: publishes to it sent after this frame are served again.
type ResumePublishing struct {
	Queue string
}

func (*ResumePublishing) Tag() Tag { return TagResumePublishing }

func (f *ResumePublishing) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagResumePublishing)
	dst = appendString(dst, "queue", f.Queue)
	return endFrame(dst, start)
}

func (f *ResumePublishing) Decode(body []byte) error {
	d := newDecoder(TagResumePublishing, body)
	f.Queue = d.str("queue")
	return d.finish()
}
