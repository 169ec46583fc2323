package access

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// usersJSON builds a users file from (name, token, permissions JSON)
// triples, hashing each token with cheap parameters.
func usersJSON(t testing.TB, entries ...[3]string) []byte {
	t.Helper()
	var users []string
	for _, entry := range entries {
		users = append(users, fmt.Sprintf(`{"name": %q, "token_hash": %q, "permissions": [%s]}`,
			entry[0], mustHash(t, entry[1]), entry[2]))
	}
	return []byte(`{"version": 1, "users": [` + strings.Join(users, ",\n") + `]}`)
}

func TestParseUsersReadsAUsersFile(t *testing.T) {
	data := usersJSON(t,
		[3]string{"billing", "billing-token-0001", `{"queues": "orders.*", "allow": ["declare", "publish", "consume"]}, {"queues": "billing", "allow": ["admin"]}`},
		[3]string{"ops", "ops-token-00000001", `{"queues": "*", "allow": ["admin"]}`},
	)
	users, err := ParseUsers(data)
	if err != nil {
		t.Fatal(err)
	}
	if users.Len() != 2 || strings.Join(users.Names(), ",") != "billing,ops" {
		t.Fatalf("users %v", users.Names())
	}
	billing := users.byName["billing"]
	if len(billing.grants) != 2 || billing.grants[0].operations != Declare|Publish|Consume || billing.grants[1].operations != Admin {
		t.Fatalf("grants %+v", billing.grants)
	}
	if warnings := strings.Join(users.Warnings(), "\n"); !strings.Contains(warnings, "weaker than recommended") {
		t.Fatalf("cheap hashes gave no warning: %q", warnings)
	}
	if users.dummy.params != cheapParams || len(users.dummy.key) != keyBytes {
		t.Fatalf("the dummy hash has %+v, the users %+v", users.dummy.params, cheapParams)
	}
}

func TestParseUsersNamesEveryProblem(t *testing.T) {
	hash := mustHash(t, "a-token-of-16-bytes")
	user := func(name, permissions string) string {
		return fmt.Sprintf(`{"name": %q, "token_hash": %q, "permissions": [%s]}`, name, hash, permissions)
	}
	cases := []struct {
		name, document, field string
	}{
		{"not JSON", `{"version": 1, "users": [`, "(document)"},
		{"trailing data", `{"version": 1, "users": []} {}`, "(document)"},
		{"unknown field", `{"version": 1, "users": [], "admins": []}`, "(document)"},
		{"misspelt permissions", `{"version": 1, "users": [{"name": "a", "token_hash": "` + hash + `", "permisions": []}]}`, "(document)"},
		{"wrong type", `{"version": "1", "users": []}`, "version"},
		{"no version", `{"users": []}`, "version"},
		{"version 2", `{"version": 2, "users": []}`, "version"},
		{"empty name", `{"version": 1, "users": [` + user("", "") + `]}`, "users[0].name"},
		{"name with ':'", `{"version": 1, "users": [` + user("a:b", "") + `]}`, "users[0].name"},
		{"name with a dot first", `{"version": 1, "users": [` + user(".a", "") + `]}`, "users[0].name"},
		{"long name", `{"version": 1, "users": [` + user(strings.Repeat("a", 65), "") + `]}`, "users[0].name"},
		{"duplicate", `{"version": 1, "users": [` + user("a", "") + `,` + user("a", "") + `]}`, "users[1].name"},
		{"plain-text token", `{"version": 1, "users": [{"name": "a", "token_hash": "hunter2hunter2hunter2"}]}`, "users[0].token_hash"},
		{"bad pattern", `{"version": 1, "users": [` + user("a", `{"queues": "a/b", "allow": ["publish"]}`) + `]}`, "users[0].permissions[0].queues"},
		{"empty pattern", `{"version": 1, "users": [` + user("a", `{"allow": ["publish"]}`) + `]}`, "users[0].permissions[0].queues"},
		{"no operations", `{"version": 1, "users": [` + user("a", `{"queues": "q", "allow": []}`) + `]}`, "users[0].permissions[0].allow"},
		{"unknown operation", `{"version": 1, "users": [` + user("a", `{"queues": "q", "allow": ["publish", "write"]}`) + `]}`, "users[0].permissions[0].allow[1]"},
	}
	for _, tc := range cases {
		users, err := ParseUsers([]byte(tc.document))
		var fileErr *UsersFileError
		if users != nil || !errors.Is(err, ErrInvalidUsersFile) || !errors.As(err, &fileErr) {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !strings.Contains(err.Error(), "access: users file: "+tc.field+": ") {
			t.Errorf("%s: the error does not name %s: %v", tc.name, tc.field, err)
		}
	}
	if _, err := ParseUsers(make([]byte, MaxUsersFileBytes+1)); !errors.Is(err, ErrInvalidUsersFile) {
		t.Errorf("an oversized file: %v", err)
	}
}

func TestParseUsersReportsAllProblemsAtOnce(t *testing.T) {
	document := `{"version": 3, "users": [{"name": "", "token_hash": "x", "permissions": [{"queues": ".q", "allow": ["fly"]}]}]}`
	_, err := ParseUsers([]byte(document))
	for _, field := range []string{"version", "users[0].name", "users[0].token_hash", "users[0].permissions[0].queues", "users[0].permissions[0].allow[0]"} {
		if err == nil || !strings.Contains(err.Error(), ": "+field+": ") {
			t.Errorf("problem in %s not reported: %v", field, err)
		}
	}
}

func TestParseUsersWarnsAboutUnwiseFiles(t *testing.T) {
	empty, err := ParseUsers([]byte(`{"version": 1, "users": []}`))
	if err != nil || empty.Len() != 0 || !strings.Contains(strings.Join(empty.Warnings(), ""), "no users") {
		t.Fatalf("empty file: %v %v", err, empty)
	}
	if empty.dummy.params != DefaultParams {
		t.Fatalf("an empty file's dummy hash has %+v", empty.dummy.params)
	}
	idle, err := ParseUsers(usersJSON(t, [3]string{"idle", "idle-token-000001", ""}))
	if err != nil || !strings.Contains(strings.Join(idle.Warnings(), ""), `"idle" has no permissions`) {
		t.Fatalf("user without permissions: %v %v", err, idle.Warnings())
	}
}
