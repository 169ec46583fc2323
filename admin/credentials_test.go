package admin

// The endpoint of a node with a users file: every write and every read
// that shows queue names, rates or payloads is refused without a
// credential (401), with one that does not verify (401) and with a
// user's that lacks the permission (403), and served with the right one
// (the HTTP token, or a user's token). The node is a real broker, so
// every action reaches it.

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fibrilmq/fibril/access"
	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/client"
)

// credentialUser is one user of the test's users file.
type credentialUser struct {
	name, token, permissions string
}

func (u credentialUser) bearer() string { return "Bearer " + u.name + ":" + u.token }

var (
	// root may do everything, node-wide reads included.
	rootUser = credentialUser{"root", "root-token-0000000001",
		`[{"queues": "*", "allow": ["declare", "publish", "consume", "admin"]}]`}
	// ordersAdmin may administer orders only.
	ordersAdmin = credentialUser{"alice", "alice-token-000000001", `[{"queues": "orders", "allow": ["admin"]}]`}
	// ordersConsumer may consume orders only.
	ordersConsumer = credentialUser{"carol", "carol-token-000000001", `[{"queues": "orders", "allow": ["consume"]}]`}
	// stranger holds every operation, on another queue.
	stranger = credentialUser{"dave", "dave-token-0000000001",
		`[{"queues": "billing", "allow": ["declare", "publish", "consume", "admin"]}]`}
)

// httpToken is the endpoint's own token in the cases that set one.
const httpToken = "http-token-00000000001"

// startUsersNode starts a broker with the users above, the queue orders
// holding one message, and the endpoint with options.
func startUsersNode(t *testing.T, options Options) *Server {
	t.Helper()
	fast := access.Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}
	var entries []string
	for _, user := range []credentialUser{rootUser, ordersAdmin, ordersConsumer, stranger} {
		hash, err := access.HashTokenWithParams(user.token, fast)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, fmt.Sprintf(`{"name": %q, "token_hash": %q, "permissions": %s}`,
			user.name, hash, user.permissions))
	}
	path := filepath.Join(t.TempDir(), "users.json")
	if err := os.WriteFile(path, []byte(`{"version": 1, "users": [`+strings.Join(entries, ",")+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	users, err := access.LoadStore(path, access.Options{})
	if err != nil {
		t.Fatal(err)
	}
	live := startLiveNode(t, func(config *actors.Config) { config.Users = users })
	ctx, cancel := context.WithTimeout(context.Background(), liveWait)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Addresses: []string{live.broker.Addr().String()},
		AuthToken: []byte(rootUser.name + ":" + rootUser.token)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Declare(ctx, "orders", client.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "orders", client.Message{Payload: []byte("secret payload")}); err != nil {
		t.Fatal(err)
	}
	return testServer(t, NewBrokerNode(live.broker), options)
}

// protectedRequest is one request the users file protects, the user who
// may make it and one who may not.
type protectedRequest struct {
	method, path, body string
	allowed, refused   credentialUser
	served             int // the status once admitted
}

// protectedRequests lists every write and every read that shows queue
// names, rates or payloads. Delete comes last: it removes the queue.
var protectedRequests = []protectedRequest{
	{"GET", "/metrics", "", rootUser, ordersAdmin, 200},
	{"GET", "/debug/actors", "", rootUser, ordersAdmin, 200},
	{"GET", "/api/queues", "", rootUser, ordersAdmin, 200},
	{"GET", "/api/connections", "", rootUser, ordersAdmin, 200},
	{"GET", "/api/stats", "", rootUser, ordersAdmin, 200},
	{"GET", "/api/node", "", rootUser, ordersAdmin, 200},
	{"GET", "/", "", rootUser, ordersAdmin, 200},
	{"GET", "/api/settings/sync-interval", "", rootUser, ordersAdmin, 200},
	{"PUT", "/api/settings/sync-interval", "20ms", rootUser, ordersAdmin, 200},
	{"GET", "/api/queues/orders", "", ordersConsumer, stranger, 200},
	{"GET", "/queues/orders", "", ordersConsumer, stranger, 200},
	{"POST", "/api/queues/orders/peek", "", ordersConsumer, ordersAdmin, 200},
	{"POST", "/api/queues/orders/sync", "", ordersAdmin, ordersConsumer, 200},
	{"POST", "/api/queues/orders/mode?mode=durable", "", ordersAdmin, ordersConsumer, 200},
	{"POST", "/api/queues/orders/reopen", "", ordersAdmin, ordersConsumer, 409}, // it serves: nothing to reopen
	{"POST", "/api/queues/orders/purge", "", ordersAdmin, stranger, 200},
	{"POST", "/api/queues/orders/delete", "", ordersAdmin, ordersConsumer, 200},
}

func basicAuth(name, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(name+":"+password))
}

