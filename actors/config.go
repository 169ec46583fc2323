package actors

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fibrilmq/fibril/access"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/replication"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/tlsconfig"
	"github.com/fibrilmq/fibril/wire"
)

// Defaults of a single node started with no arguments.
const (
	DefaultDataDir      = "fibril-data"
	DefaultListenAddr   = "127.0.0.1:7420"
	DefaultHTTPAddr     = "127.0.0.1:7480"
	DefaultSyncInterval = 100 * time.Millisecond
	DefaultPrefetch     = 256
	MaxPrefetch         = 65535
	DefaultNodeID       = "standalone"
	// DefaultShutdownTimeout bounds Broker.Close: draining the sessions,
	// stopping every actor and closing every log, all together.
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultFollowerRetentionHold is how long a follower that stopped
	// counting holds its owner's compaction (Config.FollowerRetentionHold).
	DefaultFollowerRetentionHold = time.Hour
	// DefaultCheckpointEveryRecords is how many applied records make a
	// queue checkpoint (Config.CheckpointEveryRecords).
	DefaultCheckpointEveryRecords = 100_000
	// DefaultHelloTimeout is how long a new connection has to send hello.
	DefaultHelloTimeout = 10 * time.Second
	// DefaultKeepaliveInterval is how often the node checks that a client
	// was heard from, and pings one that was not.
	DefaultKeepaliveInterval = 15 * time.Second
	// DefaultKeepaliveMissedMax is how many pings in a row may go
	// unanswered (nothing at all heard from the client) before the node
	// closes the connection: with the defaults a silent client is closed
	// 45 to 60 seconds after its last frame.
	DefaultKeepaliveMissedMax = 3
	// DefaultTailCacheBytes is the node-wide tail-cache budget of the
	// queue logs.
	DefaultTailCacheBytes = log.DefaultBudgetTailCacheBytes
	// DefaultOpenSegmentFiles is the node-wide bound on descriptors of
	// sealed log segments.
	DefaultOpenSegmentFiles = log.DefaultOpenSegmentFiles
)

// Version is the server software version reported in hello-ok.
const Version = "0.1.0"

// BufferedWarning is the warning every buffered declare is answered with on
// a single node.
const BufferedWarning = "buffered queue on a single node: confirms and deliveries do not wait for fsync; " +
	"one power loss or storage failure can lose recent confirmed messages (background sync usually " +
	"bounds the window to the sync interval, but slow I/O or failures can extend it)"

// Config is a broker's configuration. Start from DefaultConfig and change
// what you need; Start validates it.
type Config struct {
	// DataDir holds every queue's directory.
	DataDir string
	// ListenAddr is the client listener's address ("127.0.0.1:0" picks a
	// free port; Broker.Addr reports it).
	ListenAddr string
	// HTTPAddr is the debug/admin endpoint's address. The broker does not
	// listen on it; it is kept here for the HTTP endpoint.
	HTTPAddr string
	// SyncInterval is the background sync target of every queue log; 0
	// turns background sync off (the OS alone decides when written data
	// reaches the disk). Live-settable with Broker.SetSyncInterval.
	SyncInterval time.Duration
	// NodeID is reported in hello-ok.
	NodeID string
	// AuthToken, when set, must be presented by every client's hello (one
	// token shared by every client, with every permission). Exclusive with
	// Users.
	AuthToken string
	// Users, when set, authenticates every hello's "<user>:<token>" and
	// checks every request against that user's permissions
	// (docs/security.md). Broker.ReloadUsers reloads its file and closes
	// the sessions of users it revoked.
	Users *access.Store
	// TLS, when set, makes the client listener speak TLS only: the
	// handshake runs within HelloTimeout, and a client that speaks plain
	// text is told so in one plain error frame. Reload it (SIGHUP) with
	// its own Reload; new handshakes use the files in force.
	TLS *tlsconfig.Server
	// AllowInsecureListen lets ListenAddr be an address other than
	// loopback without TLS and authentication (a token or Users). Start
	// refuses such an address without it, and logs a warning with it.
	AllowInsecureListen bool
	// Limits bound what clients may make the node hold (limits.go); zero
	// fields take their defaults.
	Limits Limits
	// MaxBodyBytes is the largest frame body the node accepts (0 means
	// wire.DefaultMaxBodyBytes).
	MaxBodyBytes uint32
	// FS is the filesystem every queue log goes through (nil means the
	// real one). Tests pass a fault-injecting one.
	FS vfs.FS
	// SegmentBytes is the log segment size (0 means the log's default).
	SegmentBytes int64
	// TailCacheBytes bounds the memory every queue log's tail cache holds
	// together, node-wide (0 means DefaultTailCacheBytes). Each log also
	// keeps to its own cap of 8 MiB.
	TailCacheBytes int64
	// OpenSegmentFiles bounds the descriptors kept open for the sealed
	// segments of every queue log together (0 means
	// DefaultOpenSegmentFiles); each log's active segment keeps its own
	// four outside it.
	OpenSegmentFiles int
	// CheckpointEveryRecords is how many applied records make a queue
	// checkpoint its state (and compact its log after); 0 means
	// DefaultCheckpointEveryRecords.
	CheckpointEveryRecords int
	// FollowerRetentionHold is how long, in a cluster, a follower that
	// stopped counting (down, unreachable, latched) keeps holding its
	// owner's compaction at its last durable position (0 means
	// DefaultFollowerRetentionHold). A follower gone longer catches up
	// from the owner's snapshot when it returns.
	FollowerRetentionHold time.Duration
	// OwnerDiskStallAfter is how long, in a cluster, work may wait on an
	// owner's queue disk with no progress (a write or, for a durable queue,
	// an fsync that does not return) before the owner fences its copy and
	// hands the partition to a healthy one (0 means
	// replication.DiskStallAfter; partition_diskwatch.go).
	OwnerDiskStallAfter time.Duration
	// Trace, when set, records every client frame while a recorder runs.
	Trace *wire.TraceSwitch
	// Logger receives the broker's log lines (nil means discard).
	Logger *slog.Logger
	// Clock is the broker's time source (nil means time.Now).
	Clock func() time.Time
	// Fatal is called, on its own goroutine, with a failure the node cannot
	// contain. The default records it for Broker.Fatal; cmd/fibril then
	// exits non-zero.
	Fatal func(error)
	// ShutdownTimeout bounds Close as a whole (0 means
	// DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// HelloTimeout is how long a connection may take to send hello before
	// the node closes it with protocol_violation (0 means
	// DefaultHelloTimeout).
	HelloTimeout time.Duration
	// KeepaliveInterval is how often the node checks each connection: one
	// it heard nothing from since the last check gets a ping (0 means
	// DefaultKeepaliveInterval).
	KeepaliveInterval time.Duration
	// KeepaliveMissedMax is how many checks in a row may find a connection
	// silent (each sends a ping) before the next one closes it with
	// protocol_violation (0 means DefaultKeepaliveMissedMax).
	KeepaliveMissedMax int
	// Cluster, when set, makes the broker one node of a cluster (see
	// cluster.go): the catalog decides which queues exist and which node
	// owns each. The caller starts the node before the broker and closes it
	// after Broker.Close. NodeID defaults to the cluster node's id.
	Cluster *cluster.Node
}

