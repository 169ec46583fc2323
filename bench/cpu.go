package bench

// Broker CPU time, read before and after the measured part of each run.
//
// ProcessCPU reads a local process's /proc/PID/stat. The file is one line:
// pid, the command name in parentheses, then space-separated fields. The
// command name may itself hold spaces and parentheses, so parsing starts
// after the last ')'. Counting fields from 1 over the whole line, utime is
// field 14 and stime field 15 (proc(5)): CPU time in user and kernel mode of
// all the process's threads, in clock ticks of USER_HZ, read from the ELF
// auxiliary vector (AT_CLKTCK) and 100 when it is not there.
//
// MetricsCPU reads the process_cpu_seconds_total counter from a Prometheus
// text exposition endpoint, for a broker that is not local.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPUMeter reads the total CPU time a broker has used so far.
type CPUMeter interface {
	CPUTime(ctx context.Context) (time.Duration, error)
}

const defaultClockTicksPerSecond = 100

// Errors of the CPU meters.
var (
	// ErrProcStat is returned for a /proc/PID/stat line that does not parse.
	ErrProcStat = errors.New("bench: malformed /proc stat line")
	// ErrMetricMissing is returned when a metrics page has no
	// process_cpu_seconds_total sample.
	ErrMetricMissing = errors.New("bench: process_cpu_seconds_total not found")
)

// ProcStat is the CPU part of a /proc/PID/stat line, in clock ticks.
type ProcStat struct {
	UserTicks   uint64
	SystemTicks uint64
}

// CPUTime converts the ticks with ticksPerSecond.
func (s ProcStat) CPUTime(ticksPerSecond int64) time.Duration {
	ticks := s.UserTicks + s.SystemTicks
	return time.Duration(ticks) * time.Second / time.Duration(ticksPerSecond)
}

// ParseProcStat parses the utime and stime fields of a /proc/PID/stat line.
func ParseProcStat(line string) (ProcStat, error) {
	closing := strings.LastIndexByte(line, ')')
	if closing < 0 || !strings.Contains(line[:closing], "(") {
		return ProcStat{}, fmt.Errorf("%w: no command name", ErrProcStat)
	}
	// After ")" the fields start at field 3 (state), so utime (field 14)
	// and stime (15) are at indexes 11 and 12.
	fields := strings.Fields(line[closing+1:])
	const utimeIndex, stimeIndex = 14 - 3, 15 - 3
	if len(fields) <= stimeIndex {
		return ProcStat{}, fmt.Errorf("%w: %d fields after the command name", ErrProcStat, len(fields))
	}
	user, err := strconv.ParseUint(fields[utimeIndex], 10, 64)
	if err != nil {
		return ProcStat{}, fmt.Errorf("%w: utime: %v", ErrProcStat, err)
	}
	system, err := strconv.ParseUint(fields[stimeIndex], 10, 64)
	if err != nil {
		return ProcStat{}, fmt.Errorf("%w: stime: %v", ErrProcStat, err)
	}
	return ProcStat{UserTicks: user, SystemTicks: system}, nil
}

// ProcessCPU reads the CPU time of a local process from /proc.
type ProcessCPU struct {
	PID int
	// ProcRoot is where proc is mounted; empty means /proc.
	ProcRoot string
	// TicksPerSecond overrides USER_HZ; 0 reads it from the system.
	TicksPerSecond int64
}

// CPUTime reads utime + stime of the process.
func (p ProcessCPU) CPUTime(context.Context) (time.Duration, error) {
	root := p.ProcRoot
	if root == "" {
		root = "/proc"
	}
	content, err := os.ReadFile(filepath.Join(root, strconv.Itoa(p.PID), "stat"))
	if err != nil {
		return 0, fmt.Errorf("bench: broker CPU: %w", err)
	}
	stat, err := ParseProcStat(string(content))
	if err != nil {
		return 0, err
	}
	ticks := p.TicksPerSecond
	if ticks <= 0 {
		ticks = procClockTicksPerSecond()
	}
	return stat.CPUTime(ticks), nil
}

// String names the meter in the report's settings.
func (p ProcessCPU) String() string { return fmt.Sprintf("/proc/%d/stat", p.PID) }

// MetricsCPU reads process_cpu_seconds_total from a metrics endpoint.
type MetricsCPU struct {
	URL string
	// Client defaults to one with a five-second timeout.
	Client *http.Client
}

// CPUTime fetches the page and reads the counter.
func (m MetricsCPU) CPUTime(ctx context.Context) (time.Duration, error) {
	client := m.Client
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	request, err := http.NewRequestWithContext(ctx, http.MethodGet, m.URL, nil)
	if err != nil {
		return 0, fmt.Errorf("bench: broker CPU: %w", err)
	}
	response, err := client.Do(request)
	if err != nil {
		return 0, fmt.Errorf("bench: broker CPU: %w", err)
	}
	defer response.Body.Close()
	if response.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("bench: broker CPU: %s answered %s", m.URL, response.Status)
	}
	return ParseProcessCPUSeconds(response.Body)
}

// String names the meter in the report's settings.
func (m MetricsCPU) String() string { return m.URL }

// ParseProcessCPUSeconds finds the unlabelled process_cpu_seconds_total
// sample in a Prometheus text exposition.
func ParseProcessCPUSeconds(page io.Reader) (time.Duration, error) {
	const name = "process_cpu_seconds_total"
	scanner := bufio.NewScanner(page)
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) < 2 || fields[0] != name {
			continue
		}
		seconds, err := strconv.ParseFloat(fields[1], 64)
		if err != nil || seconds < 0 {
			return 0, fmt.Errorf("%w: value %q", ErrMetricMissing, fields[1])
		}
		return time.Duration(seconds * float64(time.Second)), nil
	}
	if err := scanner.Err(); err != nil {
		return 0, fmt.Errorf("bench: broker CPU: %w", err)
	}
	return 0, ErrMetricMissing
}

// ProcessesCPU sums the CPU time of several processes: the nodes of a
// cluster that run on one machine.
type ProcessesCPU []ProcessCPU

// CPUTime reads and adds up utime + stime of every process.
func (p ProcessesCPU) CPUTime(ctx context.Context) (time.Duration, error) {
	var total time.Duration
	for _, process := range p {
		spent, err := process.CPUTime(ctx)
		if err != nil {
			return 0, err
		}
		total += spent
	}
	return total, nil
}

// Meter returns the one process itself, or the sum; nil for none.
func (p ProcessesCPU) Meter() CPUMeter {
	switch len(p) {
	case 0:
		return nil
	case 1:
		return p[0]
	}
	return p
}
