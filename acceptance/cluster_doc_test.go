package acceptance

// FIBRIL_DURABILITY_DOC=FILE makes TestMain write the cluster fault table
// into FILE (docs/durability.md) between the two marker lines below,
// replacing what was there, with the machine's load before and after the
// run. The command that produces the published table is in that file.

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

const (
	tableBeginMarker = "<!-- cluster fault table: begin (written by the acceptance tests, FIBRIL_DURABILITY_DOC) -->"
	tableEndMarker   = "<!-- cluster fault table: end -->"
)

// loadAtStart is the load average when the test binary started.
var loadAtStart = loadAverage()

func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	fields := strings.Fields(string(data))
	if len(fields) < 3 {
		return "unknown"
	}
	return strings.Join(fields[:3], " ")
}

func maybeWriteDurabilityTable(s *ClusterSummary) error {
	path := os.Getenv("FIBRIL_DURABILITY_DOC")
	if path == "" {
		return nil
	}
	doc, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("FIBRIL_DURABILITY_DOC: %w", err)
	}
	begin := bytes.Index(doc, []byte(tableBeginMarker))
	end := bytes.Index(doc, []byte(tableEndMarker))
	if begin < 0 || end < begin {
		return fmt.Errorf("FIBRIL_DURABILITY_DOC: %s has no %q ... %q section", path, tableBeginMarker, tableEndMarker)
	}
	var table bytes.Buffer
	fmt.Fprintf(&table, "%s\n\nRun of %s on %d CPUs; load average (1, 5, 15 min) %s at the start, %s at the end.\n\n",
		tableBeginMarker, time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), loadAtStart, loadAverage())
	s.Write(&table)
	table.WriteString("\n")
	out := append(append(append([]byte(nil), doc[:begin]...), table.Bytes()...), doc[end:]...)
	return os.WriteFile(path, out, 0o644)
}
