package wire

import (
	"bytes"
	"testing"
)

// The handshake's proofs bind the secret, both identities and both nonces,
// and the two sides' proofs differ.
func TestPeerProofBindsEverything(t *testing.T) {
	secret := []byte("cluster-secret")
	dialer := PeerHello{Version: 1, ClusterID: 1, NodeID: "node1", Instance: 0x1111, Nonce: goldenNonce(0x11), MaxBodyBytes: 32 << 20}
	acceptor := PeerHello{Version: 1, ClusterID: 1, NodeID: "node2", Instance: 0x2222, Nonce: goldenNonce(0x22), MaxBodyBytes: 32 << 20}
	proof := PeerProof(secret, PeerProofDialer, &dialer, &acceptor)
	if len(proof) != PeerProofBytes {
		t.Fatalf("proof has %d bytes, want %d", len(proof), PeerProofBytes)
	}
	if !CheckPeerProof(proof, secret, PeerProofDialer, &dialer, &acceptor) {
		t.Fatal("a proof does not check against its own inputs")
	}
	if bytes.Equal(proof, PeerProof(secret, PeerProofAcceptor, &dialer, &acceptor)) {
		t.Fatal("the dialer's and the acceptor's proofs are equal")
	}
	if CheckPeerProof(proof, []byte("other-secret"), PeerProofDialer, &dialer, &acceptor) {
		t.Fatal("a proof checks under another secret")
	}
	changes := map[string]func(h *PeerHello){
		"version":        func(h *PeerHello) { h.Version++ },
		"cluster_id":     func(h *PeerHello) { h.ClusterID++ },
		"node_id":        func(h *PeerHello) { h.NodeID += "x" },
		"instance":       func(h *PeerHello) { h.Instance++ },
		"nonce":          func(h *PeerHello) { h.Nonce = goldenNonce(0x33) },
		"max_body_bytes": func(h *PeerHello) { h.MaxBodyBytes++ },
	}
	for field, change := range changes {
		for _, side := range []string{"dialer", "acceptor"} {
			d, a := dialer, acceptor
			if side == "dialer" {
				change(&d)
			} else {
				change(&a)
			}
			if CheckPeerProof(proof, secret, PeerProofDialer, &d, &a) {
				t.Errorf("the proof still checks after changing the %s's %s", side, field)
			}
		}
	}
	// Moving bytes between adjacent fields must change the proof too.
	shifted := dialer
	shifted.NodeID = "node"
	moved := acceptor
	moved.NodeID = "1node2"
	if CheckPeerProof(proof, secret, PeerProofDialer, &shifted, &moved) {
		t.Error("the proof checks after moving a byte from one node id to the other")
	}
}
