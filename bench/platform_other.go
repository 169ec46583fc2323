//go:build !linux

package bench

import (
	"errors"
	"os"
	"time"
)

// DeviceOf is Linux only: device flushes come from /proc/diskstats.
func DeviceOf(string) (string, error) {
	return "", errors.New("bench: device flushes are read from /proc/diskstats, on Linux only")
}

// syncData falls back to fsync where fdatasync is not available.
func syncData(file *os.File) error { return file.Sync() }

// procClockTicksPerSecond returns the usual USER_HZ; /proc/PID/stat is a
// Linux file, so this only matters for parsing saved stat lines.
func procClockTicksPerSecond() int64 { return defaultClockTicksPerSecond }

// holdPreciseThread does nothing outside Linux.
func holdPreciseThread() (release func()) { return func() {} }

// sleepFor uses the Go timer outside Linux.
func sleepFor(d time.Duration) { time.Sleep(d) }
