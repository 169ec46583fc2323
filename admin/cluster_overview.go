package admin

// GET /api/cluster/overview: the whole cluster as seen from any node, for
// the dashboard's cluster page and `fibrilctl cluster`. The answering node
// reads its own cluster status (the node list with HTTP addresses, the
// catalog's queues with owners and replica sets) and asks every other
// node's endpoint, concurrently and within peerTimeout each, for its
// /api/node, /api/queues and /api/cluster; it forwards the caller's
// Authorization header, since the nodes of a cluster share a token. A node
// that does not answer is reported down, with the reason. Each queue is
// reported with the counts its owner gave, or none when the owner is down
// or does not have it open yet.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// peerTimeout bounds each request to another node's endpoint.
const peerTimeout = 2 * time.Second

// peerBodyBytes bounds what is read from another node's answer.
const peerBodyBytes = 16 << 20

// clusterStatusView is the part of /api/cluster the overview reads.
type clusterStatusView struct {
	NodeID        string `json:"node_id"`
	CatalogLeader string `json:"catalog_leader"`
	Revision      uint64 `json:"catalog_revision"`
	Serving       string `json:"serving"`
	CatalogError  string `json:"catalog_error"`
	Nodes         []struct {
		ID            string `json:"id"`
		ClientAddress string `json:"client_address"`
		HTTPAddress   string `json:"http_address"`
		Liveness      string `json:"liveness"`
	} `json:"nodes"`
	Queues []struct {
		Name       string `json:"name"`
		Mode       string `json:"mode"`
		Policy     string `json:"policy"`
		Partitions []struct {
			Replicas []string `json:"replicas"`
			Owner    string   `json:"owner"`
			Epoch    uint64   `json:"epoch"`
		} `json:"partitions"`
	} `json:"queues"`
}

// clusterOverview is the body of GET /api/cluster/overview.
type clusterOverview struct {
	AnsweredBy      string          `json:"answered_by"`
	CatalogLeader   string          `json:"catalog_leader"` // as the answering node sees it
	CatalogRevision uint64          `json:"catalog_revision"`
	Serving         string          `json:"serving"`
	CatalogError    string          `json:"catalog_error,omitempty"`
	Nodes           []overviewNode  `json:"nodes"`
	Queues          []overviewQueue `json:"queues"`
}

type overviewNode struct {
	ID            string  `json:"id"`
	ClientAddress string  `json:"client_address"`
	HTTPAddress   string  `json:"http_address"`
	Self          bool    `json:"self"`
	Up            bool    `json:"up"`             // its endpoint answered
	Liveness      string  `json:"liveness"`       // the answering node's Raft view of it
	CatalogLeader string  `json:"catalog_leader"` // as this node sees it
	Version       string  `json:"version,omitempty"`
	UptimeSeconds float64 `json:"uptime_seconds,omitempty"`
	OpenQueues    int     `json:"open_queues"`
	// Resources are the node's own report (memory, descriptors, disk).
	Resources *resourcesView `json:"resources,omitempty"`
	Error     string         `json:"error,omitempty"`
}

type overviewQueue struct {
	Name          string          `json:"name"`
	Mode          string          `json:"mode"`
	Policy        string          `json:"policy"`
	ReplicaSet    []string        `json:"replica_set"`
	Owner         string          `json:"owner"` // empty while being elected
	Epoch         uint64          `json:"epoch"`
	OwnerUp       bool            `json:"owner_up"`
	Counts        *QueueCounts    `json:"counts,omitempty"` // from the owner; absent when it cannot say
	ConsumerCount int             `json:"consumer_count"`
	Fenced        bool            `json:"fenced"`
	Replicas      []ReplicaStatus `json:"replicas,omitempty"` // progress per copy, as the owner reports it
}

// nodeReport is what one node said about itself.
type nodeReport struct {
	info    nodeView
	queues  []QueueStatus
	cluster clusterStatusView
	err     error
}

func (s *Server) handleClusterOverview(ctx *fasthttp.RequestCtx, _ string) {
	clusterNode, ok := s.node.(ClusterNode)
	if !ok {
		writeError(ctx, fasthttp.StatusNotFound, "this node does not run in a cluster")
		return
	}
	var status clusterStatusView
	if err := reencode(clusterNode.ClusterStatus(), &status); err != nil {
		writeError(ctx, fasthttp.StatusInternalServerError, "reading the cluster status: %v", err)
		return
	}
	authorization := string(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization))
	reports := s.gatherReports(status, authorization)
	writeJSON(ctx, fasthttp.StatusOK, buildOverview(status, reports))
}

