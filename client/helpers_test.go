package client_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/client/clienttest"
)

// hangGuard bounds how long a test may wait for anything. It only turns a
// hang into a failure with a message; no test asserts on elapsed time.
const hangGuard = 20 * time.Second

func guardedContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

func startServer(t *testing.T, config clienttest.Config) *clienttest.Server {
	t.Helper()
	server, err := clienttest.NewServer(config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(server.Close)
	return server
}

// dial connects to the servers with fast backoff so reconnect tests run
// quickly; options may override anything.
func dial(t *testing.T, options client.Options, servers ...*clienttest.Server) *client.Client {
	t.Helper()
	for _, server := range servers {
		options.Addresses = append(options.Addresses, server.Addr())
	}
	if options.Backoff == (client.Backoff{}) {
		options.Backoff = client.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}
	}
	c, err := client.Dial(guardedContext(t), options)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func await(t *testing.T, server *clienttest.Server, what string, cond func(clienttest.Stats) bool) {
	t.Helper()
	if err := server.Await(guardedContext(t), cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// receive takes the next delivery or fails the test.
func receive(t *testing.T, deliveries <-chan *client.Delivery) *client.Delivery {
	t.Helper()
	select {
	case d, ok := <-deliveries:
		if !ok {
			t.Fatal("the deliveries channel closed")
		}
		return d
	case <-time.After(hangGuard):
		t.Fatal("no delivery arrived")
		return nil
	}
}

// waitResult takes a value from a result channel or fails the test.
func waitResult[T any](t *testing.T, results <-chan T, what string) T {
	t.Helper()
	select {
	case result := <-results:
		return result
	case <-time.After(hangGuard):
		t.Fatalf("%s never completed", what)
		var zero T
		return zero
	}
}

func declare(t *testing.T, c *client.Client, queue string, config client.QueueConfig) client.DeclareResult {
	t.Helper()
	result, err := c.Declare(guardedContext(t), queue, config)
	if err != nil {
		t.Fatalf("declare %s: %v", queue, err)
	}
	return result
}

// awaitNoSDKGoroutines waits until no goroutine of the SDK runs (after
// every Client of the test closed), or fails the test with their stacks
// once hangGuard has passed.
func awaitNoSDKGoroutines(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(hangGuard); ; time.Sleep(time.Millisecond) {
		stacks := make([]byte, 1<<20)
		stacks = stacks[:runtime.Stack(stacks, true)]
		var left []string
		for _, stack := range strings.Split(string(stacks), "\n\n") {
			if strings.Contains(stack, "fibril/client.(*") || strings.Contains(stack, "fibril/client.Dial") {
				left = append(left, stack)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d SDK goroutines still running after Close:\n%s", len(left), strings.Join(left, "\n\n"))
		}
	}
}
