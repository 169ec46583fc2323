package acceptance

// The real server as a child process: `fibril serve` on a temporary data
// directory and a fixed free loopback port (kept across restarts, so the
// SDK reconnects to the same address), killed with SIGKILL.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serverProcess is one running `fibril serve`.
type serverProcess struct {
	t       *testing.T
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	logPath string
}

// serverSpec is what every start of the same node shares.
type serverSpec struct {
	dataDir    string
	listen     string // 127.0.0.1:port
	http       string
	extraFlags []string
	logDir     string
	starts     int
}

func freeLoopbackAddress(t *testing.T) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	return listener.Addr().String()
}

func newServerSpec(t *testing.T, extraFlags ...string) *serverSpec {
	return &serverSpec{
		dataDir: filepath.Join(t.TempDir(), "data"), listen: freeLoopbackAddress(t),
		http: freeLoopbackAddress(t), extraFlags: extraFlags, logDir: t.TempDir(),
	}
}

// start runs the server and returns once it serves clients, with the time
// that took.
func (spec *serverSpec) start(t *testing.T) (*serverProcess, time.Duration) {
	t.Helper()
	spec.starts++
	args := append([]string{"serve", "--data", spec.dataDir, "--listen", spec.listen, "--http", spec.http,
		"--log-level", "warn"}, spec.extraFlags...)
	cmd := exec.Command(fibrilBinary(t), args...)
	logPath := filepath.Join(spec.logDir, fmt.Sprintf("fibril-%d.log", spec.starts))
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start fibril: %v", err)
	}
	p := &serverProcess{t: t, cmd: cmd, exited: make(chan struct{}), logPath: logPath}
	serving := make(chan struct{})
	var servingOnce sync.Once
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			line := scanner.Text()
			fmt.Fprintln(logFile, line)
			if strings.Contains(line, "serving clients on") {
				servingOnce.Do(func() { close(serving) })
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.exited)
	}()
	t.Cleanup(p.kill)
	select {
	case <-serving:
		return p, time.Since(began)
	case <-p.exited:
		t.Fatalf("fibril exited before serving (%v); log:\n%s", p.waitErr, p.logTail())
	case <-time.After(60 * time.Second):
		p.kill()
		t.Fatalf("fibril did not serve within 60 s; log:\n%s", p.logTail())
	}
	return nil, 0
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *serverProcess) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop asks for a clean shutdown (SIGTERM) and waits.
func (p *serverProcess) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.waitErr
	case <-time.After(30 * time.Second):
		p.kill()
		return fmt.Errorf("fibril did not stop within 30 s")
	}
}

func (p *serverProcess) logTail() string {
	data, _ := os.ReadFile(p.logPath)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

// rssBytes reads the process's resident set size from /proc.
func (p *serverProcess) rssBytes() (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fields := strings.Fields(rest)
			kib, err := strconv.ParseUint(fields[0], 10, 64)
			return kib << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", p.cmd.Process.Pid)
}
