package log

// The shell around the recovery rules in recovery.go: it reads the files,
// asks the pure checks, and only when every check passed mutates anything
// (truncating a torn tail, rewriting indexes, removing empty segments).
//
// The rule it applies, in short: the log proves its durable end with its
// sealed segments (rollover synced each before creating the next) and the
// durable-end record (durable.go), lowered to a pending cut. Open never
// refuses over damage wholly at or past that proven end (a torn tail,
// truncated whatever follows it), and refuses with ErrInteriorCorruption,
// deleting nothing, damage or missing records inside the proven prefix.

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// recoveredSegments is the outcome of recovery: the segments with their
// indexes and read descriptors, the active one last.
type recoveredSegments struct {
	segments []*segment
	next     uint64
}

type segmentPlan struct {
	base     uint64
	size     int64
	analysis segmentAnalysis
}

// recoverSegments applies recovery rules 2 to 5 to the segments in bases.
// proven is the durable-end record's value (0 when there is none): the
// tail must reach it, and may be truncated only at or past it.
func recoverSegments(fs vfs.FS, dir string, bases []uint64, opts Options, proven uint64) (recoveredSegments, error) {
	if len(bases) == 0 {
		if proven > opts.BaseOffset {
			return recoveredSegments{}, fmt.Errorf("%w: no segment is left but records below %d were durable", ErrInteriorCorruption, proven)
		}
		return createFirstSegment(fs, dir, opts.BaseOffset)
	}
	plans := make([]segmentPlan, len(bases))
	tail := -1
	for i, base := range bases {
		size, _, err := fs.Stat(filepath.Join(dir, segmentName(base, logSuffix)))
		if err != nil {
			return recoveredSegments{}, err
		}
		plans[i] = segmentPlan{base: base, size: size}
		if size > 0 {
			tail = i
		}
	}
	if err := analyzePlans(fs, dir, plans, tail, opts, proven); err != nil {
		return recoveredSegments{}, err
	}
	// Every check passed: from here on, mutations are allowed.
	keep, err := applyPlans(fs, dir, plans, tail)
	if err != nil {
		return recoveredSegments{}, err
	}
	return buildSegments(fs, dir, keep)
}

// analyzePlans reads every segment up to the tail and decides, without
// changing anything, whether the log can be recovered. It holds one
// segment file open at a time.
func analyzePlans(fs vfs.FS, dir string, plans []segmentPlan, tail int, opts Options, proven uint64) error {
	for i := 0; i <= tail; i++ {
		plan := &plans[i]
		if plan.size == 0 {
			return fmt.Errorf("%w: segment %d is empty but segment %d after it holds records", ErrInteriorCorruption, plan.base, plans[tail].base)
		}
		anchorLimit := anchorsUnlimited
		if i == tail {
			anchorLimit = proven
		}
		if err := analyzePlan(fs, dir, plan, opts, anchorLimit); err != nil {
			return err
		}
		if i < tail {
			if err := checkSealed(plans[i], plans[i+1].base); err != nil {
				return err
			}
			continue
		}
		if err := checkTail(plan.base, plan.analysis, proven); err != nil {
			return err
		}
	}
	if tail < 0 {
		if end := plans[len(plans)-1].base; end < proven {
			return fmt.Errorf("%w: every segment is empty, the last starting at %d, but records below %d were durable", ErrInteriorCorruption, end, proven)
		}
	}
	return nil
}

// analyzePlan reads one segment's files and analyzes them.
func analyzePlan(fs vfs.FS, dir string, plan *segmentPlan, opts Options, anchorLimit uint64) error {
	reader, err := fs.Open(filepath.Join(dir, segmentName(plan.base, logSuffix)))
	if err != nil {
		return err
	}
	defer reader.Close()
	indexBytes, err := readWholeFile(fs, filepath.Join(dir, segmentName(plan.base, indexSuffix)))
	if err != nil {
		return err
	}
	plan.analysis, err = analyzeSegment(fileReader{reader}, plan.base, plan.size, indexBytes, opts.IndexIntervalBytes, anchorLimit)
	return err
}

// checkTail applies rule 4: the tail's walk must reach the proven durable
// end; damage at or past it is a torn tail.
func checkTail(base uint64, analysis segmentAnalysis, proven uint64) error {
	if analysis.next >= proven {
		return nil
	}
	if damage := analysis.damage; damage != nil {
		return fmt.Errorf("%w: segment %d damaged at byte %d (%v), where record %d should be, below the proven durable end %d", ErrInteriorCorruption, base, damage.position, damage.reason, analysis.next, proven)
	}
	return fmt.Errorf("%w: segment %d ends at record %d, below the proven durable end %d", ErrInteriorCorruption, base, analysis.next, proven)
}

