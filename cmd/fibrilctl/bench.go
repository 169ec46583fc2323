package main

// The bench command: measure a broker's latency with the bench package.
//
//	fibrilctl bench [--case NAME ...] [--mode durable|buffered|both] [--size BYTES]
//	                [--duration D] [--warmup D] [--json FILE] [--server-pid PID[,PID...] | --metrics URL]
//	                [--data-dir DIR] [--floors=false] [--floor-samples N] [--quiet]
//	fibrilctl bench replay FILE [--speed X] [--mode ...] [--warmup D] [--json FILE] ...
//
// Order of work: connect (so a wrong address fails before anything is
// measured), pick the CPU meter, measure the floors, run the cases, print
// the markdown report on stdout and write the JSON report. Progress lines go
// to stderr unless --quiet.
//
// Broker CPU comes from /proc/PID/stat: of --server-pid when given, else of
// the local processes listening on the --server ports (bench_pid.go),
// summed: a cluster's nodes on one machine count together. With
// --metrics URL it comes from process_cpu_seconds_total on that page
// instead. When neither works the report has no CPU figure and says why on
// stderr.
//
// The server's fdatasyncs per message come from fibril_fsyncs_total: on
// the --syncs page when given, else on the node's HTTP endpoint (the global
// --http), used only when its fibril_build_info names the process the CPU
// is read from, so a figure is never another broker's. Device flushes per
// message come from /proc/diskstats, for --flush-device or else the disk
// holding --data-dir (or the current directory); they count every process
// on that disk.
//
// Floors are measured in --data-dir, which should be on the disk the broker
// writes to. Without it they run in a temporary directory made in the
// current directory (so on its filesystem) and removed afterwards.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fibrilmq/fibril/bench"
)

// benchFlags are the flags of bench and bench replay.
type benchFlags struct {
	shared       connection
	caseNames    []string
	mode         string
	sizeBytes    int
	duration     time.Duration
	warmup       time.Duration
	drainTimeout time.Duration
	prefetch     int
	jsonFile     string
	serverPIDs   string
	metricsURL   string
	syncsURL     string
	flushDevice  string
	dataDir      string
	floors       bool
	floorSamples int
	quiet        bool
	dedup        bool
	speed        float64 // replay only
}

// register adds the flags; replay has --speed instead of the case flags.
func (f *benchFlags) register(ctx context.Context, name string, replay bool) *flag.FlagSet {
	flags := newFlags(ctx, name, &f.shared)
	flags.StringVar(&f.mode, "mode", string(bench.ModeDurable), "durable, buffered, or both (ABBA order)")
	flags.DurationVar(&f.drainTimeout, "drain-timeout", bench.DefaultDrainTimeout, "longest wait for the last confirms and deliveries of a run")
	flags.IntVar(&f.prefetch, "prefetch", bench.DefaultPrefetch, "the consumer's prefetch")
	flags.StringVar(&f.jsonFile, "json", "", "write the full report (settings, every percentile) to this file")
	flags.StringVar(&f.serverPIDs, "server-pid", "", "read the broker's CPU from /proc/PID/stat, summed over a comma-separated list (default: the local processes listening on --server)")
	flags.StringVar(&f.metricsURL, "metrics", "", "read the broker's CPU from process_cpu_seconds_total at this URL")
	flags.StringVar(&f.syncsURL, "syncs", "", "read the server's fdatasyncs from fibril_fsyncs_total at this URL (default: --metrics, else the node's --http endpoint when it is the same process)")
	flags.StringVar(&f.flushDevice, "flush-device", "", "count the flushes of this block device in /proc/diskstats (default: the disk holding --data-dir; \"none\": no count)")
	flags.StringVar(&f.dataDir, "data-dir", "", "directory for the storage floors, on the broker's disk (default: a temporary one in the current directory)")
	flags.BoolVar(&f.floors, "floors", true, "measure the machine's floors before the runs")
	flags.IntVar(&f.floorSamples, "floor-samples", bench.DefaultFloorRoundTrips, "round trips and writes timed for the floors (a tenth as many synced writes, a fiftieth as many round trips 10 ms apart)")
	flags.BoolVar(&f.quiet, "quiet", false, "no progress lines on stderr")
	flags.BoolVar(&f.dedup, "dedup", false,
		"declare every benchmark queue with a dedup window and publish idempotently (one dedup key per message), to measure deduplication's cost")
	if replay {
		flags.Float64Var(&f.speed, "speed", 1, "replay this many times faster than recorded")
		flags.DurationVar(&f.warmup, "warmup", 0, "leading part of the trace excluded from the figures")
		return flags
	}
	flags.Func("case", "a case to run, repeatable or comma-separated (default: all four)", func(value string) error {
		for _, name := range strings.Split(value, ",") {
			if name = strings.TrimSpace(name); name != "" {
				f.caseNames = append(f.caseNames, name)
			}
		}
		return nil
	})
	flags.IntVar(&f.sizeBytes, "size", bench.DefaultMessageBytes, "message size in bytes (at least the 24-byte benchmark header)")
	flags.DurationVar(&f.duration, "duration", bench.DefaultDuration, "measured time per run, after the warm-up")
	flags.DurationVar(&f.warmup, "warmup", bench.DefaultWarmup, "warm-up per run, excluded from every figure")
	return flags
}

