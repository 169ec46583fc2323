package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/admin"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/wire"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
	exitFatal = 70
)

// fatalCloseTimeout bounds the best-effort close after a fatal failure.
const fatalCloseTimeout = 10 * time.Second

// startHTTP starts the HTTP debug/admin endpoint on the --http address
// (in a cluster, the node's http_address).
func startHTTP(broker *actors.Broker, addr string, flags serveFlags, httpToken string) (httpEndpoint, error) {
	return admin.Start(addr, admin.NodeFor(broker), admin.Options{
		Token:            httpToken,
		ProtectReads:     flags.httpProtectReads,
		AllowNonLoopback: flags.httpAllowNonLoopback,
		Logger:           broker.Config().Logger,
	})
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "hash-token":
		return hashToken(args[1:], os.Stdin, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "fibril %s (protocol %d)\n", actors.Version, wire.ProtocolVersion)
		return exitOK
	case "help", "-h", "--help":
		usage(stdout)
		return exitOK
	}
	fmt.Fprintf(stderr, "fibril: unknown command %q\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  fibril serve [flags]   run a node; "fibril serve -h" lists the flags
  fibril serve --config FILE --node ID
                         run one node of a cluster (docs/cluster.md)
  fibril hash-token [--generate]
                         hash a token read from standard input (or a new one)
                         for the users file (docs/security.md)
  fibril version         print the version
`)
}

// The bounds of --segment-bytes: a segment holds at least one index
// interval, and the log takes at most 1 GiB.
const (
	minSegmentBytes = 4 << 10
	maxSegmentBytes = 1 << 30
)

// serveFlags are the flags of `fibril serve`.
type serveFlags struct {
	data, listen, http string
	syncInterval       time.Duration
	configFile, nodeID string
	// rejoinEmpty lets a cluster node whose data is lost for good rejoin
	// on an empty data directory as a new replica (cluster.go).
	rejoinEmpty  bool
	recordTrace  string
	logLevel     string
	maxBodyBytes uint
	// Node-wide storage budgets.
	tailCacheBytes   int64
	openSegmentFiles int
	// Log upkeep of every queue (0: the broker's default): the segment
	// size, the checkpoint interval in applied records, and how long a
	// follower that stopped counting holds its owner's compaction.
	segmentBytes          int64
	checkpointRecords     int
	followerRetentionHold time.Duration
	// Lifecycle and keepalive settings (0: the broker's default).
	shutdownTimeout, helloTimeout, keepaliveInterval time.Duration
	keepaliveMissedMax                               uint
	// HTTP endpoint access.
	httpProtectReads     bool
	httpAllowNonLoopback bool
	// Tokens, users, TLS and bounds (security.go).
	security securityFlags
}

func parseServeFlags(args []string, stderr io.Writer) (serveFlags, error) {
	var f serveFlags
	set := flag.NewFlagSet("fibril serve", flag.ContinueOnError)
	set.SetOutput(stderr)
	set.StringVar(&f.data, "data", actors.DefaultDataDir, "data directory")
	set.StringVar(&f.listen, "listen", actors.DefaultListenAddr, "client listener address (host:port; port 0 picks one)")
	set.StringVar(&f.http, "http", actors.DefaultHTTPAddr, "HTTP debug/admin endpoint address")
	set.DurationVar(&f.syncInterval, "sync-interval", actors.DefaultSyncInterval,
		"background sync interval of every queue log; 0 turns it off and leaves syncing to the OS")
	set.StringVar(&f.configFile, "config", "", "cluster config file (cluster mode)")
	set.StringVar(&f.nodeID, "node", "", "this node's id in the cluster config (cluster mode)")
	set.BoolVar(&f.rejoinEmpty, "rejoin-empty", false,
		"cluster mode: this node's data is lost for good; on an empty data directory the cluster knows, rejoin as a new replica "+
			"that copies its queues from the other nodes (without it such a start is refused)")
	set.StringVar(&f.recordTrace, "record-trace", "", "record every client frame to this trace file")
	set.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	set.UintVar(&f.maxBodyBytes, "max-body-bytes", wire.DefaultMaxBodyBytes, "largest frame body accepted")
	set.Int64Var(&f.tailCacheBytes, "tail-cache-bytes", actors.DefaultTailCacheBytes,
		"memory the tail caches of every queue log hold together (each log also keeps to 8 MiB)")
	set.IntVar(&f.openSegmentFiles, "open-segment-files", actors.DefaultOpenSegmentFiles,
		"descriptors kept open for the sealed segments of every queue log together")
	set.Int64Var(&f.segmentBytes, "segment-bytes", log.DefaultSegmentBytes,
		"size of each queue log's segment files; a log compacts in whole segments")
	set.IntVar(&f.checkpointRecords, "checkpoint-records", actors.DefaultCheckpointEveryRecords,
		"applied records after which a queue checkpoints its state and compacts its log")
	set.DurationVar(&f.followerRetentionHold, "follower-retention-hold", actors.DefaultFollowerRetentionHold,
		"cluster mode: how long a follower that stopped counting holds its owner's compaction; one gone longer "+
			"catches up from the owner's snapshot")
	set.DurationVar(&f.shutdownTimeout, "shutdown-timeout", actors.DefaultShutdownTimeout,
		"bound on a clean shutdown: finishing in-flight work, stopping every actor, closing every log")
	set.DurationVar(&f.helloTimeout, "hello-timeout", actors.DefaultHelloTimeout,
		"a connection that sends no hello within this is closed")
	set.DurationVar(&f.keepaliveInterval, "keepalive-interval", actors.DefaultKeepaliveInterval,
		"how often each connection is checked; a silent one is pinged")
	set.UintVar(&f.keepaliveMissedMax, "keepalive-missed-max", actors.DefaultKeepaliveMissedMax,
		"pings a connection may leave unanswered in a row before it is closed")
	set.BoolVar(&f.httpProtectReads, "http-protect-reads", false, "require the HTTP token for reads too")
	set.BoolVar(&f.httpAllowNonLoopback, "http-allow-non-loopback", false,
		"allow the HTTP endpoint on a non-loopback address")
	f.security.register(set)
	if err := set.Parse(args); err != nil {
		return f, err
	}
	if set.NArg() > 0 {
		return f, fmt.Errorf("unexpected arguments: %s", strings.Join(set.Args(), " "))
	}
	if f.syncInterval < 0 {
		return f, fmt.Errorf("--sync-interval must not be negative")
	}
	if f.tailCacheBytes <= 0 || f.openSegmentFiles <= 0 {
		return f, fmt.Errorf("--tail-cache-bytes and --open-segment-files must be above 0")
	}
	if f.segmentBytes < minSegmentBytes || f.segmentBytes > maxSegmentBytes {
		return f, fmt.Errorf("--segment-bytes must be between %d and %d", minSegmentBytes, maxSegmentBytes)
	}
	if f.checkpointRecords <= 0 || f.followerRetentionHold <= 0 {
		return f, fmt.Errorf("--checkpoint-records and --follower-retention-hold must be above 0")
	}
	if f.shutdownTimeout <= 0 || f.helloTimeout <= 0 || f.keepaliveInterval <= 0 || f.keepaliveMissedMax == 0 {
		return f, fmt.Errorf("--shutdown-timeout, --hello-timeout, --keepalive-interval and --keepalive-missed-max must be above 0")
	}
	if err := f.security.check(set); err != nil {
		return f, err
	}
	if err := checkClusterFlags(set, f); err != nil {
		return f, err
	}
	return f, nil
}

func serve(args []string, stdout, stderr io.Writer) int {
	flags, err := parseServeFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "fibril serve: %v\n", err)
		return exitUsage
	}
	logger, err := newLogger(stderr, flags.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "fibril serve: %v\n", err)
		return exitUsage
	}
	config := actors.DefaultConfig()
	config.DataDir, config.ListenAddr, config.HTTPAddr = flags.data, flags.listen, flags.http
	config.SyncInterval, config.Logger = flags.syncInterval, logger
	config.MaxBodyBytes = uint32(min(flags.maxBodyBytes, 1<<30))
	config.ShutdownTimeout, config.HelloTimeout = flags.shutdownTimeout, flags.helloTimeout
	config.KeepaliveInterval = flags.keepaliveInterval
	config.KeepaliveMissedMax = int(min(flags.keepaliveMissedMax, 1<<20))
	config.TailCacheBytes, config.OpenSegmentFiles = flags.tailCacheBytes, flags.openSegmentFiles
	config.SegmentBytes, config.CheckpointEveryRecords = flags.segmentBytes, flags.checkpointRecords
	config.FollowerRetentionHold = flags.followerRetentionHold
	node, err := maybeStartClusterNode(&config, flags, logger)
	if err != nil {
		fmt.Fprintf(stderr, "fibril serve: %v\n", err)
		return exitError
	}
	if node != nil {
		defer node.Close() // after the broker: stop proposing, then close Raft
	}
	var self *cluster.NodeConfig
	if node != nil {
		clusterConfig := node.Config()
		found, _ := clusterConfig.Node(node.ID())
		self = &found
	}
	secured, err := buildSecurity(&config, flags, self, logger)
	if err != nil {
		fmt.Fprintf(stderr, "fibril serve: %v\n", err)
		return exitError
	}
	secured.node = node
	stopTrace, err := maybeRecordTrace(&config, flags.recordTrace)
	if err != nil {
		fmt.Fprintf(stderr, "fibril serve: %v\n", err)
		return exitError
	}
	defer stopTrace()

	broker, err := actors.Start(config)
	if err != nil {
		fmt.Fprintf(stderr, "fibril serve: %v\n", err)
		return exitError
	}
	httpServer, err := maybeStartHTTP(broker, config.HTTPAddr, flags, secured.httpToken)
	if err != nil {
		fmt.Fprintf(stderr, "fibril serve: HTTP endpoint on %s: %v\n", config.HTTPAddr, err)
		closeWithin(broker, fatalCloseTimeout, logger)
		return exitError
	}
	// Every listener is bound: only now is the node ready (make cluster and
	// scripts wait for this line).
	if node != nil {
		fmt.Fprintf(stdout, "fibril: cluster node %s (config %s)\n", node.ID(), flags.configFile)
	}
	if httpServer != nil {
		fmt.Fprintf(stdout, "fibril: HTTP endpoint on %s\n", httpServer.Addr())
	}
	fmt.Fprintf(stdout, "fibril: serving clients on %s (data %s, background sync %s)\n",
		broker.Addr(), config.DataDir, describeSync(config.SyncInterval))
	status := waitForShutdown(broker, logger, func() { secured.reload(broker, logger) })
	if httpServer != nil {
		_ = httpServer.Close()
	}
	if status == exitFatal {
		closeWithin(broker, fatalCloseTimeout, logger)
		return exitFatal
	}
	if err := broker.Close(); err != nil {
		logger.Error("shutdown was not clean", "err", err)
		return exitError
	}
	fmt.Fprintln(stdout, "fibril: stopped")
	return status
}

func describeSync(interval time.Duration) string {
	if interval == 0 {
		return "off (the OS decides when written data reaches the disk)"
	}
	return "every " + interval.String()
}

// httpEndpoint is the running HTTP endpoint.
type httpEndpoint interface {
	io.Closer
	Addr() net.Addr
}

// maybeStartHTTP starts the HTTP endpoint unless --http is empty. A bad
// address stops start-up: an operator who asked for the endpoint gets it
// or a clear error.
func maybeStartHTTP(broker *actors.Broker, addr string, flags serveFlags, httpToken string) (httpEndpoint, error) {
	if addr == "" {
		return nil, nil
	}
	return startHTTP(broker, addr, flags, httpToken)
}

// waitForShutdown blocks until a signal (clean shutdown) or a fatal
// failure; SIGHUP runs reload and goes on waiting. A second stop signal
// exits at once.
func waitForShutdown(broker *actors.Broker, logger *slog.Logger, reload func()) int {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	hangups := make(chan os.Signal, 1)
	signal.Notify(hangups, syscall.SIGHUP)
	defer signal.Stop(hangups)
	for {
		select {
		case <-hangups:
			reload()
		case sig := <-signals:
			logger.Info("shutting down", "signal", sig.String())
			go func() {
				sig := <-signals
				logger.Error("second signal; exiting without a clean shutdown", "signal", sig.String())
				os.Exit(exitError)
			}()
			return exitOK
		case <-broker.Fatal():
			// The broker logged the failure (one line naming it).
			return exitFatal
		}
	}
}

// closeWithin closes the broker but gives up after timeout.
func closeWithin(broker *actors.Broker, timeout time.Duration, logger *slog.Logger) {
	done := make(chan error, 1)
	go func() { done <- broker.Close() }()
	select {
	case err := <-done:
		if err != nil {
			logger.Warn("close after the failure reported", "err", err)
		}
	case <-time.After(timeout):
		logger.Warn("close after the failure did not finish in time")
	}
}

// maybeRecordTrace starts a trace recorder when a file is named.
func maybeRecordTrace(config *actors.Config, file string) (stop func(), err error) {
	if file == "" {
		return func() {}, nil
	}
	// 0600: a trace holds every message's payload (hello tokens are
	// redacted, the payloads are not). Chmod covers a file that existed.
	out, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--record-trace: %w", err)
	}
	if err := out.Chmod(0o600); err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("--record-trace: %w", err)
	}
	recorder, err := wire.NewRecorder(out, wire.RecorderOptions{Label: "fibril client listener"})
	if err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("--record-trace: %w", err)
	}
	traceSwitch := &wire.TraceSwitch{}
	traceSwitch.Start(recorder)
	config.Trace = traceSwitch
	return func() {
		if running := traceSwitch.Stop(); running != nil {
			_ = running.Close()
		}
		_ = out.Close()
	}, nil
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var parsed slog.Level
	if err := parsed.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: parsed})), nil
}
