package access

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// tableUsers are the users of the permission table: each a token and a
// permissions list.
var tableUsers = [][3]string{
	{"producer", "producer-token-0001", `{"queues": "orders.*", "allow": ["publish"]}, {"queues": "orders", "allow": ["declare", "publish"]}`},
	{"consumer", "consumer-token-0001", `{"queues": "orders.*", "allow": ["consume"]}`},
	{"ops", "ops-token-000000001", `{"queues": "*", "allow": ["admin", "declare"]}`},
	{"reader", "reader-token-000001", `{"queues": "*", "allow": ["consume"]}`},
	{"owner", "owner-token-0000001", `{"queues": "billing", "allow": ["declare", "publish", "consume", "admin"]}`},
	{"mixed", "mixed-token-0000001", `{"queues": "a*b", "allow": ["publish"]}, {"queues": "*-dlq", "allow": ["publish", "consume"]}`},
	{"nobody", "nobody-token-000001", ``},
}

// tableQueues are the queues of the table; "" asks about the node.
var tableQueues = []string{"orders", "orders.eu", "orders.eu.2", "ordersx", "billing", "a-b", "ab", "b", "x-dlq", ""}

// tableAllowed is the whole table: user -> queue -> the operations
// allowed, as letters (d declare, p publish, c consume, a admin). A queue
// not listed allows nothing.
var tableAllowed = map[string]map[string]string{
	"producer": {"orders": "dp", "orders.eu": "p", "orders.eu.2": "p"},
	"consumer": {"orders.eu": "c", "orders.eu.2": "c"},
	"ops": {"orders": "da", "orders.eu": "da", "orders.eu.2": "da", "ordersx": "da", "billing": "da",
		"a-b": "da", "ab": "da", "b": "da", "x-dlq": "da", "": "da"},
	"reader": {"orders": "c", "orders.eu": "c", "orders.eu.2": "c", "ordersx": "c", "billing": "c",
		"a-b": "c", "ab": "c", "b": "c", "x-dlq": "c", "": "c"},
	"owner":  {"billing": "dpca"},
	"mixed":  {"a-b": "p", "ab": "p", "x-dlq": "pc"},
	"nobody": {},
}

var operationLetters = map[Operation]string{Declare: "d", Publish: "p", Consume: "c", Admin: "a"}

func tableStore(t testing.TB) *Store {
	t.Helper()
	users, err := ParseUsers(usersJSON(t, tableUsers...))
	if err != nil {
		t.Fatal(err)
	}
	return NewStore(users, Options{})
}

func TestCheckEveryCellOfUsersOperationsAndQueues(t *testing.T) {
	store := tableStore(t)
	cells := 0
	for _, entry := range tableUsers {
		identity, err := store.Authenticate(context.Background(), entry[0], entry[1])
		if err != nil {
			t.Fatalf("%s: %v", entry[0], err)
		}
		for _, queue := range tableQueues {
			for _, operation := range Operations {
				want := strings.Contains(tableAllowed[entry[0]][queue], operationLetters[operation])
				err := store.Check(identity, operation, queue)
				if want && err != nil || !want && !errors.Is(err, ErrForbidden) {
					t.Errorf("%s %s %q: %v, want allowed=%v", entry[0], operation, queue, err, want)
				}
				var denied *DeniedError
				if !want && (!errors.As(err, &denied) || denied.User != entry[0] || denied.Operation != operation || denied.Queue != queue) {
					t.Errorf("%s %s %q: denial %#v", entry[0], operation, queue, err)
				}
				cells++
			}
			visible := tableAllowed[entry[0]][queue] != ""
			if queue != "" && store.Visible(identity, queue) != visible {
				t.Errorf("%s: Visible(%q) = %v, want %v", entry[0], queue, !visible, visible)
			}
		}
	}
	if want := len(tableUsers) * len(tableQueues) * len(Operations); cells != want {
		t.Fatalf("checked %d cells of %d", cells, want)
	}
}

func TestDenialMessages(t *testing.T) {
	store := tableStore(t)
	identity, _ := store.Authenticate(context.Background(), "consumer", "consumer-token-0001")
	if err := store.Check(identity, Publish, "orders.eu"); err.Error() != `access: user "consumer" may not publish queue "orders.eu"` {
		t.Errorf("message %q", err)
	}
	if err := store.Check(identity, Admin, ""); !strings.Contains(err.Error(), `may not admin on this node`) {
		t.Errorf("message %q", err)
	}
}

func TestCheckDoesNotAllocateWhenItAllows(t *testing.T) {
	store := tableStore(t)
	identity, _ := store.Authenticate(context.Background(), "mixed", "mixed-token-0000001")
	allocs := testing.AllocsPerRun(100, func() {
		if store.Check(identity, Consume, "x-dlq") != nil {
			t.Fatal("denied")
		}
	})
	if allocs != 0 {
		t.Fatalf("an allowed Check allocates %.0f times", allocs)
	}
}

func TestCheckRefusesAnIdentityFromNowhere(t *testing.T) {
	store := tableStore(t)
	for _, identity := range []Identity{{}, {User: "ops"}, {User: "ghost"}} {
		if err := store.Check(identity, Admin, "orders"); !errors.Is(err, ErrRevoked) {
			t.Errorf("%+v: %v", identity, err)
		}
		if store.Visible(identity, "orders") {
			t.Errorf("%+v sees a queue", identity)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	store := tableStore(b)
	identity, _ := store.Authenticate(context.Background(), "mixed", "mixed-token-0000001")
	b.ReportAllocs()
	for b.Loop() {
		if store.Check(identity, Consume, "x-dlq") != nil {
			b.Fatal("denied")
		}
	}
}
