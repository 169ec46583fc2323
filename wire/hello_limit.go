package wire

// MaxHelloBodyBytes is the largest hello (FHL1) body a client may send
// (docs/protocol.md 4.1): room for an auth token of a few KiB and every
// other field at a sensible length. Until hello-ok a node reads under this
// limit instead of its max_body_bytes, so a connection that has not
// authenticated can make the node buffer at most this much of a body;
// any larger frame before hello is answered with frame_too_large and the
// connection is closed. The session sets it on its Reader:
//
//	reader := wire.NewReader(conn, wire.MaxHelloBodyBytes)
//	... read and accept the hello ...
//	reader.SetMaxBodyBytes(nodeLimit)
const MaxHelloBodyBytes = 8 << 10
