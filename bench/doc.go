// Package bench is Fibril's latency harness: it puts a load shape on a
// queue through a Driver, keeps every raw latency sample, and reports
// publish-to-confirm and publish-to-delivery percentiles, achieved rates,
// lost and duplicated messages and broker CPU per million messages, beside
// the floors of the machine it ran on.
//
// The pieces, each in its own file:
//
//   - stats.go: Recorder keeps raw samples in preallocated memory; Summarize
//     computes nearest-rank percentiles, min, max, mean and standard
//     deviation from them.
//   - shape.go: the cases (steady-100, steady-10k, burst-200, saturation)
//     and replays, as Sources of publishes with intended times.
//   - pacer.go: sends each publish at its intended time, or at once when
//     late, and never moves the intended time (no coordinated omission).
//   - driver.go: the Driver interface the command-line tool implements over
//     the SDK, and the payload header (sequence number, intended time) that
//     lets the consumer side measure delivery latency and find gaps and
//     duplicates.
//   - ledger.go and collector.go: one run's accounting, owned by one
//     goroutine.
//   - run.go: Run, the runner: ABBA order for durable against buffered,
//     fresh queue per run, warm-up, drain, CPU.
//   - floors.go: loopback TCP round trip, write(2) and write+fdatasync.
//   - cpu.go: broker CPU from /proc/PID/stat or a metrics endpoint.
//   - report.go: the markdown tables and the JSON report.
//   - replay.go: the publishes of a recorded trace (wire's trace format)
//     as the Planned publishes of a replay case.
//   - fake.go: FakeDriver, an in-memory broker with delays and faults.
//   - platform_linux.go: fdatasync, USER_HZ and the pacer's precise sleep.
//
// Typical use, as `fibrilctl bench` does it:
//
//	floors, err := bench.MeasureFloors(ctx, floorOptions)
//	opts := bench.DefaultOptions()
//	opts.Modes, _ = bench.ParseModes("both")
//	opts.Floors = floors
//	opts.CPU = bench.ProcessCPU{PID: serverPID}
//	report, err := bench.Run(ctx, driver, opts)
//	report.WriteMarkdown(os.Stdout)
//	report.WriteJSON(jsonFile)
//
// A replay builds its publishes from a recorded trace and runs them as one
// case made by ReplayCase, through the same runner and report:
//
//	planned, summary, err := bench.ReadTracePublishes(traceFile)
//	replay, err := bench.ReplayCase("replay", planned, speed)
//	opts.Cases, opts.Trace = []bench.Case{replay}, &summary
package bench
