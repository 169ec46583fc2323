package actors

// Every frame the node sends keeps within the client's max_body_bytes
// (docs/protocol.md, "Message size"): the session passes what it pushes
// through wire.FitFrame, which splits range and delivery lists, shortens
// messages for people, trims lists (more = true) and answers a reply that
// cannot fit with invalid_request. Before hello the protocol default
// applies.

import "github.com/fibrilmq/fibril/wire"

// fitToClient returns frames, with each one that would break the client's
// body limit replaced by the frames that keep it. It allocates only when
// a frame does not fit.
func (s *session) fitToClient(frames []wire.Frame) []wire.Frame {
	limit := s.clientMaxBody()
	for i, frame := range frames {
		parts := wire.FitFrame(frame, limit)
		if parts == nil {
			continue
		}
		fitted := append(make([]wire.Frame, 0, len(frames)+len(parts)), frames[:i]...)
		fitted = append(fitted, parts...)
		for _, rest := range frames[i+1:] {
			if more := wire.FitFrame(rest, limit); more != nil {
				fitted = append(fitted, more...)
			} else {
				fitted = append(fitted, rest)
			}
		}
		return fitted
	}
	return frames
}
