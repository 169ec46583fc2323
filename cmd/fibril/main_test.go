package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// testWait bounds every wait; a safety net, never a measurement.
const testWait = 20 * time.Second

func TestUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		code int
		text string
	}{
		{nil, exitUsage, "usage"},
		{[]string{"bogus"}, exitUsage, "unknown command"},
		{[]string{"serve", "--config", "cluster.json"}, exitUsage, "go together"},
		{[]string{"serve", "--node", "n1"}, exitUsage, "go together"},
		{[]string{"serve", "--config", "cluster.json", "--node", "n1", "--data", "d"}, exitUsage, "nodes[i].data_dir"},
		{[]string{"serve", "--config", "cluster.json", "--node", "n1", "--listen", "127.0.0.1:1"}, exitUsage, "cannot be combined"},
		{[]string{"serve", "--sync-interval", "-1s"}, exitUsage, "negative"},
		{[]string{"serve", "--log-level", "loud"}, exitUsage, "log-level"},
		{[]string{"serve", "--keepalive-interval", "0s"}, exitUsage, "above 0"},
		{[]string{"serve", "--keepalive-missed-max", "0"}, exitUsage, "above 0"},
		{[]string{"serve", "--segment-bytes", "100"}, exitUsage, "--segment-bytes must be between"},
		{[]string{"serve", "--checkpoint-records", "0"}, exitUsage, "above 0"},
		{[]string{"serve", "--follower-retention-hold", "0s"}, exitUsage, "above 0"},
		{[]string{"serve", "--tail-cache-bytes", "0"}, exitUsage, "above 0"},
		{[]string{"serve", "--open-segment-files", "-1"}, exitUsage, "above 0"},
		{[]string{"serve", "extra"}, exitUsage, "unexpected arguments"},
		{[]string{"serve", "--tls-cert", "c.pem"}, exitUsage, "go together"},
		{[]string{"serve", "--auth-token", "x", "--auth-token-file", "f"}, exitUsage, "exclude each other"},
		{[]string{"serve", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-require-client-cert"}, exitUsage, "needs --tls-client-ca"},
		{[]string{"serve", "--config", "cluster.json", "--node", "n1", "--users", "u.json"}, exitUsage, "nodes[i].users_file"},
		{[]string{"hash-token", "my-token-on-the-command-line"}, exitUsage, "never from the command line"},
		{[]string{"version"}, exitOK, "fibril"},
	}
	for _, tc := range cases {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, &stdout, &stderr); code != tc.code {
			t.Fatalf("%v: exit %d, want %d (%s)", tc.args, code, tc.code, stderr.String())
		}
		if !strings.Contains(stdout.String()+stderr.String(), tc.text) {
			t.Fatalf("%v: output lacks %q: %s%s", tc.args, tc.text, stdout.String(), stderr.String())
		}
	}
}

// buildBinary builds a command of this module into dir.
func buildBinary(t *testing.T, dir, pkg, name string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(dir, name)
	build := exec.Command(goTool, "build", "-o", out, pkg)
	build.Dir = filepath.Join("..", "..")
	if output, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, output)
	}
	return out
}

// node is a running fibril process.
type node struct {
	cmd    *exec.Cmd
	addr   string
	stdout *bufio.Scanner
	stderr bytes.Buffer
}

func startNode(t *testing.T, binary, dataDir string, extra ...string) *node {
	t.Helper()
	args := append([]string{"serve", "--data", dataDir, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, extra...)
	n := &node{cmd: exec.Command(binary, args...)}
	n.cmd.Stderr = &lockedBuffer{buffer: &n.stderr}
	stdout, err := n.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.cmd.Process.Kill(); _ = n.cmd.Wait() })
	n.stdout = bufio.NewScanner(stdout)
	// The ready line comes last, once every listener is bound.
	const prefix = "fibril: serving clients on "
	for n.stdout.Scan() {
		line := n.stdout.Text()
		if strings.HasPrefix(line, prefix) {
			n.addr = strings.Fields(strings.TrimPrefix(line, prefix))[0]
			return n
		}
		if !strings.HasPrefix(line, "fibril: ") {
			t.Fatalf("unexpected line before the ready line: %q", line)
		}
	}
	t.Fatalf("fibril exited without its ready line; stderr:\n%s", n.stderr.String())
	return nil
}

// lockedBuffer is a process's stderr, read by the test while it runs.
type lockedBuffer struct {
	mu     sync.Mutex
	buffer *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buffer.Write(p)
}

// String is what the process wrote so far.
func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buffer.String()
}

// rawClient speaks just enough of the protocol for these tests.
type rawClient struct {
	t      *testing.T
	conn   net.Conn
	reader *wire.Reader
	writer *wire.Writer
	id     uint64
}

