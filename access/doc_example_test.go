package access

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestTheDocumentedUsersFileLoads keeps the example in docs/security.md
// true: it parses, its tokens verify, and its permissions say what the
// page says.
func TestTheDocumentedUsersFileLoads(t *testing.T) {
	page, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, found := strings.Cut(string(page), "```json\n")
	example, _, closed := strings.Cut(rest, "```")
	if !found || !closed {
		t.Fatal("docs/security.md has no json block")
	}
	users, err := ParseUsers([]byte(example))
	if err != nil {
		t.Fatalf("the documented users file: %v", err)
	}
	if len(users.Warnings()) != 0 {
		t.Fatalf("the documented users file warns: %v", users.Warnings())
	}
	store := NewStore(users, Options{})
	ctx := context.Background()
	billing, err := store.AuthenticateCredential(ctx, []byte("billing:billing-example-token-0001"))
	if err != nil {
		t.Fatal(err)
	}
	ops, err := store.AuthenticateCredential(ctx, []byte("ops:ops-example-token-00000001"))
	if err != nil {
		t.Fatal(err)
	}
	if store.Check(billing, Publish, "orders.eu") != nil || store.Check(billing, Admin, "billing") != nil ||
		store.Check(billing, Admin, "orders.eu") == nil || store.Check(ops, Admin, "") != nil || store.Check(ops, Publish, "orders.eu") == nil {
		t.Fatal("the documented permissions do not do what the page says")
	}
}
