// Peer-link frames: how one node opens a link to another and how failover
// seals a partition's replicas. Layouts:
//
//	FXH1 peer-hello      version u16, cluster_id u64, node_id string, instance u64,
//	                     nonce bytes(16), max_body_bytes u32
//	FXC1 peer-challenge  version u16, cluster_id u64, node_id string, instance u64,
//	                     nonce bytes(16), max_body_bytes u32, proof bytes(32)
//	FXA1 peer-auth       proof bytes(32)
//	FQS1 seal            request_id u64, partition u64, epoch u64, owner string
//	FQT1 sealed          request_id u64, partition u64, epoch u64, instance u64,
//	                     durable_next u64, first_offset u64, history list<u16>{epoch u64, first_offset u64}
//
// The link handshake. The node that dials sends FXH1; the node that
// accepted answers FXC1 with its own identity, a fresh nonce and a proof
// that it knows the cluster secret; the dialer checks the proof and sends
// FXA1 with its own. Each proof is an HMAC-SHA-256 keyed with the cluster
// secret over both hellos' fields and both nonces, with a different label
// per side (PeerProof), so a recorded handshake cannot be replayed: the
// other side's nonce is new every time. The dialer may send requests right
// after FXA1; the acceptor reads none of them before FXA1 checks out, and
// answers a bad proof, another cluster id or an unknown node with an
// error frame (unauthorized) and a closed link. When links run inside TLS,
// the handshake runs unchanged inside it.
//
// On a link the dialer sends requests (push, fetch, seal, ping) and the
// acceptor answers them (progress, push-refused, page, sealed, pong,
// error); a node that needs to ask the other side something uses the link
// it dialed itself.
package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// PeerProtocolVersion is the version of the peer-link protocol this
// package speaks.
const PeerProtocolVersion = 1

// PeerNonceBytes and PeerProofBytes are the fixed sizes of a handshake's
// nonce and proof.
const (
	PeerNonceBytes = 16
	PeerProofBytes = sha256.Size
)

// PeerHello (FXH1) opens a peer link.
type PeerHello struct {
	Version      uint16
	ClusterID    uint64 // the cluster's deployment id
	NodeID       string // the dialing node's id in the cluster config
	Instance     uint64 // the dialing process's replica instance (not 0)
	Nonce        []byte // PeerNonceBytes random bytes
	MaxBodyBytes uint32 // the largest body the dialer accepts (0: DefaultMaxBodyBytes)
}

func (*PeerHello) Tag() Tag { return TagPeerHello }

func (f *PeerHello) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagPeerHello)
	dst = f.appendIdentity(dst)
	return endFrame(dst, start)
}

func (f *PeerHello) appendIdentity(dst []byte) []byte {
	dst = appendU16(dst, f.Version)
	dst = appendU64(dst, f.ClusterID)
	dst = appendString(dst, "node_id", f.NodeID)
	dst = appendU64(dst, f.Instance)
	dst = appendBytes(dst, "nonce", f.Nonce)
	return appendU32(dst, f.MaxBodyBytes)
}

func (f *PeerHello) Decode(body []byte) error {
	d := newDecoder(TagPeerHello, body)
	f.decodeIdentity(&d)
	return d.finish()
}

func (f *PeerHello) decodeIdentity(d *decoder) {
	f.Version = d.u16("version")
	f.ClusterID = d.u64("cluster_id")
	at := d.off
	f.NodeID = d.str("node_id")
	if f.NodeID == "" && d.err == nil {
		d.off = at
		d.failf("node_id", "is empty")
	}
	f.Instance = d.nonZeroU64("instance")
	at = d.off
	f.Nonce = d.bytes("nonce")
	if len(f.Nonce) != PeerNonceBytes && d.err == nil {
		d.off = at
		d.failf("nonce", "has %d bytes, want %d", len(f.Nonce), PeerNonceBytes)
	}
	f.MaxBodyBytes = d.u32("max_body_bytes")
}

// PeerChallenge (FXC1) answers a peer hello with the acceptor's identity,
// its nonce and its proof.
type PeerChallenge struct {
	PeerHello        // the acceptor's own identity and nonce
	Proof     []byte // PeerProofBytes: PeerProof(secret, PeerProofAcceptor, hello, challenge identity)
}

func (*PeerChallenge) Tag() Tag { return TagPeerChallenge }