func dial(t *testing.T, addr string) *rawClient {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &rawClient{t: t, conn: conn, reader: wire.NewReader(conn, 0), writer: wire.NewWriter(conn, 0)}
	c.send(&wire.Hello{Versions: []uint16{wire.ProtocolVersion}, ClientName: "binary-test"})
	if _, ok := c.next().(*wire.HelloOK); !ok {
		t.Fatal("no hello-ok")
	}
	return c
}

func (c *rawClient) send(frames ...wire.Frame) {
	c.t.Helper()
	for _, frame := range frames {
		if err := c.writer.WriteFrame(frame); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := c.writer.Flush(); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawClient) next() wire.Frame {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(testWait))
	tag, body, err := c.reader.Next()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	frame, err := wire.DecodeFrame(tag, body)
	if err != nil {
		c.t.Fatalf("decode: %v", err)
	}
	if e, ok := frame.(*wire.ErrorFrame); ok {
		c.t.Fatalf("error frame: %v", e)
	}
	return frame
}

func (c *rawClient) declareDurable(name string) {
	c.id++
	c.send(&wire.Declare{RequestID: c.id, Queue: name, Mode: wire.ModeDurable})
	if _, ok := c.next().(*wire.DeclareOKMode); !ok {
		c.t.Fatal("declare not answered with declare-ok-mode")
	}
}

// publishConfirmed publishes payloads in one frame and waits for the
// durable confirms.
func (c *rawClient) publishConfirmed(name string, first uint64, payloads []string) {
	frame := &wire.Publish{Queue: []byte(name)}
	for i, payload := range payloads {
		frame.Messages = append(frame.Messages, wire.PublishMessage{Seq: first + uint64(i), Payload: []byte(payload)})
	}
	c.send(frame)
	confirmed := 0
	for confirmed < len(payloads) {
		confirm, ok := c.next().(*wire.Confirm)
		if !ok {
			c.t.Fatal("expected a confirm")
		}
		for _, r := range confirm.Ranges {
			if r.Boundary != wire.BoundaryDurable {
				c.t.Fatalf("confirm at %s", r.Boundary)
			}
			confirmed += int(r.Last - r.First + 1)
		}
	}
}

func (c *rawClient) subscribe(name string, prefetch uint32) uint64 {
	c.id++
	c.send(&wire.Subscribe{RequestID: c.id, Queue: name, Prefetch: prefetch})
	ok, isOK := c.next().(*wire.SubscribeOK)
	if !isOK {
		c.t.Fatal("subscribe not answered with subscribe-ok")
	}
	return ok.SubscriptionID
}

func (c *rawClient) deliveries(n int) []wire.Delivery {
	var out []wire.Delivery
	for len(out) < n {
		deliver, ok := c.next().(*wire.Deliver)
		if !ok {
			c.t.Fatal("expected a delivery")
		}
		out = append(out, deliver.Deliveries...)
	}
	return out
}

// A real process killed with SIGKILL while deliveries are unacked and
// publishes are in flight loses no confirmed message; held deliveries come
// back redelivered with the attempt counted; SIGTERM then stops it cleanly.
func TestBinarySurvivesKillAndStopsCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := t.TempDir()
	binary := buildBinary(t, dir, "./cmd/fibril", "fibril")
	data := filepath.Join(dir, "data")

	first := startNode(t, binary, data)
	c := dial(t, first.addr)
	c.declareDurable("orders")
	var payloads []string
	for i := range 50 {
		payloads = append(payloads, fmt.Sprintf("order-%02d", i))
	}
	c.publishConfirmed("orders", 1, payloads)
	c.subscribe("orders", 5)
	held := c.deliveries(5)
	c.send(&wire.Publish{Queue: []byte("orders"), Messages: []wire.PublishMessage{{Seq: 100, Payload: []byte("in-flight")}}})
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()

	second := startNode(t, binary, data)
	c2 := dial(t, second.addr)
	c2.subscribe("orders", 100)
	seen := map[string]wire.Delivery{}
	for len(seen) < len(payloads) {
		for _, d := range c2.deliveries(1) {
			seen[string(d.Payload)] = d
		}
	}
	for _, payload := range payloads {
		if _, ok := seen[payload]; !ok {
			t.Fatalf("confirmed %s lost after SIGKILL", payload)
		}
	}
	for _, d := range held {
		if again := seen[string(d.Payload)]; !again.Redelivered || again.Attempt != 2 {
			t.Fatalf("held %s came back as %+v", d.Payload, again)
		}
	}
	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, second.stderr.String())
	}
}