func TestUsersFileProtectsEveryWriteAndRevealingRead(t *testing.T) {
	for _, withToken := range []bool{false, true} {
		t.Run(fmt.Sprintf("http_token=%v", withToken), func(t *testing.T) {
			options := Options{}
			if withToken {
				options.Token = httpToken
			}
			server := startUsersNode(t, options)
			for _, request := range protectedRequests {
				name := request.method + " " + request.path
				do(t, server, request.method, request.path, request.body).expectError(t, 401, "needs a credential")
				do(t, server, request.method, request.path, request.body, "Authorization",
					"Bearer "+request.allowed.name+":wrong-token-0000001").expectError(t, 401, "does not verify")
				do(t, server, request.method, request.path, request.body, "Authorization",
					"Bearer not-a-credential").expectStatus(t, 401)
				refused := do(t, server, request.method, request.path, request.body, "Authorization", request.refused.bearer())
				refused.expectError(t, 403, request.refused.name)
				admitted := []string{request.allowed.bearer(), basicAuth(request.allowed.name, request.allowed.token)}
				if withToken { // the HTTP token may do everything too
					admitted = append(admitted, "Bearer "+httpToken, basicAuth("any-name", httpToken))
				}
				for i, credential := range admitted {
					got := do(t, server, request.method, request.path, request.body, "Authorization", credential)
					switch {
					case i == 0 && got.status != request.served:
						t.Errorf("%s as %s: %d %s, want %d", name, request.allowed.name, got.status, got.body, request.served)
					case got.status == 401 || got.status == 403: // later tries may find the queue gone (delete)
						t.Errorf("%s with credential %d of %q: refused %d %s", name, i, admitted, got.status, got.body)
					}
				}
			}
		})
	}
}

// The static assets stay public, and /healthz answers its status to
// anyone but names queues only to a credential that may read the node.
func TestUsersFileLeavesHealthAndAssetsPublic(t *testing.T) {
	server := startUsersNode(t, Options{})
	do(t, server, "GET", "/assets/dashboard.js", "").expectStatus(t, 200)
	anonymous := do(t, server, "GET", "/healthz", "")
	anonymous.expectStatus(t, 200)
	if body := anonymous.object(t); body["status"] != "serving" || body["hidden"] == nil {
		t.Fatalf("/healthz without a credential: %s", anonymous.body)
	}
	for _, user := range []credentialUser{ordersAdmin, {"root", "wrong-token-00000001", ""}} {
		if body := do(t, server, "GET", "/healthz", "", "Authorization", user.bearer()).object(t); body["hidden"] == nil {
			t.Fatalf("/healthz for %s names queues: %v", user.name, body)
		}
	}
	if body := do(t, server, "GET", "/healthz", "", "Authorization", rootUser.bearer()).object(t); body["hidden"] != nil {
		t.Fatalf("/healthz for root hides: %v", body)
	}
}

// A peek's answer carries payloads: the consumer sees them, nobody else.
func TestUsersFilePeekShowsPayloadsOnlyToAConsumer(t *testing.T) {
	server := startUsersNode(t, Options{})
	for _, user := range []credentialUser{ordersAdmin, stranger} {
		if got := do(t, server, "POST", "/api/queues/orders/peek", "", "Authorization", user.bearer()); strings.Contains(string(got.body), "secret payload") {
			t.Fatalf("%s peeked the payload: %d %s", user.name, got.status, got.body)
		}
	}
	got := do(t, server, "POST", "/api/queues/orders/peek", "", "Authorization", ordersConsumer.bearer())
	if got.status != 200 || !strings.Contains(string(got.body), "secret payload") {
		t.Fatalf("the consumer's peek: %d %s", got.status, got.body)
	}
}