func (f *PeerChallenge) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagPeerChallenge)
	dst = f.appendIdentity(dst)
	dst = appendBytes(dst, "proof", f.Proof)
	return endFrame(dst, start)
}

func (f *PeerChallenge) Decode(body []byte) error {
	d := newDecoder(TagPeerChallenge, body)
	f.decodeIdentity(&d)
	f.Proof = d.proof()
	return d.finish()
}

// PeerAuth (FXA1) completes the handshake with the dialer's proof.
type PeerAuth struct {
	Proof []byte // PeerProofBytes: PeerProof(secret, PeerProofDialer, hello, challenge identity)
}

func (*PeerAuth) Tag() Tag { return TagPeerAuth }

func (f *PeerAuth) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagPeerAuth)
	dst = appendBytes(dst, "proof", f.Proof)
	return endFrame(dst, start)
}

func (f *PeerAuth) Decode(body []byte) error {
	d := newDecoder(TagPeerAuth, body)
	f.Proof = d.proof()
	return d.finish()
}

func (d *decoder) proof() []byte {
	at := d.off
	proof := d.bytes("proof")
	if len(proof) != PeerProofBytes && d.err == nil {
		d.off = at
		d.failf("proof", "has %d bytes, want %d", len(proof), PeerProofBytes)
	}
	return proof
}

// Labels that make the two sides' proofs differ.
const (
	PeerProofAcceptor = "fibril peer link: acceptor"
	PeerProofDialer   = "fibril peer link: dialer"
)

// PeerProof is the HMAC-SHA-256, keyed with the cluster secret, of a label
// and both sides' identities and nonces, each field length-prefixed so no
// two different inputs encode alike.
func PeerProof(secret []byte, label string, dialer, acceptor *PeerHello) []byte {
	mac := hmac.New(sha256.New, secret)
	var scratch []byte
	scratch = appendString(scratch, "label", label)
	scratch = dialer.appendIdentity(scratch)
	scratch = acceptor.appendIdentity(scratch)
	scratch = binary.BigEndian.AppendUint32(scratch, uint32(len(scratch)))
	mac.Write(scratch)
	return mac.Sum(nil)
}

// CheckPeerProof reports whether proof is the proof PeerProof computes,
// comparing in constant time.
func CheckPeerProof(proof, secret []byte, label string, dialer, acceptor *PeerHello) bool {
	return hmac.Equal(proof, PeerProof(secret, label, dialer, acceptor))
}

// Seal (FQS1) asks a replica to seal its copy of a partition at a new
// epoch: sync everything it has written, durably refuse every push of an
// older epoch from then on, and report its log (FQT1).
type Seal struct {
	RequestID uint64
	Partition uint64
	Epoch     uint64 // the new epoch being recovered
	Owner     string // the node recovering it (the new owner), for logs
}

func (*Seal) Tag() Tag { return TagSeal }

func (f *Seal) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagSeal)
	dst = appendU64(dst, f.RequestID)
	dst = appendU64(dst, f.Partition)
	dst = appendU64(dst, f.Epoch)
	dst = appendString(dst, "owner", f.Owner)
	return endFrame(dst, start)
}

func (f *Seal) Decode(body []byte) error {
	d := newDecoder(TagSeal, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.Partition = d.nonZeroU64("partition")
	f.Epoch = d.nonZeroU64("epoch")
	f.Owner = d.str("owner")
	return d.finish()
}

// Sealed (FQT1) reports a sealed replica's log: only durable records count
// (the seal synced what was written first).
type Sealed struct {
	RequestID   uint64
	Partition   uint64
	Epoch       uint64 // the epoch the replica is now sealed at
	Instance    uint64 // the replica's instance
	DurableNext uint64 // the end of its log, all of it durable
	FirstOffset uint64 // its first retained offset
	History     []EpochStart
}

func (*Sealed) Tag() Tag { return TagSealed }

func (f *Sealed) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagSealed)
	dst = f.appendFields(dst)
	return endFrame(dst, start)
}

func (f *Sealed) appendFields(dst []byte) []byte {
	dst = appendU64(dst, f.RequestID)
	dst = appendU64(dst, f.Partition)
	dst = appendU64(dst, f.Epoch)
	dst = appendU64(dst, f.Instance)
	dst = appendU64(dst, f.DurableNext)
	dst = appendU64(dst, f.FirstOffset)
	return appendEpochHistory(dst, f.History)
}

