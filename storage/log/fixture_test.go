package log

// On-disk format fixtures under testdata/log at the repository root, read
// through the real filesystem. v1-healthy is a small log written by this
// code (three segments, two epochs); v1-torn-tail is the same log with its
// last record cut short. A change that breaks the on-disk format fails
// here. Regenerate (only for a deliberate format change, with a new
// directory name) with FIBRIL_WRITE_FIXTURES=1.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/fibrilmq/fibril/storage/vfs"
)

var fixtureRoot = filepath.Join("..", "..", "testdata", "log")

func fixtureBody(offset uint64) []byte { return []byte(fmt.Sprintf("fixture record %d", offset)) }

const fixtureRecords = 50

func writeFixtures(t *testing.T) {
	healthy := filepath.Join(fixtureRoot, "v1-healthy")
	os.RemoveAll(healthy)
	opts := DefaultOptions()
	opts.FS = vfs.OS
	opts.SegmentBytes = 700
	opts.IndexIntervalBytes = 100
	opts.ExternalTicks = true
	l := mustOpen(t, healthy, opts)
	for offset := uint64(0); offset < fixtureRecords; offset++ {
		epoch := uint64(1)
		if offset >= 30 {
			epoch = 2
		}
		if _, err := l.Append(context.Background(), []Entry{{Epoch: epoch, Type: uint8(offset % 3), Body: fixtureBody(offset)}}, AfterFsync); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(fixtureRoot, "v1-torn-tail")
	os.RemoveAll(torn)
	copyDir(t, healthy, torn)
	names, _ := vfs.OS.ReadDir(torn)
	var last string
	for _, name := range names {
		if filepath.Ext(name) == logSuffix {
			last = name
		}
	}
	data, _ := os.ReadFile(filepath.Join(torn, last))
	os.WriteFile(filepath.Join(torn, last), data[:len(data)-5], 0o644)
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	names, err := vfs.OS.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(from, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFixtures(t *testing.T) {
	if os.Getenv("FIBRIL_WRITE_FIXTURES") == "1" {
		writeFixtures(t)
	}
	for _, c := range []struct {
		name string
		next uint64
	}{{"v1-healthy", fixtureRecords}, {"v1-torn-tail", fixtureRecords - 1}} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), c.name)
			copyDir(t, filepath.Join(fixtureRoot, c.name), dir) // recovery may repair: work on a copy
			opts := DefaultOptions()
			opts.ExternalTicks = true
			opts.Logger = discardLogger()
			l := mustOpen(t, dir, opts)
			defer l.Close()
			records := scanAll(t, l, 0, true)
			if uint64(len(records)) != c.next {
				t.Fatalf("%d records, want %d", len(records), c.next)
			}
			for _, record := range records {
				wantEpoch := uint64(1)
				if record.Offset >= 30 {
					wantEpoch = 2
				}
				if !bytes.Equal(record.Body, fixtureBody(record.Offset)) || record.Epoch != wantEpoch || record.Type != uint8(record.Offset%3) {
					t.Fatalf("record %d: %+v", record.Offset, record)
				}
			}
			if history := l.EpochHistory(); fmt.Sprint(history) != "[{1 0} {2 30}]" {
				t.Fatalf("epoch history %v", history)
			}
			if l.segments[0].base != 0 || len(l.segments) < 3 {
				t.Fatalf("fixture has %d segments", len(l.segments))
			}
		})
	}
}
