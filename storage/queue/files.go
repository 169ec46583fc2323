package queue

// Files of a queue directory, all written through vfs:
//
//	<dir>/log/                       the partition's log (storage/log)
//	<dir>/declaration                the declared options (options.go)
//	<dir>/epoch                      the highest epoch this copy appended under as owner (epoch.go)
//	<dir>/incarnation                left by older versions; removed at open
//	<dir>/snapshot-<next>.snap       checkpoints; <next> is 20 decimal digits
//	<dir>/*.tmp                      files being written; removed on open
//
// Small files are replaced atomically: write a temporary file, sync it,
// rename it over the old name, sync the directory.

import (
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/fibrilmq/fibril/storage/vfs"
)

const (
	logDirName      = "log"
	declarationName = "declaration"
	epochName       = "epoch"
	legacyName      = "incarnation" // the incarnation history of older versions
	snapshotPrefix  = "snapshot-"
	snapshotSuffix  = ".snap"
	temporarySuffix = ".tmp"
	snapshotsKept   = 2
)

func snapshotName(next uint64) string {
	return fmt.Sprintf("%s%020d%s", snapshotPrefix, next, snapshotSuffix)
}

// parseSnapshotName returns the offset a snapshot file name covers.
func parseSnapshotName(name string) (uint64, bool) {
	digits, ok := strings.CutPrefix(name, snapshotPrefix)
	if !ok {
		return 0, false
	}
	digits, ok = strings.CutSuffix(digits, snapshotSuffix)
	if !ok || len(digits) != 20 {
		return 0, false
	}
	next, err := strconv.ParseUint(digits, 10, 64)
	return next, err == nil
}

// writeFileAtomic replaces dir/name with data durably.
func writeFileAtomic(fs vfs.FS, dir, name string, data []byte) error {
	temporary := path.Join(dir, name+temporarySuffix)
	if err := writeAndSync(fs, temporary, data); err != nil {
		return err
	}
	if err := fs.Rename(temporary, path.Join(dir, name)); err != nil {
		return err
	}
	return fs.SyncDir(dir)
}

// writeAndSync creates name with data and syncs it.
func writeAndSync(fs vfs.FS, name string, data []byte) error {
	f, err := fs.Create(name)
	if err != nil {
		return err
	}
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	return err
}

// readFile reads a whole file; exists is false when it is missing.
func readFile(fs vfs.FS, name string) (data []byte, exists bool, err error) {
	size, exists, err := fs.Stat(name)
	if err != nil || !exists {
		return nil, false, err
	}
	f, err := fs.Open(name)
	if err != nil {
		return nil, true, err
	}
	defer f.Close()
	data = make([]byte, size)
	n, err := f.ReadAt(data, 0)
	if err == io.EOF && int64(n) == size {
		err = nil
	}
	return data[:n], true, err
}

// listSnapshots returns the snapshot files of dir, newest first.
func listSnapshots(fs vfs.FS, dir string) ([]snapshotCandidate, error) {
	names, err := fs.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []snapshotCandidate
	for _, name := range names {
		next, ok := parseSnapshotName(name)
		if !ok {
			continue
		}
		full := path.Join(dir, name)
		out = append(out, snapshotCandidate{name: name, next: next, load: func() ([]byte, error) {
			data, _, err := readFile(fs, full)
			return data, err
		}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].next > out[j].next })
	return out, nil
}

// removeTemporaries deletes leftovers of interrupted atomic writes and
// files older versions kept.
func removeTemporaries(fs vfs.FS, dir string) error {
	names, err := fs.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		if strings.HasSuffix(name, temporarySuffix) || name == legacyName {
			if err := fs.Remove(path.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	return nil
}
