package acceptance

// Test hosts in network namespaces: hosts fib1..fibN, each its own network
// namespace with one address, 10.77.0.I/24, on a veth pair whose other end
// is on the bridge fib0 (10.77.0.254 in the root namespace, where the test
// and its clients run). It is the layout of the netns-cluster tool the
// development machine and CI carry (`netns-cluster down` also removes what
// an interrupted run left), done here with the same ip(8) commands so the
// suite needs nothing but root and iproute2.
//
// Faults:
//
//	isolate I   host I's link goes down: no peer and no client reaches it
//	cut I J     host I drops every packet it sends to host J (a blackhole
//	            route in fibI); cut J I too for both directions. TCP needs
//	            both, so a one-way cut stalls connections either way, but
//	            packets J sends still arrive at I
//	heal I      link up, every blackhole route of host I removed
//
// The subnet exists only inside this machine; nothing outside is ever
// addressed. Only one test at a time may hold the hosts (the bridge is
// shared): the tests that use them never run in parallel, each tears them
// down when it ends, also on failure, and a test holds an exclusive lock
// on netnsLockPath meanwhile, so a second test binary (another package
// run, another checkout) waits for the first instead of tearing its hosts
// down.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// The host set: FIBRIL_TEST_HOSTS=<name>:<subnet> (for example
// fic:10.78.0) names another set, with its own bridge (<name>0), hosts
// (<name>1..), subnet and lock, so a second run can use test hosts while
// a long one holds the default set. Only lower-case letters name a set.
var netnsPrefix, netnsSubnet = testHostSet()

var (
	netnsBridge   = netnsPrefix + "0"
	netnsLockPath = "/tmp/fibril-test-hosts.lock"
)

func init() {
	if netnsPrefix != "fib" {
		netnsLockPath = "/tmp/fibril-test-hosts-" + netnsPrefix + ".lock"
	}
}

func testHostSet() (prefix, subnet string) {
	text := os.Getenv("FIBRIL_TEST_HOSTS")
	if text == "" {
		return "fib", "10.77.0"
	}
	prefix, subnet, ok := strings.Cut(text, ":")
	valid := ok && prefix != "" && len(prefix) <= 8 && strings.Count(subnet, ".") == 2
	for _, r := range prefix {
		valid = valid && r >= 'a' && r <= 'z'
	}
	if !valid {
		panic(fmt.Sprintf("FIBRIL_TEST_HOSTS=%q: want <letters>:<a.b.c>, for example fic:10.78.0", text))
	}
	return prefix, subnet
}

// hostName is host i's namespace; its veth end in the root namespace is
// "v" + hostName(i).
func hostName(i int) string { return fmt.Sprintf("%s%d", netnsPrefix, i) }

// hostsHeld is set while this binary holds the test hosts; TestMain
// removes hosts a test failed to remove, and only then.
var hostsHeld atomic.Bool

// netHosts is a set of test hosts that are up.
type netHosts struct {
	count int
}

// netnsUnavailable says why namespaces cannot be made here, or "".
func netnsUnavailable() string {
	if os.Geteuid() != 0 {
		return "needs root to create network namespaces (CI runs as root)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "needs iproute2 (the ip command) to create network namespaces"
	}
	return ""
}

