package main

// Finding the process of a local broker from its listening port, so
// `fibrilctl bench` can read the broker's CPU from /proc without being told
// its PID.
//
// /proc/net/tcp and /proc/net/tcp6 list one socket per line after a header:
//
//	sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
//	0:  0100007F:1CFC 00000000:0000 0A ...                                       1000 0      123456
//
// local_address is the address and port in hexadecimal (the port in host
// order, big-endian as printed), st 0A is LISTEN, and the tenth field is
// the socket's inode. A process holds the socket when one of the links in
// /proc/PID/fd reads "socket:[INODE]". Only the port is matched, so two
// processes listening on the same port at different addresses are
// ambiguous; the first found is taken. Reading another user's fds is not
// allowed, so a broker run by another user is not found.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// errNoListener is returned when no local process listens on the port.
var errNoListener = errors.New("no local process found listening on the port")

// tcpListenState is the LISTEN state in /proc/net/tcp.
const tcpListenState = "0A"

// listeningInodes returns the inodes of the sockets listening on port in
// the content of a /proc/net/tcp or tcp6 file.
func listeningInodes(content string, port int) []uint64 {
	var inodes []uint64
	for _, line := range strings.Split(content, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 10 || fields[3] != tcpListenState {
			continue
		}
		colon := strings.LastIndexByte(fields[1], ':')
		if colon < 0 {
			continue
		}
		localPort, err := strconv.ParseUint(fields[1][colon+1:], 16, 16)
		if err != nil || int(localPort) != port {
			continue
		}
		if inode, err := strconv.ParseUint(fields[9], 10, 64); err == nil && inode != 0 {
			inodes = append(inodes, inode)
		}
	}
	return inodes
}

// findListenerPID returns the PID of the process listening on the port of
// address, looking under procRoot (normally /proc). The host must be a
// loopback or local address; a remote broker's CPU is read from its
// metrics instead.
func findListenerPID(procRoot, address string) (int, error) {
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return 0, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return 0, fmt.Errorf("port %q: %w", portText, err)
	}
	if !isLocalHost(host) {
		return 0, fmt.Errorf("%s is not a local address", host)
	}
	wanted := map[string]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		content, err := os.ReadFile(filepath.Join(procRoot, "net", table))
		if err != nil {
			continue // no IPv6, for example
		}
		for _, inode := range listeningInodes(string(content), port) {
			wanted["socket:["+strconv.FormatUint(inode, 10)+"]"] = true
		}
	}
	if len(wanted) == 0 {
		return 0, fmt.Errorf("%w %d", errNoListener, port)
	}
	return processHolding(procRoot, wanted, port)
}

// processHolding returns the first process with an fd link in wanted.
func processHolding(procRoot string, wanted map[string]bool, port int) (int, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return 0, err
	}
	for _, entry := range entries {
		pid, err := strconv.Atoi(entry.Name())
		if err != nil || pid <= 0 {
			continue
		}
		fdDir := filepath.Join(procRoot, entry.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue // gone, or another user's
		}
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && wanted[target] {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("%w %d (its socket belongs to no process this user can read)", errNoListener, port)
}

// isLocalHost reports whether host names this machine.
func isLocalHost(host string) bool {
	if host == "" || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addresses, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, address := range addresses {
		if network, ok := address.(*net.IPNet); ok && network.IP.Equal(ip) {
			return true
		}
	}
	return false
}
