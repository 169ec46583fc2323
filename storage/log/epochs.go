package log

// Epoch history: for each epoch present in the log, the first offset that
// carries it. Epochs never decrease along a log (appends enforce it), so
// the history is a step function and two replicas can compare theirs to
// find where they diverge. It is derived from the records; the epochs file
// is only a cache, checked against the records at every Open and rebuilt
// when missing or wrong. Entries below the oldest retained offset are kept
// as history: they cannot be checked, only their order.

import "fmt"

// epochAtFunc reads the epoch of the record at an offset.
type epochAtFunc func(offset uint64) (uint64, error)

// rebuildSearchEpochsMax bounds the binary-search rebuild; a log with more
// epoch changes than this is rebuilt by one linear walk instead, so a
// crafted log cannot make Open slower than a walk of its files.
const rebuildSearchEpochsMax = 256

// verifyEpochHistory reports why history does not describe the records
// [first, next), or nil. It reads two records per entry at most.
func verifyEpochHistory(history []EpochStart, first, next uint64, epochAt epochAtFunc) error {
	for i := 1; i < len(history); i++ {
		if history[i].Epoch <= history[i-1].Epoch || history[i].FirstOffset <= history[i-1].FirstOffset {
			return fmt.Errorf("entry %d out of order", i)
		}
	}
	if first == next {
		if len(history) > 0 && history[len(history)-1].FirstOffset >= next {
			return fmt.Errorf("entry past the log end")
		}
		return nil
	}
	covering := -1
	for i, start := range history {
		if start.FirstOffset <= first {
			covering = i
		}
	}
	if covering < 0 {
		return fmt.Errorf("no entry covers the first offset %d", first)
	}
	if err := expectEpoch(epochAt, first, history[covering].Epoch); err != nil {
		return err
	}
	for i := covering + 1; i < len(history); i++ {
		if history[i].FirstOffset >= next {
			return fmt.Errorf("entry %d past the log end", i)
		}
		if err := expectEpoch(epochAt, history[i].FirstOffset, history[i].Epoch); err != nil {
			return err
		}
		if err := expectEpoch(epochAt, history[i].FirstOffset-1, history[i-1].Epoch); err != nil {
			return err
		}
	}
	return expectEpoch(epochAt, next-1, history[len(history)-1].Epoch)
}

func expectEpoch(epochAt epochAtFunc, offset, want uint64) error {
	got, err := epochAt(offset)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("record %d has epoch %d, history says %d", offset, got, want)
	}
	return nil
}

// rebuildEpochHistory derives the history of [first, next) by binary search
// for each epoch change, or returns errTooManyEpochs past the search bound.
func rebuildEpochHistory(first, next uint64, epochAt epochAtFunc) ([]EpochStart, error) {
	if first == next {
		return nil, nil
	}
	epoch, err := epochAt(first)
	if err != nil {
		return nil, err
	}
	lastEpoch, err := epochAt(next - 1)
	if err != nil {
		return nil, err
	}
	history := []EpochStart{{Epoch: epoch, FirstOffset: first}}
	low := first
	for epoch != lastEpoch {
		if len(history) > rebuildSearchEpochsMax {
			return nil, errTooManyEpochs
		}
		// Find the smallest offset in (low, next) whose epoch exceeds epoch.
		lo, hi := low+1, next-1
		for lo < hi {
			mid := lo + (hi-lo)/2
			midEpoch, err := epochAt(mid)
			if err != nil {
				return nil, err
			}
			if midEpoch > epoch {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		if epoch, err = epochAt(lo); err != nil {
			return nil, err
		}
		history = append(history, EpochStart{Epoch: epoch, FirstOffset: lo})
		low = lo
	}
	return history, nil
}

var errTooManyEpochs = fmt.Errorf("more than %d epoch changes", rebuildSearchEpochsMax)

// epochHistoryBuilder folds records in offset order into a history (the
// linear rebuild and the writer's bookkeeping).
type epochHistoryBuilder struct{ history []EpochStart }

func (b *epochHistoryBuilder) observe(offset, epoch uint64) {
	if n := len(b.history); n == 0 || epoch > b.history[n-1].Epoch {
		b.history = append(b.history, EpochStart{Epoch: epoch, FirstOffset: offset})
	}
}

// trimEpochHistory drops the entries at or after offset.
func trimEpochHistory(history []EpochStart, offset uint64) []EpochStart {
	for len(history) > 0 && history[len(history)-1].FirstOffset >= offset {
		history = history[:len(history)-1]
	}
	return history
}
