package replication

// HistoryEntry says that epoch Epoch's records start at FirstOffset. A
// log's epoch history is one entry per epoch its records carry, in order;
// the coordination shard keeps the same list for the epochs that served.
type HistoryEntry struct {
	Epoch       uint64 `msgpack:"epoch" json:"epoch"`
	FirstOffset uint64 `msgpack:"first_offset" json:"first_offset"`
}
