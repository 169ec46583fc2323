// Admin frames. Layouts:
//
//	FIQ1 get-queue-info  request_id u64, queue string
//	FIR1 queue-info      request_id u64, info bytes (msgpack map, see QueueInfo)
//	FLQ1 list-queues     request_id u64, prefix string, after string, limit u32
//	FLR1 queue-list      request_id u64, more bool, queues bytes (msgpack array of QueueInfo maps)
//	FDQ1 delete-queue    request_id u64, queue string
//	FPG1 purge-queue     request_id u64, queue string
//
// Delete and purge are answered by ok (FOK1) with the number of messages
// removed. Msgpack reply bodies gain keys over time: readers ignore keys
// they do not know.
package wire

// GetQueueInfo (FIQ1) asks for one queue's info.
type GetQueueInfo struct {
	RequestID uint64
	Queue     string
}

func (*GetQueueInfo) Tag() Tag { return TagGetQueueInfo }

func (f *GetQueueInfo) Encode(dst []byte) []byte {
	return encodeQueueRequest(dst, TagGetQueueInfo, f.RequestID, f.Queue)
}

func (f *GetQueueInfo) Decode(body []byte) error {
	return decodeQueueRequest(TagGetQueueInfo, body, &f.RequestID, &f.Queue)
}

// DeleteQueue (FDQ1) deletes a queue and its messages.
type DeleteQueue struct {
	RequestID uint64
	Queue     string
}

func (*DeleteQueue) Tag() Tag { return TagDeleteQueue }

func (f *DeleteQueue) Encode(dst []byte) []byte {
	return encodeQueueRequest(dst, TagDeleteQueue, f.RequestID, f.Queue)
}

func (f *DeleteQueue) Decode(body []byte) error {
	return decodeQueueRequest(TagDeleteQueue, body, &f.RequestID, &f.Queue)
}

// PurgeQueue (FPG1) removes a queue's ready messages; leased ones stay
// with their consumers.
type PurgeQueue struct {
	RequestID uint64
	Queue     string
}

func (*PurgeQueue) Tag() Tag { return TagPurgeQueue }

func (f *PurgeQueue) Encode(dst []byte) []byte {
	return encodeQueueRequest(dst, TagPurgeQueue, f.RequestID, f.Queue)
}

func (f *PurgeQueue) Decode(body []byte) error {
	return decodeQueueRequest(TagPurgeQueue, body, &f.RequestID, &f.Queue)
}

func encodeQueueRequest(dst []byte, tag Tag, requestID uint64, queue string) []byte {
	dst, start := beginFrame(dst, tag)
	dst = appendU64(dst, requestID)
	dst = appendString(dst, "queue", queue)
	return endFrame(dst, start)
}

func decodeQueueRequest(tag Tag, body []byte, requestID *uint64, queue *string) error {
	d := newDecoder(tag, body)
	*requestID = d.nonZeroU64("request_id")
	*queue = d.str("queue")
	return d.finish()
}

// QueueInfoReply (FIR1) answers get-queue-info.
type QueueInfoReply struct {
	RequestID uint64
	Info      QueueInfo
}

func (*QueueInfoReply) Tag() Tag { return TagQueueInfoReply }

func (f *QueueInfoReply) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagQueueInfoReply)
	dst = appendU64(dst, f.RequestID)
	dst = appendMsgpackBytes(dst, "info", f.Info.appendMsgpack)
	return endFrame(dst, start)
}

func (f *QueueInfoReply) Decode(body []byte) error {
	d := newDecoder(TagQueueInfoReply, body)
	f.RequestID = d.nonZeroU64("request_id")
	infoAt := d.off
	info := d.bytes("info")
	if err := d.finish(); err != nil {
		return err
	}
	var err error
	if f.Info, err = parseQueueInfo(info); err != nil {
		return &FrameError{Tag: TagQueueInfoReply, Field: "info", Offset: infoAt,
			Detail: err.Error(), Err: ErrMalformed}
	}
	return nil
}

// ListQueues (FLQ1) asks for the queues whose names start with Prefix, in
// name order, starting after the name After (empty: from the first). Limit
// caps the entries in one reply (0: the node's default); the reply's More
// says whether to ask again with After set to the last name received.
type ListQueues struct {
	RequestID uint64
	Prefix    string
	After     string
	Limit     uint32
}

func (*ListQueues) Tag() Tag { return TagListQueues }

func (f *ListQueues) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagListQueues)
	dst = appendU64(dst, f.RequestID)
	dst = appendString(dst, "prefix", f.Prefix)
	dst = appendString(dst, "after", f.After)
	dst = appendU32(dst, f.Limit)
	return endFrame(dst, start)
}

func (f *ListQueues) Decode(body []byte) error {
	d := newDecoder(TagListQueues, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.Prefix = d.str("prefix")
	f.After = d.str("after")
	f.Limit = d.u32("limit")
	return d.finish()
}

// MaxQueueListEntries caps the queues one queue-list reply carries; a
// node clamps list-queues' limit to it.
const MaxQueueListEntries = 1000

// QueueList (FLR1) answers list-queues.
type QueueList struct {
	RequestID uint64
	More      bool // more queues match after the last one listed
	Queues    []QueueInfo
}

func (*QueueList) Tag() Tag { return TagQueueList }

func (f *QueueList) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagQueueList)
	dst = appendU64(dst, f.RequestID)
	dst = appendBool(dst, f.More)
	if len(f.Queues) > MaxQueueListEntries {
		panic(fieldTooLong{field: "queues", length: len(f.Queues), limit: MaxQueueListEntries})
	}
	dst = appendMsgpackBytes(dst, "queues", func(dst []byte) []byte {
		dst = appendMsgpackArrayHeader(dst, len(f.Queues))
		for i := range f.Queues {
			dst = f.Queues[i].appendMsgpack(dst)
		}
		return dst
	})
	return endFrame(dst, start)
}

func (f *QueueList) Decode(body []byte) error {
	d := newDecoder(TagQueueList, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.More = d.boolean("more")
	queuesAt := d.off
	queues := d.bytes("queues")
	if err := d.finish(); err != nil {
		return err
	}
	var err error
	if f.Queues, err = parseQueueList(queues, f.Queues[:0]); err != nil {
		return &FrameError{Tag: TagQueueList, Field: "queues", Offset: queuesAt,
			Detail: err.Error(), Err: ErrMalformed}
	}
	return nil
}
