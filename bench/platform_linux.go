//go:build linux

package bench

// Linux specifics: fdatasync for the storage floor, USER_HZ for /proc CPU
// times, and precise sleeps for the pacer.
//
// Go's timers wake a sleeping goroutine up to about a millisecond late when
// the process is otherwise idle, which at 10,000 publishes per second would
// make the harness itself the largest source of latency. The pacer instead
// locks its goroutine to one thread, lowers that thread's timer slack from
// the default 50 us to 1 ns, and sleeps with nanosleep(2). The thread's
// previous slack is restored before it is unlocked.

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// syncData flushes the file's data, and only the metadata needed to read it
// back (its size), to stable storage: fdatasync(2).
func syncData(file *os.File) error {
	return unix.Fdatasync(int(file.Fd()))
}

// procClockTicksPerSecond returns the kernel's USER_HZ, the unit of the CPU
// times in /proc/PID/stat, from the AT_CLKTCK entry of the auxiliary vector.
func procClockTicksPerSecond() int64 {
	const atClockTick = 17 // AT_CLKTCK in the Linux ELF auxiliary vector
	entries, err := unix.Auxv()
	if err == nil {
		for _, entry := range entries {
			if entry[0] == atClockTick && entry[1] > 0 {
				return int64(entry[1])
			}
		}
	}
	return defaultClockTicksPerSecond
}

// holdPreciseThread locks the calling goroutine to its thread and sets the
// thread's timer slack to 1 ns; the returned function undoes both.
func holdPreciseThread() (release func()) {
	runtime.LockOSThread()
	previous, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil || unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0) != nil {
		return runtime.UnlockOSThread
	}
	return func() {
		unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(previous), 0, 0, 0)
		runtime.UnlockOSThread()
	}
}

// sleepFor blocks the thread for about d with nanosleep(2); an interrupted
// sleep returns early and the caller sleeps again.
func sleepFor(d time.Duration) {
	request := unix.NsecToTimespec(int64(d))
	unix.Nanosleep(&request, nil)
}

// DeviceOf names the block device that holds path, as /proc/diskstats
// names it: the whole disk, when path is on one of its partitions.
func DeviceOf(path string) (string, error) {
	var stat unix.Stat_t
	if err := unix.Stat(path, &stat); err != nil {
		return "", fmt.Errorf("bench: device of %s: %w", path, err)
	}
	link := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(stat.Dev), unix.Minor(stat.Dev))
	resolved, err := filepath.EvalSymlinks(link)
	if err != nil {
		return "", fmt.Errorf("bench: device of %s: %w (not a block device: a network or memory filesystem?)", path, err)
	}
	if _, err := os.Stat(filepath.Join(resolved, "partition")); err == nil {
		resolved = filepath.Dir(resolved)
	}
	return filepath.Base(resolved), nil
}