// DefaultConfig returns the configuration of `fibril serve` with no flags.
func DefaultConfig() Config {
	return Config{
		DataDir:      DefaultDataDir,
		ListenAddr:   DefaultListenAddr,
		HTTPAddr:     DefaultHTTPAddr,
		SyncInterval: DefaultSyncInterval,
		NodeID:       DefaultNodeID,
	}
}

// ErrInvalidConfig is returned by Start for a configuration it refuses.
var ErrInvalidConfig = errors.New("actors: invalid configuration")

// withDefaults fills the fields whose zero value means "default" and
// checks the rest.
func (c Config) withDefaults() (Config, error) {
	if c.DataDir == "" {
		return c, fmt.Errorf("%w: empty data directory", ErrInvalidConfig)
	}
	if c.ListenAddr == "" {
		return c, fmt.Errorf("%w: empty listen address", ErrInvalidConfig)
	}
	if c.SyncInterval < 0 {
		return c, fmt.Errorf("%w: negative sync interval %v", ErrInvalidConfig, c.SyncInterval)
	}
	if c.NodeID == "" {
		c.NodeID = DefaultNodeID
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = wire.DefaultMaxBodyBytes
	}
	if c.MaxBodyBytes < wire.MinMaxBodyBytes {
		return c, fmt.Errorf("%w: max body bytes %d is below the protocol's minimum of %d",
			ErrInvalidConfig, c.MaxBodyBytes, wire.MinMaxBodyBytes)
	}
	if c.FS == nil {
		c.FS = vfs.OS
	}
	if c.Logger == nil {
		c.Logger = runtime.DiscardLogger()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.TailCacheBytes < 0 || c.OpenSegmentFiles < 0 {
		return c, fmt.Errorf("%w: negative tail-cache budget %d or open segment files %d", ErrInvalidConfig,
			c.TailCacheBytes, c.OpenSegmentFiles)
	}
	c.TailCacheBytes = cmp.Or(c.TailCacheBytes, DefaultTailCacheBytes)
	c.OpenSegmentFiles = cmp.Or(c.OpenSegmentFiles, DefaultOpenSegmentFiles)
	if c.ShutdownTimeout < 0 || c.HelloTimeout < 0 || c.KeepaliveInterval < 0 || c.KeepaliveMissedMax < 0 {
		return c, fmt.Errorf("%w: negative shutdown, hello or keepalive setting", ErrInvalidConfig)
	}
	if c.FollowerRetentionHold < 0 {
		return c, fmt.Errorf("%w: negative follower retention hold %v", ErrInvalidConfig, c.FollowerRetentionHold)
	}
	c.FollowerRetentionHold = cmp.Or(c.FollowerRetentionHold, DefaultFollowerRetentionHold)
	if c.OwnerDiskStallAfter < 0 {
		return c, fmt.Errorf("%w: negative owner disk stall bound %v", ErrInvalidConfig, c.OwnerDiskStallAfter)
	}
	c.OwnerDiskStallAfter = cmp.Or(c.OwnerDiskStallAfter, replication.DiskStallAfter)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, DefaultShutdownTimeout)
	c.HelloTimeout = cmp.Or(c.HelloTimeout, DefaultHelloTimeout)
	c.KeepaliveInterval = cmp.Or(c.KeepaliveInterval, DefaultKeepaliveInterval)
	c.KeepaliveMissedMax = cmp.Or(c.KeepaliveMissedMax, DefaultKeepaliveMissedMax)
	if c.AuthToken != "" && c.Users != nil {
		return c, fmt.Errorf("%w: a shared auth token and a users file exclude each other: with users, every client "+
			"authenticates as a user", ErrInvalidConfig)
	}
	limits, err := c.Limits.withDefaults()
	if err != nil {
		return c, err
	}
	c.Limits = limits
	return c.checkClusterConfig()
}
