// Mode change frames. Layouts:
//
//	FMC1 change-mode   request_id u64, queue string, mode u8 (1 durable, 2 buffered),
//	                   wait_ms u32 (how long the node may hold the reply for the switch)
//	FMK1 mode-changed  request_id u64, outcome u8, mode u8 (the mode asked for),
//	                   applied u8 (the mode in force when answering), revision u64,
//	                   message string (why it is still pending; for people)
//
// A change-mode names the mode an existing queue should run. The node
// answers with mode-changed once the revision that sets it is applied (the
// switch happened: from then on every confirm and delivery stands on the
// new mode's boundary), or after wait_ms with outcome pending and the
// reason, or at once with outcome unchanged when the queue already runs
// that mode with no change pending. Asking again for the pending mode is
// the same request (it is idempotent by revision: the reply names the same
// revision); asking for the other mode while a change is pending is
// refused with error mode_change_pending (217).
package wire

// ModeOutcome says how far a change-mode went when the node answered.
type ModeOutcome uint8

const (
	// ModeApplied: the revision setting the mode is applied.
	ModeApplied ModeOutcome = 1
	// ModeUnchanged: the queue already ran the mode; nothing was recorded.
	ModeUnchanged ModeOutcome = 2
	// ModePending: the revision is recorded, not applied yet (Message says
	// what it waits for); asking again later with the same mode reports on
	// the same revision.
	ModePending ModeOutcome = 3
)

// String names the outcome.
func (o ModeOutcome) String() string {
	switch o {
	case ModeApplied:
		return "applied"
	case ModeUnchanged:
		return "unchanged"
	case ModePending:
		return "pending"
	}
	return "outcome(?)"
}

// ChangeMode (FMC1) asks the queue's owner to switch the queue to Mode.
type ChangeMode struct {
	RequestID uint64
	Queue     string
	Mode      Mode   // durable or buffered, never unset
	WaitMs    uint32 // 0: answer at once (pending unless already applied)
}

func (*ChangeMode) Tag() Tag { return TagChangeMode }

func (f *ChangeMode) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagChangeMode)
	dst = appendU64(dst, f.RequestID)
	dst = appendString(dst, "queue", f.Queue)
	dst = appendU8(dst, uint8(f.Mode))
	dst = appendU32(dst, f.WaitMs)
	return endFrame(dst, start)
}

func (f *ChangeMode) Decode(body []byte) error {
	d := newDecoder(TagChangeMode, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.Queue = d.str("queue")
	f.Mode = Mode(d.enum("mode", uint8(ModeDurable), uint8(ModeBuffered)))
	f.WaitMs = d.u32("wait_ms")
	return d.finish()
}

// ModeChanged (FMK1) answers change-mode.
type ModeChanged struct {
	RequestID uint64
	Outcome   ModeOutcome
	Mode      Mode   // the mode asked for
	Applied   Mode   // the mode in force when the node answered
	Revision  uint64 // the revision that sets Mode (0: the declared mode)
	Message   string // why it is pending; may be empty
}

func (*ModeChanged) Tag() Tag { return TagModeChanged }

func (f *ModeChanged) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagModeChanged)
	dst = appendU64(dst, f.RequestID)
	dst = appendU8(dst, uint8(f.Outcome))
	dst = appendU8(dst, uint8(f.Mode))
	dst = appendU8(dst, uint8(f.Applied))
	dst = appendU64(dst, f.Revision)
	dst = appendString(dst, "message", f.Message)
	return endFrame(dst, start)
}

func (f *ModeChanged) Decode(body []byte) error {
	d := newDecoder(TagModeChanged, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.Outcome = ModeOutcome(d.enum("outcome", uint8(ModeApplied), uint8(ModePending)))
	f.Mode = Mode(d.enum("mode", uint8(ModeDurable), uint8(ModeBuffered)))
	f.Applied = Mode(d.enum("applied", uint8(ModeDurable), uint8(ModeBuffered)))
	f.Revision = d.u64("revision")
	f.Message = d.str("message")
	return d.finish()
}
