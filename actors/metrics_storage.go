package actors

// The node's storage series, read at scrape time from the node's one log
// budget (storage/log.Budget: tail-cache memory, descriptors of sealed
// segments, the logs' syncs) and from the sync counter wrapped once around
// the node's filesystem (every file and directory sync the node makes,
// queue logs, checkpoints and declarations alike).
//
//	fibril_fsyncs_total                       every fdatasync and directory fsync of the node
//	fibril_log_fsyncs_total                   those of the queue logs (segments, indexes, small files, recovery)
//	fibril_tail_cache_bytes, _limit_bytes     tail-cache memory held now, and its bound
//	fibril_tail_cache_hits_total, _misses_total      records read from the cache, from segment files
//	fibril_tail_cache_evictions_total, _overdrafts_total   blocks taken back, blocks granted over the bound
//	fibril_segment_files_open, _limit         descriptors of sealed segments open now, and their bound
//	fibril_segment_file_hits_total, _misses_total, _evictions_total   reads finding the descriptor open, opening it; closes to stay in bound

import (
	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/prometheus/client_golang/prometheus"
)

// storageCollector publishes the budget's and the sync counter's figures.
type storageCollector struct {
	budget *log.Budget
	syncs  *vfs.SyncCounter
	descs  map[string]*prometheus.Desc
}

// storageSeries names every series, with its help and whether it is a
// counter (otherwise a gauge).
var storageSeries = []struct {
	name, help string
	counter    bool
}{
	{"fibril_fsyncs_total", "Every fdatasync and directory fsync the node made since it started (queue logs, checkpoints, declarations).", true},
	{"fibril_log_fsyncs_total", "The fdatasync and directory fsync calls of the queue logs (segments, indexes, small files, recovery).", true},
	{"fibril_tail_cache_bytes", "Memory held by the tail caches of every queue log (cached records and blocks kept for reuse).", false},
	{"fibril_tail_cache_limit_bytes", "The node-wide bound on tail-cache memory (fibril serve --tail-cache-bytes).", false},
	{"fibril_tail_cache_hits_total", "Records scans read from a tail cache.", true},
	{"fibril_tail_cache_misses_total", "Records scans read from segment files.", true},
	{"fibril_tail_cache_evictions_total", "Tail-cache blocks taken back from a log to make room.", true},
	{"fibril_tail_cache_overdrafts_total", "Tail-cache blocks granted over the bound to stage a group.", true},
	{"fibril_segment_files_open", "Descriptors of sealed log segments open now.", false},
	{"fibril_segment_files_limit", "The node-wide bound on descriptors of sealed segments (fibril serve --open-segment-files).", false},
	{"fibril_segment_file_hits_total", "Reads of sealed segments that found their descriptor open.", true},
	{"fibril_segment_file_misses_total", "Reads of sealed segments that had to open their descriptor.", true},
	{"fibril_segment_file_evictions_total", "Descriptors of sealed segments closed to stay within the bound.", true},
}

func newStorageCollector(budget *log.Budget, syncs *vfs.SyncCounter) *storageCollector {
	c := &storageCollector{budget: budget, syncs: syncs, descs: make(map[string]*prometheus.Desc)}
	for _, series := range storageSeries {
		c.descs[series.name] = prometheus.NewDesc(series.name, series.help, nil, nil)
	}
	return c
}

func (c *storageCollector) Describe(out chan<- *prometheus.Desc) {
	for _, series := range storageSeries {
		out <- c.descs[series.name]
	}
}

func (c *storageCollector) Collect(out chan<- prometheus.Metric) {
	stats := c.budget.Stats()
	values := map[string]float64{
		"fibril_fsyncs_total":                 float64(c.syncs.Total()),
		"fibril_log_fsyncs_total":             float64(stats.FileSyncs + stats.DirectorySyncs),
		"fibril_tail_cache_bytes":             float64(stats.TailCacheBytes),
		"fibril_tail_cache_limit_bytes":       float64(stats.TailCacheLimitBytes),
		"fibril_tail_cache_hits_total":        float64(stats.TailCacheHits),
		"fibril_tail_cache_misses_total":      float64(stats.TailCacheMisses),
		"fibril_tail_cache_evictions_total":   float64(stats.TailCacheEvictions),
		"fibril_tail_cache_overdrafts_total":  float64(stats.TailCacheOverdrafts),
		"fibril_segment_files_open":           float64(stats.OpenSegmentFiles),
		"fibril_segment_files_limit":          float64(stats.OpenSegmentFilesLimit),
		"fibril_segment_file_hits_total":      float64(stats.SegmentFileHits),
		"fibril_segment_file_misses_total":    float64(stats.SegmentFileMisses),
		"fibril_segment_file_evictions_total": float64(stats.SegmentFileEvictions),
	}
	for _, series := range storageSeries {
		kind := prometheus.GaugeValue
		if series.counter {
			kind = prometheus.CounterValue
		}
		out <- prometheus.MustNewConstMetric(c.descs[series.name], kind, values[series.name])
	}
}

// setStorage publishes the node's storage series.
func (m *Metrics) setStorage(budget *log.Budget, syncs *vfs.SyncCounter) {
	m.registry.MustRegister(newStorageCollector(budget, syncs))
}