// runBench is the bench command.
func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "replay" {
		return runBenchReplay(ctx, args[1:], stdout)
	}
	var f benchFlags
	flags := f.register(ctx, "bench", false)
	if _, err := parseArgs(flags, args, stdout); err != nil {
		return err
	}
	opts, err := f.options()
	if err != nil {
		return err
	}
	if opts.Cases, err = casesByName(f.caseNames); err != nil {
		return err
	}
	opts.MessageBytes = f.sizeBytes
	opts.Warmup, opts.Duration = f.warmup, f.duration
	if err := opts.Validate(); err != nil {
		return usageError{err.Error()}
	}
	return f.execute(ctx, opts, stdout)
}

// runBenchReplay is bench replay FILE.
func runBenchReplay(ctx context.Context, args []string, stdout io.Writer) error {
	var f benchFlags
	flags := f.register(ctx, "bench replay", true)
	values, err := parseArgs(flags, args, stdout, "FILE")
	if err != nil {
		return err
	}
	opts, err := f.options()
	if err != nil {
		return err
	}
	if !(f.speed > 0) {
		return usagef("--speed must be above 0, got %v", f.speed)
	}
	planned, summary, err := readTraceFile(values[0])
	if err != nil {
		return err
	}
	replay, err := bench.ReplayCase("replay", planned, f.speed)
	if err != nil {
		return err
	}
	opts.Cases, opts.Trace, opts.Warmup = []bench.Case{replay}, &summary, f.warmup
	// Every replayed publish has its recorded size; the run's size is the
	// mean, which the floors use.
	opts.MessageBytes = max(int(summary.PayloadBytes/summary.Publishes), bench.PayloadHeaderBytes)
	if err := opts.Validate(); err != nil {
		return usageError{err.Error()}
	}
	fmt.Fprintf(f.progress(), "bench: trace %s (%q): %d publishes in %d frames from %d connections to %d queues over %v; not replayed: %v inbound, %d outbound frames\n",
		values[0], summary.Label, summary.Publishes, summary.PublishFrames, summary.PublishingConnections,
		len(summary.Queues), summary.Span, summary.NotReplayed, summary.OutboundFrames)
	if summary.Truncated {
		fmt.Fprintf(f.progress(), "bench: the trace's last record is cut short; replaying up to it\n")
	}
	return f.execute(ctx, opts, stdout)
}

func readTraceFile(path string) ([]bench.Planned, bench.TraceSummary, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, bench.TraceSummary{}, err
	}
	defer file.Close()
	planned, summary, err := bench.ReadTracePublishes(file)
	summary.File = path
	return planned, summary, err
}