// The fibrilctl round trip runs once the command-line tool exists.
func TestBinariesRoundTripWithFibrilctl(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	if _, err := os.Stat(filepath.Join("..", "fibrilctl", "main.go")); err != nil {
		t.Skip("cmd/fibrilctl is not written yet")
	}
	dir := t.TempDir()
	server := buildBinary(t, dir, "./cmd/fibril", "fibril")
	ctl := buildBinary(t, dir, "./cmd/fibrilctl", "fibrilctl")
	n := startNode(t, server, filepath.Join(dir, "data"))
	tryCtl := func(args ...string) (string, error) {
		output, err := exec.Command(ctl, append(args, "--server", n.addr)...).CombinedOutput()
		return string(output), err
	}
	runCtl := func(args ...string) string {
		t.Helper()
		output, err := tryCtl(args...)
		if err != nil {
			t.Fatalf("fibrilctl %v: %v\n%s", args, err, output)
		}
		return output
	}
	if out := runCtl("declare", "orders"); !strings.Contains(out, "durable") {
		t.Fatalf("declare printed %q", out)
	}
	if out := runCtl("publish", "orders", "--count", "100"); !strings.Contains(out, "confirmed 100") {
		t.Fatalf("publish printed %q", out)
	}
	if out := runCtl("consume", "orders", "--count", "100", "--ack", "--quiet"); !strings.Contains(out, "received 100") {
		t.Fatalf("consume printed %q", out)
	}
	// The acks sent just before the consumer disconnected are kept: the
	// queue ends empty.
	deadline := time.Now().Add(testWait)
	for {
		var info struct {
			Mode          string `json:"mode"`
			Ready, Leased uint64
			WrittenNext   uint64 `json:"written_next"`
			DurableNext   uint64 `json:"durable_next"`
		}
		out := runCtl("info", "orders", "--json")
		if err := json.Unmarshal([]byte(out), &info); err != nil || info.Mode != "durable" || info.WrittenNext == 0 {
			t.Fatalf("info printed %q (%v)", out, err)
		}
		if info.Ready == 0 && info.Leased == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue not empty after consuming everything with acks:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out, err := tryCtl("declare", "orders", "--buffered"); err == nil || !strings.Contains(out, "mode_conflict") {
		t.Fatalf("buffered re-declare of a durable queue: %v %q", err, out)
	}
}

// With the HTTP port taken, the node never says it serves: it exits 1 with
// one line naming the HTTP endpoint, and the client port is free again.
func TestBinaryWithTheHTTPPortTakenExitsWithoutTheReadyLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := t.TempDir()
	binary := buildBinary(t, dir, "./cmd/fibril", "fibril")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cmd := exec.Command(binary, "serve", "--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0",
		"--http", taken.Addr().String())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	exit, ok := err.(*exec.ExitError)
	if !ok || exit.ExitCode() != exitError {
		t.Fatalf("exit %v, want status %d; stderr:\n%s", err, exitError, stderr.String())
	}
	if strings.Contains(stdout.String(), "serving clients") {
		t.Fatalf("said it serves with its HTTP port taken:\n%s", stdout.String())
	}
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if strings.HasPrefix(line, "fibril serve:") {
			lines = append(lines, line)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "HTTP endpoint on "+taken.Addr().String()) {
		t.Fatalf("want one line naming the HTTP endpoint, got:\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), "level=ERROR") {
		t.Fatalf("the refused start logged errors:\n%s", stderr.String())
	}
}

// SIGTERM with sessions, subscriptions and publishes in flight: exit 0,
// no ERROR line in the node's log, and "fibril: stopped" printed.
func TestBinaryCleanShutdownLogsNoError(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := t.TempDir()
	binary := buildBinary(t, dir, "./cmd/fibril", "fibril")
	n := startNode(t, binary, filepath.Join(dir, "data"))
	c := dial(t, n.addr)
	for i := range 4 {
		name := fmt.Sprintf("q%d", i)
		c.declareDurable(name)
		c.publishConfirmed(name, uint64(10*i+1), []string{"a", "b"})
	}
	c.subscribe("q0", 1)
	c.send(&wire.Publish{Queue: []byte("q1"), Messages: []wire.PublishMessage{{Seq: 100, Payload: []byte("in flight")}}})
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest := ""
	for n.stdout.Scan() {
		rest += n.stdout.Text() + "\n"
	}
	if err := n.cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, n.stderr.String())
	}
	if !strings.Contains(rest, "fibril: stopped") {
		t.Fatalf("no stopped line: %q", rest)
	}
	if strings.Contains(n.stderr.String(), "level=ERROR") {
		t.Fatalf("a clean shutdown logged errors:\n%s", n.stderr.String())
	}
}
