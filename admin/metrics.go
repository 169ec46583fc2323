package admin

// GET /metrics: the node's series (Node.WritePrometheus), then the
// endpoint's own, gathered from a registry each Server keeps: the Go
// runtime and the process (client_golang's collectors: memory, CPU, open
// file descriptors, start time) and the node's resources the dashboard
// shows (free and total space of the data directory's filesystem, build
// information). Everything is the Prometheus text format, version 0.0.4,
// with HELP and TYPE for every family; docs/operations.md lists them.

import (
	"io"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
	"github.com/valyala/fasthttp"
)

// newProcessRegistry builds the endpoint's own series for node.
func newProcessRegistry(node Node) *prometheus.Registry {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector())
	registry.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	disk := func(read func(diskSpace) uint64) func() float64 {
		return func() float64 {
			space, err := diskSpaceOf(node.NodeInfo().DataDir)
			if err != nil {
				return 0
			}
			return float64(read(space))
		}
	}
	registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fibril_data_disk_free_bytes",
		Help: "Bytes free for the node on the filesystem of its data directory (0 when it cannot be read)."},
		disk(func(space diskSpace) uint64 { return space.FreeBytes })))
	registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fibril_data_disk_size_bytes",
		Help: "Size of the filesystem of the node's data directory (0 when it cannot be read)."},
		disk(func(space diskSpace) uint64 { return space.TotalBytes })))
	info := node.NodeInfo()
	registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fibril_build_info",
		Help:        "Always 1; the labels name the node and the version it runs.",
		ConstLabels: prometheus.Labels{"version": info.Version, "node": info.NodeID, "pid": pid()}},
		func() float64 { return 1 }))
	return registry
}

func pid() string { return itoa(os.Getpid()) }

func (s *Server) handleMetrics(ctx *fasthttp.RequestCtx, _ string) {
	ctx.SetContentType(string(expfmt.FmtText))
	s.node.WritePrometheus(ctx)
	if err := writeGathered(ctx, s.process); err != nil {
		s.logger.Warn("admin: gathering process metrics", "err", err)
	}
}

// writeGathered writes what gatherer gathers in the text format.
func writeGathered(w io.Writer, gatherer prometheus.Gatherer) error {
	families, gatherErr := gatherer.Gather()
	encoder := expfmt.NewEncoder(w, expfmt.FmtText)
	for _, family := range families {
		if err := encoder.Encode(family); err != nil {
			return err
		}
	}
	return gatherErr
}
