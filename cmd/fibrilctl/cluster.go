package main

// cluster prints the whole cluster from any node: the nodes (up or down,
// addresses, version, uptime, each one's view of the catalog leader), the
// catalog leader, and every queue with its owner, epoch, replica set,
// counts and each copy's progress. It reads GET /api/cluster/overview from
// the node at --http ($FIBRIL_HTTP), which asks every other node's HTTP
// endpoint itself, so one reachable node is enough. --token is sent as the
// HTTP bearer token when the endpoint protects its reads.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"
)

func init() {
	register(command{"cluster", "[--json]",
		"show the nodes, the catalog leader and every queue's owner and replicas (from any node's --http endpoint)", runCluster})
}

// overviewJSON is the part of /api/cluster/overview the command prints.
type overviewJSON struct {
	AnsweredBy    string `json:"answered_by"`
	CatalogLeader string `json:"catalog_leader"`
	Serving       string `json:"serving"`
	CatalogError  string `json:"catalog_error"`
	Nodes         []struct {
		ID            string  `json:"id"`
		ClientAddress string  `json:"client_address"`
		HTTPAddress   string  `json:"http_address"`
		Self          bool    `json:"self"`
		Up            bool    `json:"up"`
		Liveness      string  `json:"liveness"`
		CatalogLeader string  `json:"catalog_leader"`
		Version       string  `json:"version"`
		UptimeSeconds float64 `json:"uptime_seconds"`
		OpenQueues    int     `json:"open_queues"`
		Error         string  `json:"error"`
		Resources     *struct {
			ResidentBytes *uint64 `json:"resident_bytes"`
			OpenFiles     *int    `json:"open_files"`
			DiskFreeBytes *uint64 `json:"disk_free_bytes"`
		} `json:"resources"`
	} `json:"nodes"`
	Queues []struct {
		Name       string   `json:"name"`
		Mode       string   `json:"mode"`
		Policy     string   `json:"policy"`
		ReplicaSet []string `json:"replica_set"`
		Owner      string   `json:"owner"`
		Epoch      uint64   `json:"epoch"`
		OwnerUp    bool     `json:"owner_up"`
		Counts     *struct {
			Ready  uint64 `json:"ready"`
			Leased uint64 `json:"leased"`
		} `json:"counts"`
		ConsumerCount int `json:"consumer_count"`
		Replicas      []struct {
			Node        string `json:"node"`
			WrittenNext uint64 `json:"written_next"`
			DurableNext uint64 `json:"durable_next"`
		} `json:"replicas"`
	} `json:"queues"`
}

func runCluster(ctx context.Context, args []string, stdout io.Writer) error {
	var shared connection
	flags := newFlags(ctx, "cluster", &shared)
	asJSON := flags.Bool("json", false, "print the overview as the node sent it")
	if _, err := parseArgs(flags, args, stdout); err != nil {
		return err
	}
	raw, err := getHTTP(ctx, shared, "/api/cluster/overview")
	if err != nil {
		return err
	}
	if *asJSON {
		_, err := stdout.Write(raw)
		return err
	}
	var overview overviewJSON
	if err := json.Unmarshal(raw, &overview); err != nil {
		return fmt.Errorf("the answer of %s is not a cluster overview: %w", shared.http, err)
	}
	printOverview(stdout, overview)
	return nil
}