// options returns the options the two commands share.
func (f *benchFlags) options() (bench.Options, error) {
	opts := bench.DefaultOptions()
	modes, err := bench.ParseModes(f.mode)
	if err != nil {
		return opts, usageError{err.Error()}
	}
	if f.floorSamples <= 0 {
		return opts, usagef("--floor-samples must be positive")
	}
	if f.serverPIDs != "" && f.metricsURL != "" {
		return opts, usagef("--server-pid and --metrics both name the broker's CPU source; give one")
	}
	opts.Modes, opts.Prefetch, opts.DrainTimeout, opts.Server = modes, f.prefetch, f.drainTimeout, f.shared.server
	opts.Progress = f.progress()
	return opts, nil
}

func casesByName(names []string) ([]bench.Case, error) {
	if len(names) == 0 {
		return bench.BuiltinCases(), nil
	}
	var cases []bench.Case
	seen := map[string]bool{}
	for _, name := range names {
		c, err := bench.CaseByName(name)
		if err != nil {
			return nil, usageError{err.Error()}
		}
		if seen[name] {
			return nil, usagef("case %s is named twice", name)
		}
		seen[name] = true
		cases = append(cases, c)
	}
	return cases, nil
}

func (f *benchFlags) progress() io.Writer {
	if f.quiet {
		return io.Discard
	}
	return os.Stderr
}

// execute connects, measures the floors, runs and reports.
func (f *benchFlags) execute(ctx context.Context, opts bench.Options, stdout io.Writer) error {
	driver, err := dialBenchDriver(ctx, f.shared, f.dedup)
	if err != nil {
		return err
	}
	defer driver.Close()
	opts.CPU = f.cpuMeter()
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		opts.ClientCPU = bench.ProcessCPU{PID: os.Getpid()}
	}
	if opts.CPU != nil {
		if _, err := opts.CPU.CPUTime(ctx); err != nil {
			fmt.Fprintf(f.progress(), "bench: broker CPU not measured: %v\n", err)
			opts.CPU = nil
		}
	}
	opts.Syncs = f.syncMeter(ctx, opts.CPU)
	opts.Flushes = f.flushMeter(ctx)
	if f.floors {
		if opts.Floors, opts.DataDir, err = f.measureFloors(ctx, opts.MessageBytes); err != nil {
			return err
		}
	}
	report, runErr := bench.Run(ctx, driver, opts)
	if report == nil {
		return runErr
	}
	if err := report.WriteMarkdown(stdout); err != nil {
		return err
	}
	if f.jsonFile != "" {
		if err := writeJSONReport(f.jsonFile, report); err != nil {
			return err
		}
	}
	return runErr
}

// cpuMeter picks the broker CPU source; nil when there is none.
func (f *benchFlags) cpuMeter() bench.CPUMeter {
	switch {
	case f.serverPIDs != "":
		var processes bench.ProcessesCPU
		for _, field := range strings.Split(f.serverPIDs, ",") {
			pid, err := strconv.Atoi(strings.TrimSpace(field))
			if err != nil || pid <= 0 {
				fmt.Fprintf(f.progress(), "bench: broker CPU not measured: --server-pid %q is not a process id\n", field)
				return nil
			}
			processes = append(processes, bench.ProcessCPU{PID: pid})
		}
		return processes.Meter()
	case f.metricsURL != "":
		return bench.MetricsCPU{URL: f.metricsURL}
	}
	var processes bench.ProcessesCPU
	for _, address := range strings.Split(f.shared.server, ",") {
		address = strings.TrimSpace(address)
		pid, err := findListenerPID("/proc", address)
		if err != nil {
			fmt.Fprintf(f.progress(), "bench: broker CPU not measured: %v (give --server-pid or --metrics)\n", err)
			return nil
		}
		fmt.Fprintf(f.progress(), "bench: broker CPU from process %d, which listens on %s\n", pid, address)
		processes = append(processes, bench.ProcessCPU{PID: pid})
	}
	return processes.Meter()
}