// checkSealed requires a sealed segment to end cleanly where the next begins.
func checkSealed(plan segmentPlan, nextBase uint64) error {
	if damage := plan.analysis.damage; damage != nil {
		return fmt.Errorf("%w: sealed segment %d damaged at byte %d (%v) and later segments hold records", ErrInteriorCorruption, plan.base, damage.position, damage.reason)
	}
	if plan.analysis.next != nextBase {
		return fmt.Errorf("%w: segment %d ends at offset %d but the next segment starts at %d", ErrInteriorCorruption, plan.base, plan.analysis.next, nextBase)
	}
	return nil
}

// applyPlans truncates a torn tail, rewrites indexes that need it, removes
// trailing empty segments that do not continue the log, and syncs the
// recovered tail. It returns the plans kept.
func applyPlans(fs vfs.FS, dir string, plans []segmentPlan, tail int) ([]segmentPlan, error) {
	var keep, extra []segmentPlan
	if tail < 0 {
		// Only empty segments: keep the highest, so no offset is reused.
		keep, extra = plans[len(plans)-1:], plans[:len(plans)-1]
	} else {
		keep = append(keep, plans[:tail+1]...)
		for i := tail + 1; i < len(plans); i++ {
			if i == tail+1 && plans[i].base == plans[tail].analysis.next {
				keep = append(keep, plans[i])
			} else {
				extra = append(extra, plans[i])
			}
		}
	}
	for _, plan := range extra {
		if err := removeSegmentFiles(fs, dir, plan.base); err != nil {
			return nil, err
		}
	}
	for i := range keep {
		if err := repairSegment(fs, dir, &keep[i], i == tail); err != nil {
			return nil, err
		}
	}
	return keep, fs.SyncDir(dir)
}

// repairSegment makes one kept segment's files match its analysis; the tail
// is always synced, since a process crash leaves its bytes in the page
// cache only.
func repairSegment(fs vfs.FS, dir string, plan *segmentPlan, isTail bool) error {
	logPath := filepath.Join(dir, segmentName(plan.base, logSuffix))
	indexPath := filepath.Join(dir, segmentName(plan.base, indexSuffix))
	truncate := plan.analysis.damage != nil
	if truncate || isTail {
		file, err := fs.OpenReadWrite(logPath)
		if err != nil {
			return err
		}
		if truncate {
			err = file.Truncate(plan.analysis.validEnd)
			plan.size = plan.analysis.validEnd
		}
		if err == nil {
			err = file.Sync()
		}
		if closeErr := file.Close(); err == nil {
			err = closeErr
		}
		if err != nil {
			return err
		}
	}
	_, indexExists, err := fs.Stat(indexPath)
	if err != nil {
		return err
	}
	if plan.analysis.indexRewrite || !indexExists || isTail {
		return writeIndexFile(fs, indexPath, plan.analysis.entries)
	}
	return nil
}

func writeIndexFile(fs vfs.FS, path string, entries []indexEntry) error {
	file, err := fs.Create(path)
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		_, err = file.WriteAt(appendIndexEntries(nil, entries), 0)
	}
	if err == nil {
		err = file.Sync()
	}
	if closeErr := file.Close(); err == nil {
		err = closeErr
	}
	return err
}

func removeSegmentFiles(fs vfs.FS, dir string, base uint64) error {
	if err := fs.Remove(filepath.Join(dir, segmentName(base, logSuffix))); err != nil && !errors.Is(err, vfs.ErrNotExist) {
		return err
	}
	if err := fs.Remove(filepath.Join(dir, segmentName(base, indexSuffix))); err != nil && !errors.Is(err, vfs.ErrNotExist) {
		return err
	}
	return nil
}

// buildSegments describes the kept segments; the last one is the active
// segment and gets a read descriptor, every other one is sealed (its files
// are opened through the descriptor cache when read, its index searched on
// disk).
func buildSegments(fs vfs.FS, dir string, plans []segmentPlan) (recoveredSegments, error) {
	var out recoveredSegments
	for i, plan := range plans {
		seg := newSegment(dir, plan.base)
		out.segments = append(out.segments, seg)
		seg.entries = plan.analysis.entries
		seg.next, seg.size = plan.base, 0
		if plan.size > 0 {
			seg.next, seg.size = plan.analysis.next, plan.analysis.validEnd
		}
		out.next = seg.next
		if i < len(plans)-1 {
			seg.seal()
			continue
		}
		reader, err := fs.Open(seg.logPath)
		if err != nil {
			return recoveredSegments{}, err
		}
		seg.reader = reader
	}
	return out, nil
}

