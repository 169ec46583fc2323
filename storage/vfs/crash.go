package vfs

// Rand is the randomness CrashClone draws from. Both math/rand.Rand and
// math/rand/v2.Rand satisfy it, so tests can pass either.
type Rand interface {
	Uint64() uint64
}

// CrashOptions shapes a simulated power loss.
type CrashOptions struct {
	// TearLastWrite keeps part of the first pending write that does not
	// survive whole: a random prefix with Rand, half of it without.
	TearLastWrite bool
	// Rand, when set, lets a random prefix of each file's pending
	// operations survive (files are visited in name order, so a seeded
	// source gives a reproducible image). Nil keeps only synced bytes.
	Rand Rand
	// KeepUnsynced lets every pending operation survive, as if the disk
	// had written back everything still in the page cache just before the
	// power went. Operations a failed sync discarded stay lost, so this is
	// the image that holds the most writes issued after a failed sync.
	// It takes precedence over Rand and TearLastWrite.
	KeepUnsynced bool
}

// CrashClone returns the filesystem a machine would find after losing power
// now; see the crash model in mem.go. The receiver is left untouched and
// keeps working, so a test can crash-clone under a running writer, close
// the writer on the original, and reopen on the clone. Faults are not
// carried over.
func (m *Mem) CrashClone(opts CrashOptions) *Mem {
	m.mu.Lock()
	defer m.mu.Unlock()
	clone := NewMem()
	for dir := range m.dirs {
		clone.dirs[dir] = true
	}
	cloned := map[*memInode]*memInode{}
	for _, name := range m.namesLocked(m.durableFiles) {
		inode := m.durableFiles[name]
		survivor, ok := cloned[inode]
		if !ok {
			survivor = &memInode{data: crashImage(inode, opts)}
			survivor.durable = append([]byte(nil), survivor.data...)
			cloned[inode] = survivor
		}
		clone.files[name] = survivor
		clone.durableFiles[name] = survivor
	}
	return clone
}

// crashImage builds what survives of one file: its durable bytes plus the
// chosen prefix of its pending operations.
func crashImage(inode *memInode, opts CrashOptions) []byte {
	image := append([]byte(nil), inode.durable...)
	if opts.KeepUnsynced {
		for _, operation := range inode.pending {
			image = applyOperation(image, operation)
		}
		return image
	}
	kept := 0
	if opts.Rand != nil {
		kept = int(opts.Rand.Uint64() % uint64(len(inode.pending)+1))
	}
	for _, operation := range inode.pending[:kept] {
		image = applyOperation(image, operation)
	}
	if !opts.TearLastWrite || kept == len(inode.pending) {
		return image
	}
	torn := inode.pending[kept]
	if torn.truncate || len(torn.data) < 2 {
		return image
	}
	keep := len(torn.data) / 2
	if opts.Rand != nil {
		keep = 1 + int(opts.Rand.Uint64()%uint64(len(torn.data)-1))
	}
	torn.data = torn.data[:keep]
	return applyOperation(image, torn)
}
