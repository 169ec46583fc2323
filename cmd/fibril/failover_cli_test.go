package main

// fibrilctl rides through a failover: a publish run and a consumer started
// before the owner is killed finish against the new owner. The publish
// reports every message as confirmed, unknown or refused (it never sends
// one again on its own), and the consumer receives at least every
// confirmed message.

import (
	"bytes"
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
)

func TestBinaryFailoverFibrilctlRidesThrough(t *testing.T) {
	c, ctl := startBinaryClusterWithCtl(t)
	name := "ridden"
	owner, _ := c.declareAndFindOwner(name, client.QueueConfig{Mode: client.ModeDurable})
	others := c.others(owner)
	// The owner first among the seeds, as a client that found it would.
	seeds := owner.clientAddress + "," + others[0].clientAddress + "," + others[1].clientAddress
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const total = 1500
	publish := exec.CommandContext(ctx, ctl, "publish", name, "--count", strconv.Itoa(total), "--rate", "300",
		"--id", "m", "--server", seeds)
	var published lockedBuffer
	published.buffer = &bytes.Buffer{}
	publish.Stdout, publish.Stderr = &published, &published
	if err := publish.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "300 messages stored on the owner", 30*time.Second, func() bool {
		status, ok := serves(owner, name)
		return ok && status.CommittedNext >= 300
	})
	if err := owner.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = owner.cmd.Wait()
	_ = publish.Wait() // exit status 1 when some outcomes are unknown or refused
	output := published.String()
	counts := func(pattern string) int {
		match := regexp.MustCompile(pattern).FindStringSubmatch(output)
		if match == nil {
			return 0
		}
		n, _ := strconv.Atoi(match[1])
		return n
	}
	confirmed, unknown, refused := counts(`confirmed (\d+)`), counts(`unknown (\d+)`), counts(`refused (\d+)`)
	if confirmed < 300 || confirmed+unknown+refused != total {
		t.Fatalf("publish across the failover reported confirmed %d, unknown %d, refused %d of %d:\n%s",
			confirmed, unknown, refused, total, output)
	}
	consume := exec.CommandContext(ctx, ctl, "consume", name, "--count", strconv.Itoa(confirmed), "--ack", "--quiet",
		"--timeout", "60s", "--server", others[0].clientAddress+","+others[1].clientAddress)
	received, err := consume.CombinedOutput()
	if err != nil || !bytes.Contains(received, []byte("received "+strconv.Itoa(confirmed)+"\n")) {
		t.Fatalf("consume of the %d confirmed messages after the failover: %v\n%s\npublish said:\n%s",
			confirmed, err, received, output)
	}
	t.Logf("publish: %q", output)
}
