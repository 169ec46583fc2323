//go:build !linux

package bench

import (
	"os"
	"time"
)

// syncData falls back to fsync where fdatasync is not available.
func syncData(file *os.File) error { return file.Sync() }

// procClockTicksPerSecond returns the usual USER_HZ; /proc/PID/stat is a
// Linux file, so this only matters for parsing saved stat lines.
func procClockTicksPerSecond() int64 { return defaultClockTicksPerSecond }

// holdPreciseThread does nothing outside Linux.
func holdPreciseThread() (release func()) { return func() {} }

// sleepFor uses the Go timer outside Linux.
func sleepFor(d time.Duration) { time.Sleep(d) }
