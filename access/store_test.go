package access

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// derivation is one recorded argon2id call.
type derivation struct {
	params      Params
	tokenBytes  int
	saltBytes   int
	keyLenBytes uint32
}

// recordDerivations makes the store record every derivation it runs.
func recordDerivations(store *Store) *[]derivation {
	var lock sync.Mutex
	calls := &[]derivation{}
	store.derive = func(token, salt []byte, params Params, keyLen uint32) []byte {
		lock.Lock()
		*calls = append(*calls, derivation{params, len(token), len(salt), keyLen})
		lock.Unlock()
		return argon2idDerive(token, salt, params, keyLen)
	}
	return calls
}

func TestAuthenticate(t *testing.T) {
	store := tableStore(t)
	ctx := context.Background()
	identity, err := store.Authenticate(ctx, "producer", "producer-token-0001")
	if err != nil || identity.User != "producer" {
		t.Fatalf("right token: %+v %v", identity, err)
	}
	if viaCredential, err := store.AuthenticateCredential(ctx, []byte("producer:producer-token-0001")); err != nil || viaCredential != identity {
		t.Fatalf("credential: %+v %v", viaCredential, err)
	}
	refusals := map[string][2]string{
		"wrong token":      {"producer", "producer-token-0002"},
		"another's token":  {"producer", "consumer-token-0001"},
		"unknown user":     {"ghost", "producer-token-0001"},
		"empty token":      {"producer", ""},
		"long user":        {strings.Repeat("p", 65), "producer-token-0001"},
		"long token":       {"producer", strings.Repeat("t", MaxTokenBytes+1)},
		"case of the user": {"Producer", "producer-token-0001"},
	}
	for name, credential := range refusals {
		identity, err := store.Authenticate(ctx, credential[0], credential[1])
		if err != ErrUnauthorized || identity != (Identity{}) {
			t.Errorf("%s: %+v, %v; want exactly ErrUnauthorized", name, identity, err)
		}
	}
	for _, credential := range []string{"", "producer", ":producer-token-0001", "producer:"} {
		if _, err := store.AuthenticateCredential(ctx, []byte(credential)); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("credential %q: %v", credential, err)
		}
	}
}

// TestUnknownUserCostsWhatAWrongTokenCosts checks the timing defence by
// what is done, not by the clock: an unknown user and a wrong token each
// run exactly one derivation, with the same parameters and input sizes,
// and get the same error.
func TestUnknownUserCostsWhatAWrongTokenCosts(t *testing.T) {
	store := tableStore(t)
	calls := recordDerivations(store)
	ctx := context.Background()
	_, wrongToken := store.Authenticate(ctx, "producer", "producer-token-XXXX")
	_, unknownUser := store.Authenticate(ctx, "producerx", "producer-token-XXXX")
	if len(*calls) != 2 {
		t.Fatalf("%d derivations for an unknown user and a wrong token, want 1 each", len(*calls))
	}
	if (*calls)[0] != (*calls)[1] {
		t.Fatalf("the work differs: wrong token %+v, unknown user %+v", (*calls)[0], (*calls)[1])
	}
	if wrongToken != unknownUser || wrongToken.Error() != unknownUser.Error() {
		t.Fatalf("the errors differ: %v / %v", wrongToken, unknownUser)
	}
}

func TestVerifiedTokensAreCachedAndWrongOnesNever(t *testing.T) {
	store := tableStore(t)
	calls := recordDerivations(store)
	ctx := context.Background()
	for range 3 {
		if _, err := store.Authenticate(ctx, "ops", "ops-token-000000001"); err != nil {
			t.Fatal(err)
		}
	}
	if len(*calls) != 1 {
		t.Fatalf("%d derivations for three right logins, want 1 (then the cache)", len(*calls))
	}
	for range 3 {
		if _, err := store.Authenticate(ctx, "ops", "ops-token-000000002"); err != ErrUnauthorized {
			t.Fatal(err)
		}
	}
	if len(*calls) != 4 {
		t.Fatalf("%d derivations after three wrong tokens, want one each", len(*calls))
	}
}

