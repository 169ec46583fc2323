package actors

// Users and permissions over the wire: a table of users x operations x
// queues, every cell a real request answered by the node; list-queues
// showing only visible queues; hellos that fail; a reload that changes
// permissions for live sessions and revokes removed users at once.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/fibrilmq/fibril/access"
	"github.com/fibrilmq/fibril/wire"
)

// fastHash keeps the tests' argon2id derivations cheap (the loader warns
// about weak hashes and accepts them).
var fastHash = access.Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}

// testUser is one user of a test users file.
type testUser struct {
	name, token string
	permissions string // the JSON array of permissions
}

func (u testUser) credential() string { return u.name + ":" + u.token }

// writeUsersFile writes a users file (mode 0600) and returns its path.
func writeUsersFile(t *testing.T, path string, users ...testUser) string {
	t.Helper()
	var entries []string
	for _, user := range users {
		hash, err := access.HashTokenWithParams(user.token, fastHash)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, fmt.Sprintf(`{"name": %q, "token_hash": %q, "permissions": %s}`,
			user.name, hash, user.permissions))
	}
	data := `{"version": 1, "users": [` + strings.Join(entries, ",") + `]}`
	if err := os.WriteFile(path+".tmp", []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	return path
}

func startUsersBroker(t *testing.T, users ...testUser) (*Broker, string) {
	t.Helper()
	path := writeUsersFile(t, filepath.Join(t.TempDir(), "users.json"), users...)
	store, err := access.LoadStore(path, access.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return startBroker(t, func(c *Config) { c.Users = store }), path
}

// connectAs dials and completes hello with a credential.
func connectAs(t *testing.T, b *Broker, credential string) *testClient {
	t.Helper()
	c := dialBroker(t, b)
	c.hello(credential, "")
	return c
}

// The users of the table, and what each may do. Patterns: "orders.*"
// matches orders.eu but not orders; "*.dlq" matches billing.dlq; "*"
// everything.
var tableUsers = []testUser{
	{"root", "root-token-0000000001", `[{"queues": "*", "allow": ["declare", "publish", "consume", "admin"]}]`},
	{"alice", "alice-token-000000001", `[{"queues": "orders.*", "allow": ["declare", "publish"]}]`},
	{"bob", "bob-token-00000000001", `[{"queues": "orders.*", "allow": ["consume"]}, {"queues": "*.dlq", "allow": ["publish"]}]`},
	{"carol", "carol-token-000000001", `[{"queues": "*", "allow": ["admin"]}]`},
	{"dave", "dave-token-0000000001", `[]`},
	{"erin", "erin-token-0000000001", `[{"queues": "billing", "allow": ["declare", "publish", "consume", "admin"]}]`},
}

// tableQueues are the queues of the table.
var tableQueues = []string{"orders.eu", "orders", "billing", "billing.dlq"}

// tableAllowed is the expected answer of every cell: for each user and
// operation, the queues it may act on. Written out by hand from the
// permissions above, not computed.
var tableAllowed = map[string]map[string][]string{
	"alice": {"declare": {"orders.eu"}, "publish": {"orders.eu"}, "subscribe": nil, "info": {"orders.eu"}, "purge": nil, "delete": nil},
	"bob": {"declare": nil, "publish": {"billing.dlq"}, "subscribe": {"orders.eu"}, "info": {"orders.eu", "billing.dlq"},
		"purge": nil, "delete": nil},
	"carol": {"declare": nil, "publish": nil, "subscribe": nil, "info": tableQueues, "purge": tableQueues, "delete": tableQueues},
	"dave":  {"declare": nil, "publish": nil, "subscribe": nil, "info": nil, "purge": nil, "delete": nil},
	"erin": {"declare": {"billing"}, "publish": {"billing"}, "subscribe": {"billing"}, "info": {"billing"},
		"purge": {"billing"}, "delete": {"billing"}},
}

// Every cell of users x operations x queues, over the wire: allowed
// requests succeed, the others get forbidden (214) and the connection
// stays; every denial is counted by operation.
func TestPermissionsTableOverTheWire(t *testing.T) {
	b, _ := startUsersBroker(t, tableUsers...)
	root := connectAs(t, b, tableUsers[0].credential())
	for _, name := range tableQueues {
		root.mustDeclare(name, wire.ModeBuffered, wire.QueueOptions{})
	}
	denials := map[string]int{}
	operations := []string{"declare", "publish", "subscribe", "info", "purge", "delete"}
	for _, user := range tableUsers[1:] {
		c := connectAs(t, b, user.credential())
		for _, operation := range operations {
			for _, queue := range tableQueues {
				want := slices.Contains(tableAllowed[user.name][operation], queue)
				got, code := tryOperation(c, operation, queue)
				if got != want || (!got && code != wire.CodeForbidden) {
					t.Errorf("%s %s %s: allowed=%v code=%s, want allowed=%v", user.name, operation, queue, got, code, want)
				}
				if !want {
					denials[accessOperationOf(operation)]++
				}
				if got && operation == "delete" {
					root.mustDeclare(queue, wire.ModeBuffered, wire.QueueOptions{}) // back for the next cells
				}
			}
		}
		c.send(&wire.Ping{RequestID: c.id()}) // the connection stayed open through every denial
		if _, ok := c.waitFor("pong", func(f wire.Frame) bool { _, ok := f.(*wire.Pong); return ok }).(*wire.Pong); !ok {
			t.Fatalf("%s: no pong after the table", user.name)
		}
	}
	for operation, want := range denials {
		if got := b.Metrics().Denials(operation); int(got) != want {
			t.Errorf("fibril_denials_total{operation=%q} = %v, want %d", operation, got, want)
		}
	}
}

// accessOperationOf is the operation label of a table operation.
func accessOperationOf(operation string) string {
	switch operation {
	case "subscribe":
		return "consume"
	case "purge", "delete":
		return "admin"
	}
	return operation
}

// tryOperation makes one request and reports whether it was carried out,
// or the refusal's code.
func tryOperation(c *testClient, operation, queue string) (bool, wire.Code) {
	c.t.Helper()
	id := c.id()
	switch operation {
	case "publish":
		seqs := c.publish(queue, "cell")
		out := c.awaitOutcomes(seqs)[seqs[0]]
		return out.confirmed, out.code
	case "declare":
		c.send(&wire.Declare{RequestID: id, Queue: queue})
	case "subscribe":
		c.send(&wire.Subscribe{RequestID: id, Queue: queue, Prefetch: 1})
	case "info":
		c.send(&wire.GetQueueInfo{RequestID: id, Queue: queue})
	case "purge":
		c.send(&wire.PurgeQueue{RequestID: id, Queue: queue})
	case "delete":
		c.send(&wire.DeleteQueue{RequestID: id, Queue: queue})
	}
	switch reply := c.reply(id).(type) {
	case *wire.ErrorFrame:
		return false, reply.Code
	case *wire.SubscribeOK:
		c.send(&wire.Unsubscribe{RequestID: c.id(), SubscriptionID: reply.SubscriptionID})
	}
	return true, 0
}

// list-queues shows each user the queues it holds a permission on, and
// nothing else, cut and continued with more as usual.
func TestListQueuesShowsOnlyVisibleQueues(t *testing.T) {
	b, _ := startUsersBroker(t, tableUsers...)
	root := connectAs(t, b, tableUsers[0].credential())
	for _, name := range tableQueues {
		root.mustDeclare(name, wire.ModeBuffered, wire.QueueOptions{})
	}
	want := map[string][]string{
		"root": tableQueues, "alice": {"orders.eu"}, "bob": {"orders.eu", "billing.dlq"}, "carol": tableQueues,
		"dave": nil, "erin": {"billing"},
	}
	for _, user := range tableUsers {
		c := connectAs(t, b, user.credential())
		var names []string
		after := ""
		for {
			id := c.id()
			c.send(&wire.ListQueues{RequestID: id, After: after, Limit: 1})
			list, ok := c.reply(id).(*wire.QueueList)
			if !ok {
				t.Fatalf("%s: list answered otherwise", user.name)
			}
			for _, info := range list.Queues {
				names = append(names, info.Name)
				after = info.Name
			}
			if !list.More {
				break
			}
		}
		expected := slices.Clone(want[user.name])
		sort.Strings(expected)
		if !slices.Equal(names, expected) {
			t.Errorf("%s lists %v, want %v", user.name, names, expected)
		}
	}
}

// A hello with an unknown user, a wrong token or no user part is refused
// with unauthorized and the connection closed, the same way for all.
func TestHelloCredentialsAreChecked(t *testing.T) {
	b, _ := startUsersBroker(t, tableUsers...)
	for _, credential := range []string{"mallory:mallory-token-000001", "alice:wrong-token-00000001",
		"alice-token-000000001", "", "alice:"} {
		c := dialBroker(t, b)
		c.send(&wire.Hello{Versions: []uint16{wire.ProtocolVersion}, ClientName: "guess", AuthToken: []byte(credential)})
		errs := c.expectClosed()
		if len(errs) != 1 || errs[0].Code != wire.CodeUnauthorized || errs[0].Message != access.ErrUnauthorized.Error()+" (the hello auth token must be <user>:<token>)" && errs[0].Message != access.ErrUnauthorized.Error() {
			t.Errorf("credential %q: %+v", credential, errs)
		}
	}
	connectAs(t, b, tableUsers[1].credential()) // a right one still works
}

// A reload changes a live session's permissions at its next request, and
// closes at once the sessions of users it removed or gave a new token.
func TestUsersReloadAppliesToLiveSessions(t *testing.T) {
	alice := testUser{"alice", "alice-token-000000001", `[{"queues": "orders", "allow": ["declare", "publish"]}]`}
	bob := testUser{"bob", "bob-token-00000000001", `[{"queues": "orders", "allow": ["consume"]}]`}
	b, path := startUsersBroker(t, alice, bob)
	aliceConn, bobConn := connectAs(t, b, alice.credential()), connectAs(t, b, bob.credential())
	aliceConn.mustDeclare("orders", wire.ModeBuffered, wire.QueueOptions{})
	if ok, _ := tryOperation(aliceConn, "subscribe", "orders"); ok {
		t.Fatal("alice may not consume yet")
	}
	bobConn.subscribe("orders", 1) // bob is consuming when he is removed

	alice.permissions = `[{"queues": "orders", "allow": ["consume"]}]`
	writeUsersFile(t, path, alice) // alice gets a new hash too: her token is the same, her salt new
	if err := b.ReloadUsers(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*testClient{"alice": aliceConn, "bob": bobConn} {
		errs := c.expectClosed()
		if len(errs) == 0 || errs[len(errs)-1].Code != wire.CodeUnauthorized || !strings.Contains(errs[len(errs)-1].Message, "revoked") {
			t.Errorf("%s after the reload: %+v", name, errs)
		}
	}
	c := connectAs(t, b, alice.credential())
	if ok, code := tryOperation(c, "subscribe", "orders"); !ok {
		t.Fatalf("alice's new permission: %v", code)
	}
	if ok, code := tryOperation(c, "publish", "orders"); ok || code != wire.CodeForbidden {
		t.Fatalf("alice's old permission: %v %v", ok, code)
	}
	refused := dialBroker(t, b)
	refused.send(&wire.Hello{Versions: []uint16{wire.ProtocolVersion}, AuthToken: []byte(bob.credential())})
	if errs := refused.expectClosed(); len(errs) != 1 || errs[0].Code != wire.CodeUnauthorized {
		t.Fatalf("bob after his removal: %+v", errs)
	}

	// A broken file keeps the users in force.
	if err := os.WriteFile(path, []byte(`{"version": 1, "users": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.ReloadUsers(); err == nil {
		t.Fatal("a broken users file reloaded")
	}
	if ok, _ := tryOperation(c, "info", "orders"); !ok {
		t.Fatal("alice lost her session over a broken file")
	}
}

// Declaring a queue with a dead-letter queue publishes to it: it needs
// publish there too.
func TestDeclareWithADeadLetterQueueNeedsPublishThere(t *testing.T) {
	alice := testUser{"alice", "alice-token-000000001", `[{"queues": "orders", "allow": ["declare"]}, {"queues": "*.dlq", "allow": ["declare"]}]`}
	b, _ := startUsersBroker(t, alice)
	c := connectAs(t, b, alice.credential())
	reply := c.declare("orders", wire.ModeBuffered, wire.QueueOptions{DeadLetterQueue: "orders.dlq", MaxDeliveries: 3})
	if refusal, ok := reply.(*wire.ErrorFrame); !ok || refusal.Code != wire.CodeForbidden || !strings.Contains(refusal.Message, "orders.dlq") {
		t.Fatalf("declare naming a dead-letter queue without publish there: %+v", reply)
	}
}

// writeUsersFileKeepingHashes is writeUsersFile with each user's token
// hash given (by name), so a reload changes permissions without revoking.
func writeUsersFileKeepingHashes(t *testing.T, path string, hashes map[string]string, users ...testUser) {
	t.Helper()
	var entries []string
	for _, user := range users {
		entries = append(entries, fmt.Sprintf(`{"name": %q, "token_hash": %q, "permissions": %s}`,
			user.name, hashes[user.name], user.permissions))
	}
	data := `{"version": 1, "users": [` + strings.Join(entries, ",") + `]}`
	if err := os.WriteFile(path+".tmp", []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// A reload that takes consume away ends the live subscriptions it no
// longer allows, with forbidden, and releases what they held; the user's
// other subscriptions and its connection stay.
func TestUsersReloadNarrowingPermissionsEndsSubscriptions(t *testing.T) {
	bob := testUser{"bob", "bob-token-00000000001",
		`[{"queues": "orders", "allow": ["publish", "consume"]}, {"queues": "billing", "allow": ["publish", "consume"]}]`}
	root := tableUsers[0]
	path := filepath.Join(t.TempDir(), "users.json")
	hashes := map[string]string{}
	for _, user := range []testUser{root, bob} {
		hash, err := access.HashTokenWithParams(user.token, fastHash)
		if err != nil {
			t.Fatal(err)
		}
		hashes[user.name] = hash
	}
	writeUsersFileKeepingHashes(t, path, hashes, root, bob)
	store, err := access.LoadStore(path, access.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, func(c *Config) { c.Users = store })
	admin := connectAs(t, b, root.credential())
	admin.mustDeclare("orders", wire.ModeBuffered, wire.QueueOptions{})
	admin.mustDeclare("billing", wire.ModeBuffered, wire.QueueOptions{})
	c := connectAs(t, b, bob.credential())
	orders, billing := c.subscribe("orders", 4), c.subscribe("billing", 4)
	c.mustConfirm("orders", wire.BoundaryWritten, "held")
	held := c.deliveries(orders, 1)[0]

	bob.permissions = `[{"queues": "orders", "allow": ["publish"]}, {"queues": "billing", "allow": ["publish", "consume"]}]`
	writeUsersFileKeepingHashes(t, path, hashes, root, bob)
	if err := b.ReloadUsers(); err != nil {
		t.Fatal(err)
	}
	ended := c.waitFor("the end of the orders subscription", func(frame wire.Frame) bool {
		notice, ok := frame.(*wire.SubscriptionEnded)
		return ok && notice.SubscriptionID == orders
	}).(*wire.SubscriptionEnded)
	if ended.Code != wire.CodeForbidden || !strings.Contains(ended.Message, "orders") {
		t.Fatalf("the orders subscription ended with %s %q, want forbidden naming the queue", ended.Code, ended.Message)
	}
	id := c.id()
	c.send(&wire.AckSync{RequestID: id, Settle: wire.Settle{SubscriptionID: orders, DeliveryTags: []uint64{held.DeliveryTag}}})
	if refusal, ok := c.reply(id).(*wire.ErrorFrame); !ok || refusal.Code != wire.CodeUnknownSubscription {
		t.Fatalf("a settle on the ended subscription: %+v, want unknown_subscription", refusal)
	}
	info := waitForInfo(t, admin, "orders", func(info wire.QueueInfo) bool { return info.Leased == 0 })
	if info.Ready != 1 {
		t.Fatalf("orders after the subscription ended: %+v, want its message ready again", info)
	}
	if ok, code := tryOperation(c, "subscribe", "orders"); ok || code != wire.CodeForbidden {
		t.Fatalf("a new subscribe to orders after the reload: allowed=%v code=%s, want forbidden", ok, code)
	}
	c.mustConfirm("billing", wire.BoundaryWritten, "still consumed")
	if got := c.deliveries(billing, 1)[0]; string(got.Payload) != "still consumed" {
		t.Fatalf("the billing subscription delivered %q", got.Payload)
	}
	if denied := b.Metrics().Denials("consume"); denied < 2 {
		t.Fatalf("fibril_denials_total{operation=\"consume\"} = %v, want the ended subscription and the refused subscribe", denied)
	}
}