// syncMeter picks where fibril_fsyncs_total is read; nil when nowhere
// (said on stderr). The node's HTTP endpoint is used only when it belongs
// to the process whose CPU is measured.
func (f *benchFlags) syncMeter(ctx context.Context, cpu bench.CPUMeter) bench.CountMeter {
	url := f.syncsURL
	if url == "" && f.metricsURL != "" {
		url = f.metricsURL
	}
	if url == "" {
		process, ok := cpu.(bench.ProcessCPU)
		if !ok || f.shared.http == "" {
			fmt.Fprintf(f.progress(), "bench: server fdatasyncs not measured: give --syncs URL (the node's /metrics)\n")
			return nil
		}
		url = "http://" + f.shared.http + "/metrics"
		if err := checkMetricsProcess(ctx, url, process.PID); err != nil {
			fmt.Fprintf(f.progress(), "bench: server fdatasyncs not measured: %v (give --syncs URL)\n", err)
			return nil
		}
	}
	meter := bench.MetricsCounter{URL: url, Name: "fibril_fsyncs_total"}
	if _, err := meter.Count(ctx); err != nil {
		fmt.Fprintf(f.progress(), "bench: server fdatasyncs not measured: %v\n", err)
		return nil
	}
	fmt.Fprintf(f.progress(), "bench: server fdatasyncs from %s\n", meter)
	return meter
}

// checkMetricsProcess makes sure the metrics page at url is the one of
// process pid (fibril_build_info's pid label).
func checkMetricsProcess(ctx context.Context, url string, pid int) error {
	request, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	response, err := (&http.Client{Timeout: 5 * time.Second}).Do(request)
	if err != nil {
		return err
	}
	defer response.Body.Close()
	if response.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, response.Status)
	}
	found, ok := bench.ParseLabelValue(response.Body, "fibril_build_info", "pid")
	if !ok {
		return fmt.Errorf("%s has no fibril_build_info", url)
	}
	if found != strconv.Itoa(pid) {
		return fmt.Errorf("%s belongs to process %s, not to the broker's %d", url, found, pid)
	}
	return nil
}

// flushMeter picks the block device whose flushes are counted; nil when
// none (said on stderr).
func (f *benchFlags) flushMeter(ctx context.Context) bench.CountMeter {
	device := f.flushDevice
	if device == "none" {
		return nil
	}
	if device == "" {
		dir := f.dataDir
		if dir == "" {
			dir = "."
		}
		found, err := bench.DeviceOf(dir)
		if err != nil {
			fmt.Fprintf(f.progress(), "bench: device flushes not counted: %v (give --flush-device)\n", err)
			return nil
		}
		device = found
	}
	meter := bench.DeviceFlushes{Device: device}
	if _, err := meter.Count(ctx); err != nil {
		fmt.Fprintf(f.progress(), "bench: device flushes not counted: %v\n", err)
		return nil
	}
	fmt.Fprintf(f.progress(), "bench: device flushes of %s (every process on it counts)\n", device)
	return meter
}

// measureFloors measures the floors in --data-dir, or in a temporary
// directory in the current one, and returns them with the directory used.
func (f *benchFlags) measureFloors(ctx context.Context, messageBytes int) (*bench.Floors, string, error) {
	dir := f.dataDir
	if dir == "" {
		temporary, err := os.MkdirTemp(".", ".fibril-bench-floors-")
		if err != nil {
			return nil, "", fmt.Errorf("floors: %w", err)
		}
		defer os.RemoveAll(temporary)
		dir = temporary
	}
	if absolute, err := filepath.Abs(dir); err == nil {
		dir = absolute
	}
	fmt.Fprintf(f.progress(), "bench: measuring the floors in %s\n", dir)
	floors, err := bench.MeasureFloors(ctx, bench.FloorOptions{Dir: dir, MessageBytes: messageBytes,
		RoundTrips: f.floorSamples, Writes: f.floorSamples, SyncedWrites: max(f.floorSamples/10, 1),
		IdleRoundTrips: max(f.floorSamples/50, 1), IdleGap: bench.DefaultFloorIdleGap})
	return floors, dir, err
}

func writeJSONReport(path string, report *bench.Report) error {
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := report.WriteJSON(file); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}
