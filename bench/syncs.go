package bench

// Counters read before and after each run: the server's fdatasyncs and the
// data disk's flushes, each divided by the run's publishes.
//
// MetricsCounter reads one unlabelled counter from a Prometheus text
// exposition (fibril_fsyncs_total: every fdatasync and directory fsync the
// server made). DeviceFlushes reads the flush requests a block device
// completed from /proc/diskstats: the lines are "major minor name" and
// then the device's counters, of which the 16th after the name (field 19
// of the line) is flush requests completed (Documentation/admin-guide/
// iostats.rst, kernels 5.5 and later). Flushes are counted on the whole
// disk, so DeviceOf maps a partition to the disk it is on. Both count
// everything: the device's flushes include any other process's on the
// same disk, which the report says.
//
// Both are read once the run's queue is declared and subscribed (so the
// declaration's own syncs are not counted) and again after the drain,
// before the queue is deleted, and divided by every publish of the run,
// warm-up included: no reading interrupts the paced publishes, which a
// scrape at the start of the measured part would.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// CountMeter reads a counter that only grows.
type CountMeter interface {
	Count(ctx context.Context) (uint64, error)
}

// ErrCounterMissing is returned when a page or file lacks the counter.
var ErrCounterMissing = errors.New("bench: counter not found")

// MetricsCounter reads the unlabelled sample of Name at URL.
type MetricsCounter struct {
	URL, Name string
	// Client defaults to one with a five-second timeout.
	Client *http.Client
}

// Count fetches the page and reads the counter.
func (m MetricsCounter) Count(ctx context.Context) (uint64, error) {
	page, err := fetchPage(ctx, m.Client, m.URL)
	if err != nil {
		return 0, err
	}
	defer page.Close()
	value, err := ParseCounter(page, m.Name)
	if err != nil {
		return 0, err
	}
	return uint64(value), nil
}

// String names the meter in the report's settings.
func (m MetricsCounter) String() string { return m.Name + " at " + m.URL }

// fetchPage GETs url and returns its body.
func fetchPage(ctx context.Context, client *http.Client, url string) (io.ReadCloser, error) {
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	request, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	response, err := client.Do(request)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if response.StatusCode != http.StatusOK {
		response.Body.Close()
		return nil, fmt.Errorf("bench: %s answered %s", url, response.Status)
	}
	return response.Body, nil
}

// ParseCounter finds the unlabelled sample of name in a Prometheus text
// exposition.
func ParseCounter(page io.Reader, name string) (float64, error) {
	scanner := bufio.NewScanner(page)
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) < 2 || fields[0] != name {
			continue
		}
		value, err := strconv.ParseFloat(fields[1], 64)
		if err != nil || value < 0 {
			return 0, fmt.Errorf("%w: %s has value %q", ErrCounterMissing, name, fields[1])
		}
		return value, nil
	}
	if err := scanner.Err(); err != nil {
		return 0, fmt.Errorf("bench: read metrics: %w", err)
	}
	return 0, fmt.Errorf("%w: %s", ErrCounterMissing, name)
}

// ParseLabelValue finds label's value on the first sample of name (for
// example the pid of fibril_build_info); false when there is none.
func ParseLabelValue(page io.Reader, name, label string) (string, bool) {
	scanner := bufio.NewScanner(page)
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	prefix := name + "{"
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		labels := line[len(prefix):]
		if end := strings.IndexByte(labels, '}'); end >= 0 {
			labels = labels[:end]
		}
		for _, pair := range strings.Split(labels, ",") {
			key, value, ok := strings.Cut(pair, "=")
			if ok && strings.TrimSpace(key) == label {
				return strings.Trim(value, `"`), true
			}
		}
	}
	return "", false
}

// DeviceFlushes reads the flushes a block device completed.
type DeviceFlushes struct {
	// Device is the name in /proc/diskstats ("vda", "nvme0n1").
	Device string
	// Path is the diskstats file; empty means /proc/diskstats.
	Path string
}

// Count reads the device's flush requests completed.
func (d DeviceFlushes) Count(context.Context) (uint64, error) {
	path := d.Path
	if path == "" {
		path = "/proc/diskstats"
	}
	file, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("bench: device flushes: %w", err)
	}
	defer file.Close()
	return ParseDiskFlushes(file, d.Device)
}

// String names the meter in the report's settings.
func (d DeviceFlushes) String() string { return "flushes of " + d.Device + " in /proc/diskstats" }

// ParseDiskFlushes returns the flush requests completed by device, from
// the text of /proc/diskstats.
func ParseDiskFlushes(stats io.Reader, device string) (uint64, error) {
	const flushField = 2 + 16 // major, minor, then the name and its counters; index of "flushes completed"
	scanner := bufio.NewScanner(stats)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) < 3 || fields[2] != device {
			continue
		}
		if len(fields) <= flushField {
			return 0, fmt.Errorf("%w: %s in diskstats has no flush counter (a kernel before 5.5)", ErrCounterMissing, device)
		}
		flushes, err := strconv.ParseUint(fields[flushField], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %s flushes %q", ErrCounterMissing, device, fields[flushField])
		}
		return flushes, nil
	}
	if err := scanner.Err(); err != nil {
		return 0, fmt.Errorf("bench: read diskstats: %w", err)
	}
	return 0, fmt.Errorf("%w: device %s not in diskstats", ErrCounterMissing, device)
}

// perMessage divides a counter's growth by the run's publishes.
func perMessage(start, end uint64, messages uint64) (count *uint64, per *float64) {
	delta := end - start
	ratio := float64(delta) / float64(messages)
	return &delta, &ratio
}