func ipCommand(args ...string) error {
	cmd := exec.Command("ip", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// upHosts creates hosts fib1..fibN (after removing any left behind) and
// removes them when the test ends. It skips the test where namespaces
// cannot be made.
func upHosts(t *testing.T, n int) *netHosts {
	t.Helper()
	if reason := netnsUnavailable(); reason != "" {
		t.Skip(reason)
	}
	lock, err := os.OpenFile(netnsLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("test hosts lock: %v", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Logf("another test run holds the test hosts (%s); waiting for it", netnsLockPath)
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			t.Fatalf("test hosts lock: %v", err)
		}
	}
	hostsHeld.Store(true)
	t.Cleanup(func() {
		if err := netnsDown(); err != nil {
			t.Errorf("removing the test hosts: %v", err)
		}
		hostsHeld.Store(false)
		_ = lock.Close() // releases the lock
	})
	if err := netnsDown(); err != nil { // what an interrupted run left
		t.Fatalf("removing leftover test hosts: %v", err)
	}
	steps := [][]string{
		{"link", "add", netnsBridge, "type", "bridge"},
		{"addr", "add", netnsSubnet + ".254/24", "dev", netnsBridge},
		{"link", "set", netnsBridge, "up"},
	}
	for i := 1; i <= n; i++ {
		ns, veth := hostName(i), "v"+hostName(i)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"link", "set", veth, "master", netnsBridge, "up"},
			[]string{"-n", ns, "addr", "add", fmt.Sprintf("%s.%d/24", netnsSubnet, i), "dev", "eth0"},
			[]string{"-n", ns, "link", "set", "eth0", "up"},
			[]string{"-n", ns, "link", "set", "lo", "up"},
		)
	}
	for _, step := range steps {
		if err := ipCommand(step...); err != nil {
			if strings.Contains(err.Error(), "Operation not permitted") {
				t.Skipf("cannot create network namespaces here: %v", err)
			}
			t.Fatalf("creating test hosts: %v", err)
		}
	}
	return &netHosts{count: n}
}

// address is host i's address (1-based).
func (h *netHosts) address(i int) string { return fmt.Sprintf("%s.%d", netnsSubnet, i) }

// command runs name inside host i (ip netns exec execs it, so the
// process's pid is the command's own).
func (h *netHosts) command(i int, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", hostName(i), name}, args...)...)
}

// isolate takes host i's link down.
func (h *netHosts) isolate(i int) error {
	return ipCommand("link", "set", "v"+hostName(i), "down")
}

// cut drops every packet host i sends to host j.
func (h *netHosts) cut(i, j int) error {
	return ipCommand("-n", hostName(i), "route", "replace", "blackhole", h.address(j)+"/32")
}

// heal removes every fault of host i.
func (h *netHosts) heal(i int) error {
	ns := hostName(i)
	if err := ipCommand("link", "set", "v"+hostName(i), "up"); err != nil {
		return err
	}
	out, err := exec.Command("ip", "-n", ns, "route", "show", "type", "blackhole").Output()
	if err != nil {
		return fmt.Errorf("ip -n %s route show type blackhole: %v", ns, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		if err := ipCommand("-n", ns, "route", "del", "blackhole", fields[1]); err != nil {
			return err
		}
	}
	return nil
}

// healAll removes every fault of every host.
func (h *netHosts) healAll() error {
	for i := 1; i <= h.count; i++ {
		if err := h.heal(i); err != nil {
			return err
		}
	}
	return nil
}

// leftoverHosts lists the test host namespaces that exist.
func leftoverHosts() []string {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil
	}
	var hosts []string
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 0 && isTestHost(fields[0]) {
			hosts = append(hosts, fields[0])
		}
	}
	return hosts
}

func isTestHost(name string) bool {
	rest, ok := strings.CutPrefix(name, netnsPrefix)
	if !ok || rest == "" {
		return false
	}
	for _, r := range rest {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// netnsDown removes every test host and the bridge. The veth pairs go
// first, explicitly: removing a namespace frees its end of the pair only
// when the kernel gets to it, and a new pair of the same name would find
// the old one still there.
func netnsDown() error {
	if netnsUnavailable() != "" {
		return nil
	}
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return fmt.Errorf("ip link show: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(fields[1], ":"), "@")
		if rest, ok := strings.CutPrefix(name, "v"); ok && isTestHost(rest) {
			if err := ipCommand("link", "del", name); err != nil {
				return err
			}
		}
	}
	for _, ns := range leftoverHosts() {
		if err := ipCommand("netns", "del", ns); err != nil {
			return err
		}
	}
	if exec.Command("ip", "link", "show", netnsBridge).Run() == nil {
		return ipCommand("link", "del", netnsBridge)
	}
	return nil
}