func (f *Sealed) Decode(body []byte) error {
	d := newDecoder(TagSealed, body)
	f.decodeFields(&d)
	return d.finish()
}

func (f *Sealed) decodeFields(d *decoder) {
	f.RequestID = d.nonZeroU64("request_id")
	f.Partition = d.nonZeroU64("partition")
	f.Epoch = d.nonZeroU64("epoch")
	f.Instance = d.nonZeroU64("instance")
	f.DurableNext = d.u64("durable_next")
	at := d.off
	f.FirstOffset = d.u64("first_offset")
	if f.FirstOffset > f.DurableNext && d.err == nil {
		d.off = at
		d.failf("first_offset", "%d is past durable_next %d", f.FirstOffset, f.DurableNext)
	}
	f.History = d.epochHistory(f.History)
}

// SealedVote (FQT2) is a sealed answer (FQT1) that also says whether the
// seal counts toward the recovery's E-W+1 (docs/cluster.md, "A copy earns
// its vote"): Incomplete is set by a copy that opened empty (a new, wiped
// or missing directory, or a damaged copy set aside) and has not since
// caught up past a committed frontier its owner reported; it may lack
// records it acknowledged. A recovery takes its seal (the copy is fenced)
// but neither counts it nor chooses its history.
type SealedVote struct {
	Sealed
	Incomplete bool
}

func (*SealedVote) Tag() Tag { return TagSealedVote }

func (f *SealedVote) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagSealedVote)
	dst = f.Sealed.appendFields(dst)
	dst = appendBool(dst, f.Incomplete)
	return endFrame(dst, start)
}

func (f *SealedVote) Decode(body []byte) error {
	d := newDecoder(TagSealedVote, body)
	f.Sealed.decodeFields(&d)
	f.Incomplete = d.boolean("incomplete")
	return d.finish()
}

// MemberQuery (FXQ1) asks a node what its catalog records about a node:
// the question a node with an empty data directory asks before it starts,
// to tell a new cluster from one it was part of before it lost its data.
type MemberQuery struct {
	RequestID uint64
	NodeID    string
}

func (*MemberQuery) Tag() Tag { return TagMemberQuery }

func (f *MemberQuery) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagMemberQuery)
	dst = appendU64(dst, f.RequestID)
	dst = appendString(dst, "node_id", f.NodeID)
	return endFrame(dst, start)
}

func (f *MemberQuery) Decode(body []byte) error {
	d := newDecoder(TagMemberQuery, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.NodeID = d.str("node_id")
	return d.finish()
}

// ReplaceMember (FXR1) asks a node to replace the asker's Raft replica with
// a new replica id everywhere (the asker lost its data directory). It is
// answered with FXM1 once the catalog records the new id.
type ReplaceMember struct {
	RequestID uint64
	NodeID    string
	ReplicaID uint64
}

func (*ReplaceMember) Tag() Tag { return TagReplaceMember }

func (f *ReplaceMember) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagReplaceMember)
	dst = appendU64(dst, f.RequestID)
	dst = appendString(dst, "node_id", f.NodeID)
	dst = appendU64(dst, f.ReplicaID)
	return endFrame(dst, start)
}

func (f *ReplaceMember) Decode(body []byte) error {
	d := newDecoder(TagReplaceMember, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.NodeID = d.str("node_id")
	f.ReplicaID = d.nonZeroU64("replica_id")
	return d.finish()
}

// Member (FXM1) answers FXQ1 and FXR1.
type Member struct {
	RequestID uint64
	// Initialized says the answering node's catalog is initialised: the
	// cluster exists. False also while the answering node is itself still
	// deciding (its own data directory is empty).
	Initialized bool
	ReplicaID   uint64 // the node's replica id in the catalog; 0 when unknown
}

func (*Member) Tag() Tag { return TagMember }

func (f *Member) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagMember)
	dst = appendU64(dst, f.RequestID)
	dst = appendBool(dst, f.Initialized)
	dst = appendU64(dst, f.ReplicaID)
	return endFrame(dst, start)
}

func (f *Member) Decode(body []byte) error {
	d := newDecoder(TagMember, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.Initialized = d.boolean("initialized")
	f.ReplicaID = d.u64("replica_id")
	return d.finish()
}
