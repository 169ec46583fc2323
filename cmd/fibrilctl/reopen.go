package main

// fibrilctl reopen NAME: reopen a fenced or failed queue without restarting
// the node. The node closes the queue and opens it again, which runs its
// log's recovery; the command returns once the queue serves again. It talks
// to the node's HTTP endpoint (POST /api/queues/{name}/reopen), not to the
// client port: reopening is an operator's action, guarded by the HTTP
// token when the node has one.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// reopenTimeout bounds the request: the node bounds the reopen itself.
const reopenTimeout = 90 * time.Second

func init() {
	register(command{"reopen", "NAME [--http ADDR] [--http-token TOKEN]",
		"reopen a fenced or failed queue (runs its log's recovery) through the node's HTTP endpoint", runReopen})
}

func runReopen(ctx context.Context, args []string, stdout io.Writer) error {
	var shared connection
	flags := newFlags(ctx, "reopen", &shared)
	httpServer := &shared.http
	httpToken := flags.String("http-token", os.Getenv("FIBRIL_HTTP_TOKEN"),
		"bearer token for HTTP writes (default: $FIBRIL_HTTP_TOKEN)")
	values, err := parseArgs(flags, args, stdout, "NAME")
	if err != nil {
		return err
	}
	name := values[0]
	ctx, cancel := context.WithTimeout(ctx, reopenTimeout)
	defer cancel()
	endpoint := "http://" + *httpServer + "/api/queues/" + url.PathEscape(name) + "/reopen"
	request, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, nil)
	if err != nil {
		return usagef("--http %q: %v", *httpServer, err)
	}
	if *httpToken != "" {
		request.Header.Set("Authorization", "Bearer "+*httpToken)
	}
	response, err := http.DefaultClient.Do(request)
	if err != nil {
		return fmt.Errorf("queue %q: %w", name, err)
	}
	defer response.Body.Close()
	body, err := io.ReadAll(io.LimitReader(response.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("queue %q: reading the answer: %w", name, err)
	}
	if response.StatusCode != http.StatusOK {
		var answer struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &answer) != nil || answer.Error == "" {
			answer.Error = strings.TrimSpace(string(body))
		}
		return fmt.Errorf("%s: %s", response.Status, answer.Error)
	}
	var status struct {
		DurableNext uint64 `json:"durable_next"`
		Counts      struct {
			Ready uint64 `json:"ready"`
		} `json:"counts"`
	}
	if err := json.Unmarshal(body, &status); err != nil {
		return fmt.Errorf("queue %q: the answer does not decode: %w", name, err)
	}
	fmt.Fprintf(stdout, "reopened %s: serving, durable_next=%d ready=%d\n", name, status.DurableNext, status.Counts.Ready)
	return nil
}