func TestHashingIsBoundedAndGivesUpWithTheContext(t *testing.T) {
	store := tableStore(t)
	store.hashSlots = make(chan struct{}, 1)
	var inside, most atomic.Int32
	release := make(chan struct{})
	store.derive = func(token, salt []byte, params Params, keyLen uint32) []byte {
		now := inside.Add(1)
		for seen := most.Load(); now > seen && !most.CompareAndSwap(seen, now); seen = most.Load() {
		}
		<-release
		inside.Add(-1)
		return argon2idDerive(token, salt, params, keyLen)
	}
	var done sync.WaitGroup
	for range 3 {
		done.Add(1)
		go func() {
			defer done.Done()
			_, _ = store.Authenticate(context.Background(), "reader", "reader-token-000001")
		}()
	}
	// A fourth caller whose context has ended waits for no slot.
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for inside.Load() == 0 {
		time.Sleep(time.Millisecond) // wait until one derivation holds the slot
	}
	if _, err := store.Authenticate(ended, "reader", "reader-token-000002"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a caller with an ended context: %v", err)
	}
	close(release)
	done.Wait()
	if most.Load() != 1 {
		t.Fatalf("%d derivations ran at once with one slot", most.Load())
	}
}

func writeUsersFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path+".tmp", mode); err != nil { // past the umask
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func TestReloadAppliesAGoodFileAndKeepsTheOldUsersOnABrokenOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.json")
	writeUsersFile(t, path, usersJSON(t,
		[3]string{"alice", "alice-token-000001", `{"queues": "orders", "allow": ["publish"]}`},
		[3]string{"bob", "bob-token-00000001", `{"queues": "orders", "allow": ["consume"]}`},
	), 0o600)
	store, err := LoadStore(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	alice, _ := store.Authenticate(ctx, "alice", "alice-token-000001")
	bob, _ := store.Authenticate(ctx, "bob", "bob-token-00000001")
	if store.Check(alice, Publish, "orders") != nil || store.Check(bob, Consume, "orders") != nil {
		t.Fatal("first file not in force")
	}

	// Broken files: each refused, the first users stay in force.
	for name, data := range map[string][]byte{
		"syntax error": []byte(`{"version": 1, "users": [`),
		"bad hash":     []byte(`{"version": 1, "users": [{"name": "alice", "token_hash": "alice-token-000001"}]}`),
		"empty":        nil,
	} {
		writeUsersFile(t, path, data, 0o600)
		if users, err := store.Reload(); users != nil || !errors.Is(err, ErrInvalidUsersFile) || !strings.Contains(err.Error(), "stay in force") {
			t.Errorf("%s: reload gave %v, %v", name, users, err)
		}
		if store.Check(alice, Publish, "orders") != nil || store.Users().Len() != 2 {
			t.Errorf("%s: the old users are no longer in force", name)
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Reload(); !errors.Is(err, os.ErrNotExist) || !errors.Is(err, ErrInvalidUsersFile) {
		t.Errorf("missing file: %v", err)
	}

	// A good file: alice loses publish and gains consume, bob is gone,
	// carol arrives.
	writeUsersFile(t, path, usersJSON(t,
		[3]string{"alice", "alice-token-000001", `{"queues": "orders", "allow": ["consume"]}`},
		[3]string{"carol", "carol-token-000001", `{"queues": "*", "allow": ["admin"]}`},
	), 0o600)
	// The hash of alice's unchanged token is new (fresh salt), so her
	// identity is revoked: a rewritten token_hash always is.
	users, err := store.Reload()
	if err != nil || users.Len() != 2 {
		t.Fatalf("good reload: %v", err)
	}
	if err := store.Check(bob, Consume, "orders"); !errors.Is(err, ErrRevoked) {
		t.Errorf("a removed user: %v", err)
	}
	if err := store.Check(alice, Consume, "orders"); !errors.Is(err, ErrRevoked) {
		t.Errorf("a user with a new token_hash: %v", err)
	}
	alice, err = store.Authenticate(ctx, "alice", "alice-token-000001")
	if err != nil || store.Check(alice, Consume, "orders") != nil || !errors.Is(store.Check(alice, Publish, "orders"), ErrForbidden) {
		t.Errorf("alice after the reload: %v", err)
	}
	if _, err := store.Authenticate(ctx, "bob", "bob-token-00000001"); err != ErrUnauthorized {
		t.Errorf("bob after the reload: %v", err)
	}
}

func TestReloadWithUnchangedHashKeepsIdentitiesAndAppliesNewPermissions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.json")
	hash := mustHash(t, "alice-token-000001")
	file := func(allow string) []byte {
		return []byte(`{"version": 1, "users": [{"name": "alice", "token_hash": "` + hash + `", "permissions": [{"queues": "orders", "allow": ["` + allow + `"]}]}]}`)
	}
	writeUsersFile(t, path, file("publish"), 0o600)
	store, err := LoadStore(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	calls := recordDerivations(store)
	alice, _ := store.Authenticate(context.Background(), "alice", "alice-token-000001")
	writeUsersFile(t, path, file("consume"), 0o600)
	if _, err := store.Reload(); err != nil {
		t.Fatal(err)
	}
	if store.Check(alice, Consume, "orders") != nil || !errors.Is(store.Check(alice, Publish, "orders"), ErrForbidden) {
		t.Fatal("the live identity does not see the new permissions")
	}
	if _, err := store.Authenticate(context.Background(), "alice", "alice-token-000001"); err != nil || len(*calls) != 1 {
		t.Fatalf("after a reload that kept the hash: %v, %d derivations (the cache entry should stay)", err, len(*calls))
	}
}

func TestUsersFileModes(t *testing.T) {
	dir := t.TempDir()
	data := usersJSON(t, [3]string{"alice", "alice-token-000001", `{"queues": "*", "allow": ["consume"]}`})
	for _, mode := range []os.FileMode{0o666, 0o620, 0o602} {
		path := filepath.Join(dir, "loose.json")
		writeUsersFile(t, path, data, mode)
		if _, err := LoadStore(path, Options{}); !errors.Is(err, ErrInvalidUsersFile) || !strings.Contains(err.Error(), "chmod go-w") {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
	readable := filepath.Join(dir, "readable.json")
	writeUsersFile(t, readable, data, 0o644)
	store, err := LoadStore(readable, Options{})
	if err != nil || !strings.Contains(strings.Join(store.Users().Warnings(), ""), "readable by every local user") {
		t.Fatalf("mode 0644: %v, %v", err, store)
	}
	private := filepath.Join(dir, "private.json")
	writeUsersFile(t, private, data, 0o600)
	if store, err := LoadStore(private, Options{}); err != nil || strings.Contains(strings.Join(store.Users().Warnings(), ""), "readable") {
		t.Fatalf("mode 0600: %v", err)
	}
	if _, err := LoadStore(dir, Options{}); !errors.Is(err, ErrInvalidUsersFile) {
		t.Errorf("a directory: %v", err)
	}
	if _, err := NewStore(store.Users(), Options{}).Reload(); !errors.Is(err, ErrInvalidUsersFile) {
		t.Errorf("reload without a file: %v", err)
	}
}

// BenchmarkAuthenticate reports what one hello's authentication costs with
// the default parameters: a cache miss (unknown user, wrong token) and a
// cache hit.
func BenchmarkAuthenticate(b *testing.B) {
	hash, err := HashToken("bench-token-000000001")
	if err != nil {
		b.Fatal(err)
	}
	users, err := ParseUsers([]byte(`{"version": 1, "users": [{"name": "bench", "token_hash": "` + hash + `", "permissions": []}]}`))
	if err != nil {
		b.Fatal(err)
	}
	store := NewStore(users, Options{MaxConcurrentHashes: 1})
	ctx := context.Background()
	for _, tc := range []struct{ name, user, token string }{
		{"unknown-user", "nobody", "bench-token-000000001"},
		{"wrong-token", "bench", "bench-token-000000002"},
		{"cached", "bench", "bench-token-000000001"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				_, _ = store.Authenticate(ctx, tc.user, tc.token)
			}
		})
	}
}