func createFirstSegment(fs vfs.FS, dir string, base uint64) (recoveredSegments, error) {
	seg := newSegment(dir, base)
	for _, path := range []string{seg.logPath, seg.indexPath} {
		file, err := fs.Create(path)
		if err != nil {
			return recoveredSegments{}, err
		}
		file.Close()
	}
	if err := fs.SyncDir(dir); err != nil {
		return recoveredSegments{}, err
	}
	reader, err := fs.Open(seg.logPath)
	if err != nil {
		return recoveredSegments{}, err
	}
	seg.reader = reader
	return recoveredSegments{segments: []*segment{seg}, next: base}, nil
}

// cutSegmentFiles removes every record at or after offset from the
// segments in bases (sorted), durably: whole segments above it are removed
// highest first, the segment holding it is truncated at the record's
// position, and the result synced. locate, when set, gives a starting
// point for the walk to the cut record; otherwise the walk starts at byte
// 0 (the index is not trusted yet at Open). When the walk cannot reach the
// offset (damage before it), that segment is left for recovery to judge.
// It returns the remaining bases. Open uses it for a pending cut and
// TruncateAfter for a live cut.
func cutSegmentFiles(fs vfs.FS, dir string, bases []uint64, offset uint64, locate func(base uint64) (int64, uint64)) ([]uint64, error) {
	kept := append([]uint64(nil), bases...)
	for len(kept) > 0 && kept[len(kept)-1] > offset {
		if err := removeSegmentFiles(fs, dir, kept[len(kept)-1]); err != nil {
			return nil, err
		}
		kept = kept[:len(kept)-1]
	}
	if len(kept) == 0 {
		if err := fs.SyncDir(dir); err != nil {
			return nil, err
		}
		// The cut lies below every segment: start an empty one there.
		if _, err := createFirstSegment(fs, dir, offset); err != nil {
			return nil, err
		}
		return []uint64{offset}, nil
	}
	base := kept[len(kept)-1]
	if err := truncateSegmentAt(fs, dir, base, offset, locate); err != nil {
		return nil, err
	}
	return kept, fs.SyncDir(dir)
}

// truncateSegmentAt cuts one segment so that its last record is offset-1.
func truncateSegmentAt(fs vfs.FS, dir string, base, offset uint64, locate func(base uint64) (int64, uint64)) error {
	logPath := filepath.Join(dir, segmentName(base, logSuffix))
	file, err := fs.OpenReadWrite(logPath)
	if err != nil {
		return err
	}
	defer file.Close()
	size, err := file.Size()
	if err != nil {
		return err
	}
	start, startOffset := int64(0), base
	if locate != nil {
		start, startOffset = locate(offset)
	}
	position, found, err := findRecordPosition(fileReader{file}, start, size, startOffset, offset)
	if err != nil {
		return err
	}
	if !found {
		if locate != nil {
			// A live cut walks bytes this process wrote: damage there is not
			// a torn tail, and cutting around it would leave it in the log.
			return fmt.Errorf("%w: segment %d: damage before record %d", ErrCorrupt, base, offset)
		}
		return nil // Open: recovery judges the damage
	}
	if err := file.Truncate(position); err != nil {
		return err
	}
	if err := file.Sync(); err != nil {
		return err
	}
	indexPath := filepath.Join(dir, segmentName(base, indexSuffix))
	indexBytes, err := readWholeFile(fs, indexPath)
	if err != nil {
		return err
	}
	entries := decodeIndex(indexBytes)
	keep := 0
	for keep < len(entries) && int64(entries[keep].position) < position {
		keep++
	}
	return writeIndexFile(fs, indexPath, entries[:keep])
}

// findRecordPosition walks from start to the record with offset target and
// returns its position: found is true where the record starts, also when
// the bytes there are damaged (the walk reached it intact), and with
// position == size when target is the segment's end; found is false when
// the walk stops at damage before it.
func findRecordPosition(source readerAt, start, size int64, startOffset, target uint64) (int64, bool, error) {
	if target == startOffset {
		return start, true, nil
	}
	walker := newRecordWalker(source, start, size, startOffset, nil)
	for {
		record, position, err := walker.next()
		if errors.Is(err, errWalkEnd) {
			return size, walker.expectedOffset == target, nil
		}
		var damage *walkDamage
		if errors.As(err, &damage) {
			// Damage exactly where the target record starts is the cut:
			// the record's bytes were lost (a failed sync dropped them), but
			// everything below it is in place.
			return damage.position, walker.expectedOffset == target, nil
		}
		if err != nil {
			return 0, false, err
		}
		if record.Offset == target {
			return position, true, nil
		}
	}
}
