package main

// publish --retry as an operator runs it: the built binaries, a live node,
// and between fibrilctl and the node a proxy that lets the first publish
// frames through but swallows every reply from then on, then cuts the
// connection once the node has stored some of them. Those messages are
// stored and their outcome is unknown to fibrilctl. With --retry it sends
// them again after the reconnect, and the deduplicating queue confirms
// them as duplicates; without it they are reported unknown.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// replyLosingProxy forwards connections to target. On the first one it
// stops forwarding the node's bytes from the moment the client sends a
// publish frame; cut ends that connection. Later connections pass
// everything.
type replyLosingProxy struct {
	listener net.Listener
	target   string
	dropping atomic.Bool
	mu       sync.Mutex
	first    []net.Conn // the first connection's two sides; nil before it
}

func startReplyLosingProxy(t *testing.T, target string) *replyLosingProxy {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyLosingProxy{listener: listener, target: target}
	t.Cleanup(func() { listener.Close(); p.cut() })
	go p.accept()
	return p
}

func (p *replyLosingProxy) addr() string { return p.listener.Addr().String() }

func (p *replyLosingProxy) accept() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		node, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		first := p.first == nil
		if first {
			p.first = []net.Conn{client, node}
		}
		p.mu.Unlock()
		if !first {
			go func() { io.Copy(node, client); node.Close() }()
			go func() { io.Copy(client, node); client.Close() }()
			continue
		}
		go p.forwardRequests(client, node)
		go p.forwardRepliesUntilAPublish(node, client)
	}
}

// forwardRequests copies frames from client to node, and starts the
// dropping of replies before it forwards the first publish frame.
func (p *replyLosingProxy) forwardRequests(client, node net.Conn) {
	defer node.Close()
	header := make([]byte, 8)
	for {
		if _, err := io.ReadFull(client, header); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(header[4:]))
		if _, err := io.ReadFull(client, body); err != nil {
			return
		}
		if bytes.HasPrefix(header, []byte("FPB")) {
			p.dropping.Store(true)
		}
		if _, err := node.Write(append(header, body...)); err != nil {
			return
		}
		header = make([]byte, 8)
	}
}

func (p *replyLosingProxy) forwardRepliesUntilAPublish(node, client net.Conn) {
	defer client.Close()
	buffer := make([]byte, 32<<10)
	for {
		n, err := node.Read(buffer)
		if n > 0 && !p.dropping.Load() {
			if _, err := client.Write(buffer[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cut ends the first connection.
func (p *replyLosingProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, conn := range p.first {
		conn.Close()
	}
}

// publishThroughALostConnection declares a deduplicating queue, runs
// `fibrilctl publish` with extra flags through a proxy that loses the
// replies to stored publishes, and returns the run and the queue's state.
func publishThroughALostConnection(t *testing.T, node *liveNode, queue string, count int, extra ...string) (ctlRun, queueJSON) {
	t.Helper()
	_, ctl := binaries(t)
	mustSucceed(t, ctlAt(t, node, "declare", queue, "--dedup"), "declare --dedup")
	proxy := startReplyLosingProxy(t, node.client)
	cmd := exec.Command(ctl, append([]string{"publish", queue, "--count", fmt.Sprint(count), "--server", proxy.addr()}, extra...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// The node stores what the proxy let through; fibrilctl hears nothing
	// of it, and its window fills. Then the connection ends.
	waitForQueue(t, node, queue, func(info queueJSON) bool { return info.Ready > 0 })
	if !proxy.dropping.Load() {
		t.Fatal("the node stored publishes the proxy did not see")
	}
	proxy.cut()
	var err error
	select {
	case err = <-exited:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("fibrilctl publish did not finish after the connection was cut\nstdout: %s\nstderr: %s", stdout.String(), stderr.String())
	}
	run := ctlRun{stdout: stdout.String(), stderr: stderr.String()}
	if exit, ok := err.(*exec.ExitError); ok {
		run.code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var info queueJSON
	waitForQueue(t, node, queue, func(got queueJSON) bool { info = got; return true })
	return run, info
}

// With --retry every message is confirmed and stored once: those whose
// confirm the lost connection took are sent again and confirmed as
// duplicates. Without it (the same disruption) they are reported unknown.
func TestBinaryPublishRetrySendsUnknownOutcomesAgainToADeduplicatingQueue(t *testing.T) {
	node := startLiveNode(t)
	const count = 500
	t.Run("retry", func(t *testing.T) {
		r, info := publishThroughALostConnection(t, node, "retried", count, "--retry")
		var confirmed, duplicates int
		if _, err := fmt.Sscanf(r.stdout, "confirmed %d (%d of them duplicates", &confirmed, &duplicates); err != nil ||
			r.code != exitOK || confirmed != count || duplicates == 0 {
			t.Fatalf("exit %d, stdout %q, stderr %q: want every message confirmed, some as duplicates", r.code, r.stdout, r.stderr)
		}
		if info.Ready != count || info.Dedup == nil || info.Dedup.DuplicatesRefused < uint64(duplicates) {
			t.Fatalf("queue %+v (dedup %+v): want %d messages stored once and %d duplicates refused", info, info.Dedup, count, duplicates)
		}
	})
	t.Run("without retry", func(t *testing.T) {
		r, info := publishThroughALostConnection(t, node, "unretried", count)
		var confirmed, total, unknown int
		if _, err := fmt.Sscanf(r.stdout, "confirmed %d of %d\nunknown %d:", &confirmed, &total, &unknown); err != nil ||
			r.code != exitFailure || unknown == 0 || confirmed+unknown != count || !strings.Contains(r.stderr, "unknown outcome") {
			t.Fatalf("exit %d, stdout %q, stderr %q: want the lost confirms reported as unknown outcomes", r.code, r.stdout, r.stderr)
		}
		if info.Ready <= uint64(confirmed) || info.Ready > count {
			t.Fatalf("queue holds %d: want the %d confirmed and some of the %d unknown, none twice", info.Ready, confirmed, unknown)
		}
	})
}
