package actors

// One process per data directory. On the real filesystem the broker holds
// an exclusive advisory lock (flock) on <data>/fibril.lock for its whole
// life; a second broker on the same directory fails to start with
// ErrDataDirInUse instead of corrupting the first one's logs. The lock ends
// with the process, so a crash never leaves it stale. Memory filesystems
// (tests) belong to one process and need no lock.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fibrilmq/fibril/storage/vfs"
	"golang.org/x/sys/unix"
)

// ErrDataDirInUse is returned by Start when another process runs on the
// same data directory.
var ErrDataDirInUse = errors.New("actors: data directory is in use by another process")

const lockFileName = "fibril.lock"

// lockDataDir takes the data directory's lock and returns its release.
func lockDataDir(config Config) (func(), error) {
	if config.FS != vfs.OS {
		return func() {}, nil
	}
	name := filepath.Join(config.DataDir, lockFileName)
	file, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("actors: open %s: %w", name, err)
	}
	if err := unix.Flock(int(file.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = file.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrDataDirInUse, config.DataDir)
		}
		return nil, fmt.Errorf("actors: lock %s: %w", name, err)
	}
	return func() {
		_ = unix.Flock(int(file.Fd()), unix.LOCK_UN)
		_ = file.Close()
	}, nil
}
