package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fibrilmq/fibril/access"
)

// fibril hash-token prints a token's hash for the users file (reading
// the token from standard input) or a new token and its hash; the hash
// loads in a users file and verifies the token.
func TestHashTokenCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := hashToken([]string{"--generate"}, strings.NewReader(""), &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var token, hash string
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		fields := strings.Fields(line)
		switch fields[0] {
		case "token":
			token = fields[1]
		case "token_hash":
			hash = fields[1]
		}
	}
	users, err := access.ParseUsers([]byte(fmt.Sprintf(`{"version": 1, "users": [{"name": "app", "token_hash": %q, "permissions": []}]}`, hash)))
	if err != nil {
		t.Fatalf("the printed hash does not load: %v", err)
	}
	if _, err := access.NewStore(users, access.Options{}).Authenticate(context.Background(), "app", token); err != nil {
		t.Fatalf("the printed token does not verify: %v", err)
	}
	stdout.Reset()
	if code := hashToken(nil, strings.NewReader(token+"\n"), &stdout, &stderr); code != exitOK ||
		!strings.HasPrefix(stdout.String(), "token_hash  $argon2id$") || strings.Contains(stdout.String(), token) {
		t.Fatalf("hashing a token from stdin: exit %d, %q", code, stdout.String())
	}
	if code := hashToken(nil, strings.NewReader("short\n"), &stdout, &stderr); code != exitError {
		t.Fatalf("a short token: exit %d", code)
	}
}

// Tokens come from their file (first line) or the environment; a token
// file readable by others is a warning.
func TestTokensFromFilesAndTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("file-token-000000001\r\nsecond line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	logger, _ := newLogger(&logs, "info")
	flags := securityFlags{given: map[string]bool{}}
	token, err := flags.token("auth-token", "", file, envAuthToken, logger)
	if err != nil || token != "file-token-000000001" || !strings.Contains(logs.String(), "readable by others") {
		t.Fatalf("from a file: %q, %v; log %q", token, err, logs.String())
	}
	t.Setenv(envAuthToken, "env-token-0000000001")
	if token, _ := flags.token("auth-token", "", "", envAuthToken, logger); token != "env-token-0000000001" {
		t.Fatalf("from the environment: %q", token)
	}
	if err := os.WriteFile(file, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := flags.token("auth-token", "", file, envAuthToken, logger); err == nil {
		t.Fatal("an empty token file was accepted")
	}
}
