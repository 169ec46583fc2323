// Command nodes starts the conformance suite's four local nodes (see
// package conformance) and runs a command with their addresses in its
// environment, so any SDK's test runner can run the suite:
//
//	go run ./conformance/nodes -- npm test --prefix sdk/typescript
//
// The command sees FIBRIL_CONFORMANCE_ADDR, FIBRIL_CONFORMANCE_AUTH_ADDR,
// FIBRIL_CONFORMANCE_TOKEN, FIBRIL_CONFORMANCE_SMALL_ADDR and
// FIBRIL_CONFORMANCE_TIMERS_ADDR, and FIBRIL_CONFORMANCE_CONTROL: an HTTP
// address on loopback where `POST /restart?profile=NAME` stops that node
// cleanly and starts it again on the same data and address, answering 200
// once it serves (the suite's restart_node step). The nodes
// stop when it exits, and its exit status is this command's. Without a
// command it prints the variables and serves until interrupted.
package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/fibrilmq/fibril/conformance"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// serveControl answers restart requests on a free loopback port.
func serveControl(local *conformance.Local) (net.Listener, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /restart", func(w http.ResponseWriter, r *http.Request) {
		if err := local.Restart(r.URL.Query().Get("profile")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "restarted")
	})
	go func() { _ = http.Serve(listener, mux) }()
	return listener, nil
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	dir, err := os.MkdirTemp("", "fibril-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodes:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	local, err := conformance.StartLocal(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodes:", err)
		return 1
	}
	defer local.Close()
	target := local.Target()
	control, err := serveControl(local)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodes:", err)
		return 1
	}
	defer control.Close()
	env := []string{
		"FIBRIL_CONFORMANCE_CONTROL=http://" + control.Addr().String(),
		"FIBRIL_CONFORMANCE_ADDR=" + target.Addresses["default"],
		"FIBRIL_CONFORMANCE_AUTH_ADDR=" + target.Addresses["auth"],
		"FIBRIL_CONFORMANCE_TOKEN=" + target.Token,
		"FIBRIL_CONFORMANCE_SMALL_ADDR=" + target.Addresses["small"],
		"FIBRIL_CONFORMANCE_TIMERS_ADDR=" + target.Addresses["timers"],
	}
	if len(args) == 0 {
		for _, line := range env {
			fmt.Println(line)
		}
		signals := make(chan os.Signal, 1)
		signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
		<-signals
		return 0
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "nodes:", err)
		return 1
	}
	return 0
}
