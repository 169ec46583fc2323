package runtime

// The registry is the broker's own table of live actors, the source of the
// debug endpoint's actor tree. An actor enters it when it handles Started and
// leaves it when it handles Stopped, both observed by a receiver middleware,
// so a stopped actor disappears whatever stopped it. Paths are the actor
// system's hierarchical ids ("node/queues/orders/0/log"); Tree rebuilds the
// hierarchy by splitting them on "/", with path segments that are not
// actors themselves (a queue name above its partitions) shown as plain
// grouping nodes.
//
// Each entry holds its actor's mailbox (read for the current depth), a
// one-line summary of the actor's state, and a restart count. Reads never
// touch actor state. A summary is either text the actor replaced
// (SetSummary, for changes an operator cares about and that are rare) or
// lazy (SetSummaryValues): the actor stores a few integers atomically, as
// often as it likes, and the registry formats them only when it is read,
// so a hot path never formats text. The values of a lazy summary are each
// current when read; a reader may see them from two neighbouring moments.
//
// Each entry also owns its actor's keep-alive dispatcher (dispatcher.go),
// which Props installs and the lifecycle middleware retires on Stopped.

import (
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// ActorInfo is one live actor as the debug endpoint shows it.
type ActorInfo struct {
	Path         string    // hierarchical id, e.g. "node/queues/orders/0"
	Kind         string    // "node", "sessions", "session", "queues", "partition", "log", "sync"
	MailboxDepth int       // user messages waiting in the mailbox now
	Summary      string    // one line the actor published about its state
	Restarts     uint64    // restarts of this actor since it was spawned
	StartedAt    time.Time // when the actor first started
}

// ActorNode is one node of the rebuilt actor tree. Actor is nil for a
// grouping segment that is not an actor.
type ActorNode struct {
	Name     string       // last path segment
	Path     string       // full path of this node
	Actor    *ActorInfo   // the live actor at this path, if any
	Children []*ActorNode // sorted by name
}

// Registry tracks live actors. All methods are safe for concurrent use.
type Registry struct {
	clock         func() time.Time
	restartsTotal atomic.Uint64

	mu      sync.Mutex
	entries map[string]*Entry // by path
}

// NewRegistry returns an empty registry that stamps start times with clock.
func NewRegistry(clock func() time.Time) *Registry {
	if clock == nil {
		clock = time.Now
	}
	return &Registry{clock: clock, entries: make(map[string]*Entry)}
}

// Entry is one actor's row in the registry. Its owning actor publishes its
// summary through SetSummary or SetSummaryValues; everything else is
// maintained by the registry.
type Entry struct {
	kind       string
	path       string       // set when the actor first handles Started
	startedAt  time.Time    // set with path
	mailbox    atomic.Value // holds mailboxHolder
	summary    atomic.Pointer[string]
	format     atomic.Pointer[SummaryFormat] // set: the summary is lazy
	values     [SummaryValuesMax]atomic.Int64
	restarts   atomic.Uint64
	dispatcher *KeepAliveDispatcher // runs the actor's mailbox (dispatcher.go)

	// Lifecycle (lifecycle.go). parent is set with path; phase moves with
	// the lifecycle messages; stopAsked is the reason the actor was asked
	// to stop (0 until then), written under stopMu, which also orders stop
	// requests against restart decisions; stopped closes on Stopped.
	parent    *Entry
	phase     atomic.Int32
	stopMu    sync.Mutex
	stopAsked atomic.Uint32
	stopped   chan struct{}
}

type mailboxHolder struct{ mailbox actor.Mailbox }

// SummaryValuesMax is how many integers a lazy summary carries.
const SummaryValuesMax = 10

// SummaryFormat turns a lazy summary's values into its text. It runs on
// the reader's goroutine: it may use only its argument and data that never
// changes.
type SummaryFormat func(values [SummaryValuesMax]int64) string

// SetSummary publishes a one-line description of the actor's state and
// ends a lazy summary. It formats and allocates: keep it for rare changes,
// never per message or per batch.
func (e *Entry) SetSummary(summary string) {
	e.summary.Store(&summary)
	e.format.Store(nil)
}

// SetSummaryValues makes the summary lazy: format (a pointer to a
// package-level variable, so the call does not allocate) turns values into
// text when the registry is read. Values past SummaryValuesMax panic;
// missing ones are zero. Cheap enough for every batch: a few atomic stores.
func (e *Entry) SetSummaryValues(format *SummaryFormat, values ...int64) {
	if len(values) > SummaryValuesMax {
		panic("runtime: too many summary values")
	}
	for i := range e.values {
		var value int64
		if i < len(values) {
			value = values[i]
		}
		e.values[i].Store(value)
	}
	if e.format.Load() != format {
		e.format.Store(format)
	}
}

// Summary returns the actor's summary now (formatted here when lazy).
func (e *Entry) Summary() string {
	if format := e.format.Load(); format != nil {
		var values [SummaryValuesMax]int64
		for i := range values {
			values[i] = e.values[i].Load()
		}
		return (*format)(values)
	}
	if summary := e.summary.Load(); summary != nil {
		return *summary
	}
	return ""
}

// Path returns the actor's hierarchical id once it has started.
func (e *Entry) Path() string { return e.path }

func (e *Entry) info() ActorInfo {
	info := ActorInfo{Path: e.path, Kind: e.kind, Restarts: e.restarts.Load(), StartedAt: e.startedAt}
	if holder, ok := e.mailbox.Load().(mailboxHolder); ok {
		info.MailboxDepth = holder.mailbox.UserMessageCount()
	}
	info.Summary = e.Summary()
	return info
}

// RestartsTotal returns how many restarts every actor has gone through.
func (r *Registry) RestartsTotal() uint64 { return r.restartsTotal.Load() }

// Snapshot returns every live actor, sorted by path.
func (r *Registry) Snapshot() []ActorInfo {
	r.mu.Lock()
	infos := make([]ActorInfo, 0, len(r.entries))
	for _, entry := range r.entries {
		infos = append(infos, entry.info())
	}
	r.mu.Unlock()
	sort.Slice(infos, func(i, j int) bool { return infos[i].Path < infos[j].Path })
	return infos
}

// Lookup returns the live actor at path.
func (r *Registry) Lookup(path string) (ActorInfo, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	entry, ok := r.entries[path]
	if !ok {
		return ActorInfo{}, false
	}
	return entry.info(), true
}

// Tree rebuilds the hierarchy from the live actors' paths and returns its
// roots, sorted by name.
func (r *Registry) Tree() []*ActorNode {
	return BuildTree(r.Snapshot())
}

// BuildTree is the pure part of Tree: infos must be sorted by path.
func BuildTree(infos []ActorInfo) []*ActorNode {
	top := &ActorNode{}
	byPath := map[string]*ActorNode{"": top}
	for i := range infos {
		info := &infos[i]
		parent := top
		segments := strings.Split(info.Path, "/")
		for depth := range segments {
			path := strings.Join(segments[:depth+1], "/")
			node, ok := byPath[path]
			if !ok {
				node = &ActorNode{Name: segments[depth], Path: path}
				byPath[path] = node
				parent.Children = append(parent.Children, node)
			}
			parent = node
		}
		parent.Actor = info
	}
	sortTree(top)
	return top.Children
}

func sortTree(node *ActorNode) {
	sort.Slice(node.Children, func(i, j int) bool { return node.Children[i].Name < node.Children[j].Name })
	for _, child := range node.Children {
		sortTree(child)
	}
}

// Props builds the Props for one spawn of an actor of the given kind: the
// actor is made by producer (called again on every restart) with its
// registry entry, its mailbox is recorded for depth reads, it runs on its
// own keep-alive dispatcher (dispatcher.go; an option given here, such as
// the sessions' synchronized dispatcher, replaces it), and the middlewares
// log panics and keep the registry in step with the actor's life. Props
// must not be reused for a second spawn: the dispatcher serves one mailbox.
func (r *Registry) Props(kind string, logger *slog.Logger, producer func(*Entry) actor.Actor,
	options ...actor.PropsOption) *actor.Props {
	entry := &Entry{kind: kind, dispatcher: NewKeepAliveDispatcher(DispatcherThroughput, DispatcherIdle),
		stopped: make(chan struct{})}
	base := []actor.PropsOption{
		actor.WithMailbox(func() actor.Mailbox {
			mailbox := actor.Unbounded()()
			entry.mailbox.Store(mailboxHolder{mailbox: mailbox})
			return mailbox
		}),
		actor.WithDispatcher(entry.dispatcher),
		actor.WithReceiverMiddleware(panicLogging(logger, kind), r.lifecycle(entry)),
	}
	return actor.PropsFromProducer(func() actor.Actor {
		return &lifecycleGate{inner: producer(entry), entry: entry, logger: logger}
	}, append(base, options...)...)
}

// lifecycle keeps entry registered from Started to Stopped, moves its
// phase (lifecycle.go) and counts restarts.
func (r *Registry) lifecycle(entry *Entry) actor.ReceiverMiddleware {
	return func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(ctx actor.ReceiverContext, envelope *actor.MessageEnvelope) {
			switch envelope.Message.(type) {
			case *actor.Started:
				r.add(entry, ctx.Self().Id, ctx.Parent())
				if entry.Phase() < PhaseStopping {
					entry.BecomePhase(PhaseRunning)
				}
			case *actor.Restarting:
				entry.BecomePhase(PhaseRestarting)
				entry.restarts.Add(1)
				r.restartsTotal.Add(1)
			case *actor.Stopping:
				entry.BecomePhase(PhaseStopping)
			case *actor.Stopped:
				r.remove(entry)
				next(ctx, envelope)
				entry.BecomePhase(PhaseStopped)
				close(entry.stopped)
				entry.dispatcher.Retire()
				return
			}
			next(ctx, envelope)
		}
	}
}

func (r *Registry) add(entry *Entry, path string, parent *actor.PID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if entry.path == "" {
		entry.path = path
		entry.startedAt = r.clock()
		if parent != nil {
			entry.parent = r.entries[parent.Id]
		}
	}
	r.entries[path] = entry
}

// EntryAt returns the live entry at path, or nil.
func (r *Registry) EntryAt(path string) *Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.entries[path]
}

func (r *Registry) remove(entry *Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.entries[entry.path] == entry {
		delete(r.entries, entry.path)
	}
}
