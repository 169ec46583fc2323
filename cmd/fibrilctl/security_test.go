package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/access"
	"github.com/fibrilmq/fibril/tlsconfig/tlstest"
)

// writeUsers writes a users file of name:token:permissions-JSON triples.
func writeUsers(t *testing.T, path string, users ...[3]string) {
	t.Helper()
	var entries []string
	for _, user := range users {
		hash, err := access.HashTokenWithParams(user[1], access.Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1})
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, fmt.Sprintf(`{"name": %q, "token_hash": %q, "permissions": %s}`, user[0], hash, user[2]))
	}
	data := `{"version": 1, "users": [` + strings.Join(entries, ",") + `]}`
	if err := os.WriteFile(path+".tmp", []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// A secured node, end to end through the two binaries: TLS on the client
// listener, a users file, tokens from files; fibrilctl connects with its
// TLS flags and a <user>:<token> from a file; each refusal is one line
// with the flag to change; SIGHUP reloads the users file.
func TestBinarySecuredNodeWithTLSAndUsers(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "node CA")
	cert := ca.Issue(t, "node1")
	usersFile := filepath.Join(dir, "users.json")
	app := [3]string{"app", "app-token-00000000001", `[{"queues": "orders*", "allow": ["declare", "publish", "consume"]}]`}
	writeUsers(t, usersFile, app)
	tokenFile := filepath.Join(dir, "app.token")
	if err := os.WriteFile(tokenFile, []byte("app:app-token-00000000001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	httpTokenFile := filepath.Join(dir, "http.token")
	if err := os.WriteFile(httpTokenFile, []byte("http-token-000000001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(dir, "trace.ftf")
	node := startLiveNode(t, "--users", usersFile, "--tls-cert", cert.CertFile, "--tls-key", cert.KeyFile,
		"--http-token-file", httpTokenFile, "--record-trace", trace)
	secure := []string{"--server", node.client, "--tls-ca", ca.CertFile, "--token-file", tokenFile}

	mustSucceed(t, ctlCommand(t, nil, "", append(secure, "declare", "orders")...), "declare over TLS as a user")
	if r := mustSucceed(t, ctlCommand(t, nil, "", append(secure, "publish", "orders", "--count", "3")...), "publish"); !strings.Contains(r.stdout, "confirmed 3") {
		t.Fatalf("publish printed %q", r.stdout)
	}
	env := []string{"FIBRIL_SERVER=" + node.client, "FIBRIL_TLS_CA=" + ca.CertFile, "FIBRIL_TOKEN_FILE=" + tokenFile}
	mustSucceed(t, ctlCommand(t, env, "", "info", "orders"), "TLS and token from the environment")

	expectOneLineFailure(t, ctlCommand(t, nil, "", "--server", node.client, "--token-file", tokenFile, "queues"),
		exitFailure, "requires TLS", "--tls-ca")
	expectOneLineFailure(t, ctlCommand(t, nil, "", "--server", node.client, "--tls", "--token-file", tokenFile, "queues"),
		exitFailure, "not signed by a CA", "--tls-ca")
	expectOneLineFailure(t, ctlCommand(t, nil, "", append(secure, "declare", "billing")...),
		exitFailure, "forbidden", "users file grants")
	expectOneLineFailure(t, ctlCommand(t, nil, "", "--server", node.client, "--tls-ca", ca.CertFile,
		"--token", "app:wrong-token-000000001", "queues"), exitFailure, "unauthorized")

	// SIGHUP: the user is gone from the file, so its token no longer opens
	// a session.
	writeUsers(t, usersFile, [3]string{"other", "other-token-000000001", `[]`})
	if err := node.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := ctlCommand(t, nil, "", append(secure, "queues")...)
		if r.code != 0 && strings.Contains(r.stderr, "unauthorized") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reloaded users file is not in force: exit %d %q", r.code, r.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}

	if err := node.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = node.cmd.Wait()
	info, err := os.Stat(trace)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the trace file: %v, mode %v; want 0600", err, info.Mode())
	}
	data, err := os.ReadFile(trace)
	if err != nil || strings.Contains(string(data), "app-token-00000000001") {
		t.Fatalf("the trace file holds the token (%v)", err)
	}
	stderr := node.stderr.String()
	for _, want := range []string{"SIGHUP: reloading", "users file reloaded"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the node's log lacks %q:\n%s", want, stderr)
		}
	}
}

// A token on fibril serve's command line works and is warned about.
func TestBinaryTokenOnTheCommandLineIsWarnedAbout(t *testing.T) {
	node := startLiveNode(t, "--auth-token", "s3cret-token-000000001")
	mustSucceed(t, ctlCommand(t, nil, "", "--server", node.client, "--token", "s3cret-token-000000001", "queues"), "queues")
	_ = node.cmd.Process.Signal(syscall.SIGTERM)
	_ = node.cmd.Wait()
	if !strings.Contains(node.stderr.String(), "visible to every local user") {
		t.Fatalf("no warning about --auth-token:\n%s", node.stderr.String())
	}
}
