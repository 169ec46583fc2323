package admin

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// fakeNode is a Node whose answers the tests set. It is a QueueSyncer:
// SyncQueue makes the queue's written records durable.
type fakeNode struct {
	mu           sync.Mutex
	info         NodeInfo
	queues       map[string]QueueStatus
	actors       map[string]ActorInfo
	health       Health
	setErr       error
	syncErr      error
	syncInterval time.Duration
	setCalls     []time.Duration
	metrics      *prometheus.Registry
}

func newFakeNode(started time.Time) *fakeNode {
	node := &fakeNode{
		info: NodeInfo{
			NodeID: "node-a", Version: "9.9.9", StartedAt: started, DataDir: "/var/lib/fibril",
			Listen:   map[string]string{"client": "127.0.0.1:7420"},
			Settings: map[string]any{"max_body_bytes": 1 << 20},
		},
		queues:       map[string]QueueStatus{},
		actors:       map[string]ActorInfo{},
		syncInterval: 100 * time.Millisecond,
		metrics:      prometheus.NewRegistry(),
	}
	return node
}

func (f *fakeNode) NodeInfo() NodeInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	info := f.info
	info.SyncInterval = f.syncInterval
	return info
}

func (f *fakeNode) Queues() []QueueStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	var queues []QueueStatus
	for _, q := range f.queues {
		queues = append(queues, q)
	}
	return queues
}

func (f *fakeNode) Queue(name string) (QueueStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, ok := f.queues[name]
	return q, ok
}

func (f *fakeNode) Actors() []ActorInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	var infos []ActorInfo
	for _, info := range f.actors {
		infos = append(infos, info)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Path < infos[j].Path })
	return infos
}

func (f *fakeNode) Health() Health {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.health
}

func (f *fakeNode) SetSyncInterval(interval time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setCalls = append(f.setCalls, interval)
	if f.setErr != nil {
		return f.setErr
	}
	f.syncInterval = interval
	for name, q := range f.queues {
		q.SyncIntervalMs = uint64(interval / time.Millisecond)
		f.queues[name] = q
	}
	return nil
}

func (f *fakeNode) SyncQueue(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, ok := f.queues[name]
	if !ok {
		return fmt.Errorf("fake: %w: %s", ErrNoSuchQueue, name)
	}
	if f.syncErr != nil {
		return f.syncErr
	}
	q.DurableNext, q.UnsyncedRecords, q.UnsyncedBytes = q.WrittenNext, 0, 0
	f.queues[name] = q
	return nil
}

func (f *fakeNode) WritePrometheus(w io.Writer) { _ = writeGathered(w, f.metrics) }

func (f *fakeNode) setQueue(q QueueStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queues[q.Name] = q
}

func (f *fakeNode) startActor(path, kind, summary string, depth int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actors[path] = ActorInfo{Path: path, Kind: kind, Summary: summary, MailboxDepth: depth,
		StartedAt: time.UnixMilli(1_700_000_000_000)}
}

func (f *fakeNode) stopActor(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.actors, path)
}

func (f *fakeNode) setHealth(health Health) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.health = health
}

// plainNode hides fakeNode's optional capabilities.
type plainNode struct{ Node }

// clusterNode adds ClusterStatus to a fake.
type clusterNode struct{ *fakeNode }

func (clusterNode) ClusterStatus() any {
	return map[string]any{"members": []string{"node-a", "node-b"}, "leader": "node-b"}
}

// testServer starts an endpoint for node on a free loopback port.
func testServer(t *testing.T, node Node, options Options) *Server {
	t.Helper()
	server, err := Start("127.0.0.1:0", node, options)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		if err := server.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return server
}

// response is one answer as the tests read it.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request; headers are name, value pairs.
func do(t *testing.T, server *Server, method, path, body string, headers ...string) response {
	t.Helper()
	request, err := http.NewRequest(method, "http://"+server.Addr().String()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if strings.EqualFold(headers[i], "Host") {
			request.Host = headers[i+1]
			continue
		}
		request.Header.Set(headers[i], headers[i+1])
	}
	answer, err := http.DefaultClient.Do(request)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer answer.Body.Close()
	data, err := io.ReadAll(answer.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: answer.StatusCode, header: answer.Header, body: data}
}

// decode unmarshals a JSON body, failing the test on bad JSON.
func (r response) decode(t *testing.T, into any) {
	t.Helper()
	if err := json.Unmarshal(r.body, into); err != nil {
		t.Fatalf("body is not JSON (%v): %s", err, r.body)
	}
}

// object decodes a JSON object body.
func (r response) object(t *testing.T) map[string]any {
	t.Helper()
	var object map[string]any
	r.decode(t, &object)
	return object
}

// expectStatus fails the test unless the answer has the status.
func (r response) expectStatus(t *testing.T, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("status %d, want %d; body: %s", r.status, want, r.body)
	}
}

// expectError checks a JSON error answer and that its message contains
// every fragment.
func (r response) expectError(t *testing.T, status int, fragments ...string) {
	t.Helper()
	r.expectStatus(t, status)
	if got := r.header.Get("Content-Type"); !strings.HasPrefix(got, "application/json") {
		t.Fatalf("error content type %q", got)
	}
	var body errorBody
	r.decode(t, &body)
	if body.Status != status {
		t.Fatalf("error body status %d, want %d", body.Status, status)
	}
	for _, fragment := range fragments {
		if !strings.Contains(body.Error, fragment) {
			t.Fatalf("error %q does not mention %q", body.Error, fragment)
		}
	}
}

// keys returns an object's keys, sorted.
func keys(object map[string]any) []string {
	var names []string
	for name := range object {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