// gatherReports asks every node for its report, itself included.
func (s *Server) gatherReports(status clusterStatusView, authorization string) map[string]nodeReport {
	reports := make(map[string]nodeReport, len(status.Nodes))
	var mu sync.Mutex
	var asking sync.WaitGroup
	for _, node := range status.Nodes {
		if node.ID == status.NodeID {
			queues := s.node.Queues()
			report := nodeReport{queues: queues, cluster: status}
			report.info.NodeID, report.info.Version = node.ID, s.node.NodeInfo().Version
			report.info.Resources = readResources(s.node.NodeInfo().DataDir)
			if started := s.node.NodeInfo().StartedAt; !started.IsZero() {
				report.info.UptimeSeconds = s.options.Clock().Sub(started).Seconds()
			}
			mu.Lock() // peers asked earlier in the list may be answering already
			reports[node.ID] = report
			mu.Unlock()
			continue
		}
		asking.Add(1)
		go func(id, address string) {
			defer asking.Done()
			report := askPeer(address, authorization)
			mu.Lock()
			reports[id] = report
			mu.Unlock()
		}(node.ID, node.HTTPAddress)
	}
	asking.Wait()
	return reports
}

// askPeer reads another node's report from its endpoint.
func askPeer(address, authorization string) nodeReport {
	var report nodeReport
	client := &http.Client{Timeout: peerTimeout}
	get := func(path string, into any) error {
		request, err := http.NewRequest(http.MethodGet, "http://"+address+path, nil)
		if err != nil {
			return err
		}
		if authorization != "" {
			request.Header.Set("Authorization", authorization)
		}
		answer, err := client.Do(request)
		if err != nil {
			return err
		}
		defer answer.Body.Close()
		body, err := io.ReadAll(io.LimitReader(answer.Body, peerBodyBytes))
		if err != nil {
			return err
		}
		if answer.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s answered %d", path, answer.StatusCode)
		}
		return json.Unmarshal(body, into)
	}
	var queues queuesView
	for _, step := range []struct {
		path string
		into any
	}{{"/api/node", &report.info}, {"/api/queues", &queues}, {"/api/cluster", &report.cluster}} {
		if report.err = get(step.path, step.into); report.err != nil {
			return report
		}
	}
	report.queues = queues.Queues
	return report
}

// buildOverview joins the catalog's view with what each node reported.
func buildOverview(status clusterStatusView, reports map[string]nodeReport) clusterOverview {
	overview := clusterOverview{AnsweredBy: status.NodeID, CatalogLeader: status.CatalogLeader,
		CatalogRevision: status.Revision, Serving: status.Serving, CatalogError: status.CatalogError,
		Nodes: []overviewNode{}, Queues: []overviewQueue{}}
	for _, node := range status.Nodes {
		report := reports[node.ID]
		row := overviewNode{ID: node.ID, ClientAddress: node.ClientAddress, HTTPAddress: node.HTTPAddress,
			Self: node.ID == status.NodeID, Liveness: node.Liveness, Up: report.err == nil}
		if report.err != nil {
			row.Error = report.err.Error()
		} else {
			row.Version, row.UptimeSeconds = report.info.Version, report.info.UptimeSeconds
			row.CatalogLeader, row.OpenQueues = report.cluster.CatalogLeader, len(report.queues)
			resources := report.info.Resources
			row.Resources = &resources
		}
		overview.Nodes = append(overview.Nodes, row)
	}
	for _, declared := range status.Queues {
		row := overviewQueue{Name: declared.Name, Mode: declared.Mode, Policy: declared.Policy, ReplicaSet: []string{}}
		if len(declared.Partitions) > 0 {
			partition := declared.Partitions[0]
			row.ReplicaSet, row.Owner, row.Epoch = partition.Replicas, partition.Owner, partition.Epoch
		}
		if report, ok := reports[row.Owner]; ok && report.err == nil {
			row.OwnerUp = true
			for _, queue := range report.queues {
				if queue.Name == row.Name {
					counts := queue.Counts
					row.Counts, row.ConsumerCount, row.Fenced, row.Replicas = &counts, queue.ConsumerCount, queue.Fenced, queue.Replicas
				}
			}
		}
		overview.Queues = append(overview.Queues, row)
	}
	sort.Slice(overview.Queues, func(i, j int) bool { return overview.Queues[i].Name < overview.Queues[j].Name })
	return overview
}

// reencode converts a JSON-encodable value into another shape.
func reencode(value any, into any) error {
	raw, err := json.Marshal(value)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, into)
}
