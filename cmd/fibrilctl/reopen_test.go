package main

import (
	"context"
	"strings"
	"testing"

	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/admin"
	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/storage/vfs"
)

// fibrilctl reopen brings a fenced queue back through the HTTP endpoint;
// a serving queue and an unknown one fail with one line.
func TestReopenCommand(t *testing.T) {
	mem := vfs.NewMem()
	config := actors.DefaultConfig()
	config.DataDir, config.ListenAddr, config.FS = "/data", "127.0.0.1:0", mem
	broker, err := actors.Start(config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := broker.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	server, err := admin.Start("127.0.0.1:0", admin.NodeFor(broker), admin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := server.Close(); err != nil {
			t.Errorf("close admin server: %v", err)
		}
	})
	httpAddr := server.Addr().String()
	if r := ctl(t, broker, "declare", "fragile"); r.code != exitOK {
		t.Fatalf("declare: %+v", r)
	}
	if r := ctl(t, broker, "publish", "fragile", "--count", "3"); r.code != exitOK {
		t.Fatalf("publish: %+v", r)
	}
	expectFailure(t, ctl(t, broker, "reopen", "fragile", "--http", httpAddr), exitFailure, "409")
	expectFailure(t, ctl(t, broker, "reopen", "nowhere", "--http", httpAddr), exitFailure, "404")

	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultWrite, Pattern: "/data/queues/fragile/0/log/*"})
	c, err := client.Dial(context.Background(), client.Options{Addresses: []string{broker.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Publish(context.Background(), "fragile", client.Message{Payload: []byte("refused")}); err == nil {
		t.Fatal("publish on a failing disk was confirmed")
	}
	r := ctl(t, broker, "reopen", "fragile", "--http", httpAddr)
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "reopened fragile: serving") || !strings.Contains(r.stdout, "ready=3") {
		t.Fatalf("reopen: %+v", r)
	}
	if r := ctl(t, broker, "publish", "fragile", "--count", "1"); r.code != exitOK {
		t.Fatalf("publish after the reopen: %+v", r)
	}
}
