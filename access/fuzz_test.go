package access

import (
	"context"
	"errors"
	"testing"

	"github.com/fibrilmq/fibril/wire"
)

// FuzzParseUsers feeds arbitrary bytes to the users file parser: it never
// panics, refuses with an ErrInvalidUsersFile, and whatever it accepts
// keeps its invariants (valid names, compiled grants, a dummy hash with
// parameters within bounds) and answers Check for any queue.
func FuzzParseUsers(f *testing.F) {
	hash := mustHash(f, "a-token-of-16-bytes")
	seeds := []string{
		`{"version": 1, "users": []}`,
		`{"version": 1, "users": [{"name": "a", "token_hash": "` + hash + `", "permissions": [{"queues": "orders.*", "allow": ["publish", "consume"]}, {"queues": "*", "allow": ["admin"]}]}]}`,
		`{"version": 1, "users": [{"name": "a", "token_hash": "` + hash + `"}, {"name": "a", "token_hash": "` + hash + `"}]}`,
		`{"version": 1, "users": [{"name": "a", "token_hash": "$argon2id$v=19$m=262144,t=16,p=16$AAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA"}]}`,
		`{"version": 2}`, `{`, `null`, `[]`, `{"version": 1, "users": null}`, "",
	}
	for _, seed := range seeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		users, err := ParseUsers(data)
		if err != nil {
			if users != nil || !errors.Is(err, ErrInvalidUsersFile) {
				t.Fatalf("refusal %v with users %v", err, users)
			}
			return
		}
		if users.dummy.params.check() != nil || len(users.dummy.key) != keyBytes {
			t.Fatalf("dummy hash %+v", users.dummy.params)
		}
		store := NewStore(users, Options{})
		for name, entry := range users.byName {
			if !validUserName(name) || entry.name != name || entry.hash.params.check() != nil || entry.hash.text == "" {
				t.Fatalf("user %q accepted with %+v", name, entry.hash.params)
			}
			identity := Identity{User: name, hash: entry.hash.text}
			for _, queue := range []string{"orders", "orders.eu", "a", ""} {
				for _, operation := range Operations {
					if err := store.Check(identity, operation, queue); err != nil && !errors.Is(err, ErrForbidden) {
						t.Fatalf("Check: %v", err)
					}
				}
			}
		}
	})
}

// FuzzAuthenticateCredential checks that no hello auth token panics the
// store or gets through without the right token.
func FuzzAuthenticateCredential(f *testing.F) {
	users, err := ParseUsers(usersJSON(f, [3]string{"alice", "alice-token-000001", `{"queues": "*", "allow": ["consume"]}`}))
	if err != nil {
		f.Fatal(err)
	}
	store := NewStore(users, Options{})
	for _, seed := range []string{"alice:alice-token-000001", "alice:", ":x", "alice", "alice:alice-token-000001:x", "\x00:\x00"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, credential []byte) {
		if len(credential) > wire.MaxHelloBodyBytes {
			return
		}
		identity, err := store.AuthenticateCredential(context.Background(), credential)
		if (err == nil) != (string(credential) == "alice:alice-token-000001") {
			t.Fatalf("credential %q: %+v, %v", credential, identity, err)
		}
	})
}