func printOverview(w io.Writer, o overviewJSON) {
	leader := o.CatalogLeader
	if leader == "" {
		leader = "none known (no quorum?)"
	}
	fmt.Fprintf(w, "catalog leader: %s (as %s sees it); data served: %s\n", leader, o.AnsweredBy, o.Serving)
	if o.CatalogError != "" {
		fmt.Fprintf(w, "catalog error: %s\n", o.CatalogError)
	}
	table := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(table, "NODE\tSTATE\tCLIENT\tHTTP\tVERSION\tUPTIME\tMEMORY\tOPEN FILES\tDISK FREE\tQUEUES OPEN\tLEADER SEEN\tRAFT VIEW")
	for _, n := range o.Nodes {
		state, uptime := "up", (time.Duration(n.UptimeSeconds) * time.Second).String()
		if !n.Up {
			state, uptime = "down", "-"
		}
		name := n.ID
		if n.Self {
			name += " (answering)"
		}
		memory, files, disk := "-", "-", "-"
		if r := n.Resources; r != nil {
			if r.ResidentBytes != nil {
				memory = humanBytes(*r.ResidentBytes)
			}
			if r.OpenFiles != nil {
				files = fmt.Sprint(*r.OpenFiles)
			}
			if r.DiskFreeBytes != nil {
				disk = humanBytes(*r.DiskFreeBytes)
			}
		}
		fmt.Fprintf(table, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", name, state, n.ClientAddress, n.HTTPAddress,
			orDash(n.Version), uptime, memory, files, disk, n.OpenQueues, orDash(n.CatalogLeader), n.Liveness)
	}
	table.Flush()
	for _, n := range o.Nodes {
		if n.Error != "" {
			fmt.Fprintf(w, "%s: %s\n", n.ID, n.Error)
		}
	}
	fmt.Fprintln(w)
	table = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(table, "QUEUE\tMODE\tPOLICY\tOWNER\tEPOCH\tREADY\tLEASED\tCONSUMERS\tREPLICAS (written/durable)")
	for _, q := range o.Queues {
		owner := q.Owner
		switch {
		case owner == "":
			owner = "(electing)"
		case !q.OwnerUp:
			owner += " (down)"
		}
		ready, leased := "-", "-"
		if q.Counts != nil {
			ready, leased = fmt.Sprint(q.Counts.Ready), fmt.Sprint(q.Counts.Leased)
		}
		var replicas []string
		progress := map[string]string{}
		for _, r := range q.Replicas {
			progress[r.Node] = fmt.Sprintf("%d/%d", r.WrittenNext, r.DurableNext)
		}
		for _, node := range q.ReplicaSet {
			if p, ok := progress[node]; ok {
				replicas = append(replicas, node+":"+p)
			} else {
				replicas = append(replicas, node+":?")
			}
		}
		fmt.Fprintf(table, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", q.Name, q.Mode, q.Policy, owner, q.Epoch, ready, leased,
			q.ConsumerCount, strings.Join(replicas, " "))
	}
	table.Flush()
}

// humanBytes writes n with a binary unit.
func humanBytes(n uint64) string {
	value, units := float64(n), []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for value >= 1024 && i < len(units)-1 {
		value /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", value, units[i])
}

func orDash(text string) string {
	if text == "" {
		return "-"
	}
	return text
}

// getHTTP reads one path of the node's HTTP endpoint.
func getHTTP(ctx context.Context, shared connection, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	request, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+shared.http+path, nil)
	if err != nil {
		return nil, usagef("--http %q: %v", shared.http, err)
	}
	if shared.token != "" {
		request.Header.Set("Authorization", "Bearer "+shared.token)
	}
	answer, err := http.DefaultClient.Do(request)
	if err != nil {
		return nil, fmt.Errorf("GET %s from %s: %w", path, shared.http, err)
	}
	defer answer.Body.Close()
	body, err := io.ReadAll(io.LimitReader(answer.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if answer.StatusCode != http.StatusOK {
		var refusal struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(body, &refusal)
		return nil, httpError{status: answer.StatusCode, message: refusal.Error, address: shared.http}
	}
	return body, nil
}

// httpError is a refusal by a node's HTTP endpoint.
type httpError struct {
	status  int
	message string
	address string
}

func (e httpError) Error() string {
	text := fmt.Sprintf("%s answered %d", e.address, e.status)
	if e.message != "" {
		text += ": " + e.message
	}
	return text
}
