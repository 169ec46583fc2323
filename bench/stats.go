package bench

// Samples and statistics.
//
// A Recorder keeps every latency sample it is given, as nanoseconds, in a
// slice allocated once at construction; it never grows. When it is full,
// further samples are not kept but counted in Overflow, and every Summary
// carries that count, so a report can say that its figures cover only a
// prefix of the run instead of silently describing less than it claims.
//
// Percentiles are nearest-rank on the sorted raw samples. With N samples
// sorted ascending, x[1] <= x[2] <= ... <= x[N], the q-quantile for q in
// (0, 1] is x[ceil(q*N)], and the 0-quantile is x[1], the minimum. A
// quantile is written in parts per million (P999 is 999,000 ppm), so the rank
// is exact integer arithmetic: the 99.9th percentile of 1,000 samples is rank
// 999, never rank 1,000 through floating-point rounding. A nearest-rank
// percentile is always one of the samples: nothing is interpolated, averaged
// or read from buckets, and percentiles of different runs are never merged.
//
// Min, max, mean and standard deviation come from the same samples. The
// standard deviation is the population one: the square root of the mean
// squared distance from the mean, dividing by N, not N-1.

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Quantile is a quantile in parts per million: 500,000 is the median.
type Quantile uint32

// The quantiles every Summary computes. The markdown table shows P50, P99,
// P999 and the maximum; the JSON output carries all of them.
const (
	P50   Quantile = 500_000
	P90   Quantile = 900_000
	P99   Quantile = 990_000
	P999  Quantile = 999_000
	P9999 Quantile = 999_900

	quantileScale = 1_000_000
)

// SummaryQuantiles lists the quantiles a Summary computes, in ascending order.
var SummaryQuantiles = []Quantile{P50, P90, P99, P999, P9999}

// String names the quantile as a percentile: "p50", "p99.9", "p99.99".
func (q Quantile) String() string {
	percent := float64(q) / (quantileScale / 100)
	return "p" + strconv.FormatFloat(percent, 'f', -1, 64)
}

// NearestRank returns the 1-based nearest rank of quantile q among count
// samples: ceil(q*count/1e6), and 1 for q = 0. It panics when count is not
// positive or q is above one million, since both are caller bugs.
func NearestRank(q Quantile, count int) int {
	if count <= 0 {
		panic(fmt.Sprintf("bench: nearest rank of %d samples", count))
	}
	if q > quantileScale {
		panic(fmt.Sprintf("bench: quantile %d ppm is above 1e6", q))
	}
	rank := (uint64(q)*uint64(count) + quantileScale - 1) / quantileScale
	if rank == 0 {
		rank = 1
	}
	return int(rank)
}

// PercentileOfSorted returns the nearest-rank q-quantile of samples, which
// must be sorted ascending and not empty.
func PercentileOfSorted(sortedNanos []int64, q Quantile) time.Duration {
	return time.Duration(sortedNanos[NearestRank(q, len(sortedNanos))-1])
}

// PercentileValue is one computed percentile of a Summary.
type PercentileValue struct {
	Quantile Quantile      `json:"quantile_ppm"`
	Label    string        `json:"label"`
	Value    time.Duration `json:"value_ns"`
}

// Summary describes a set of raw samples. Every field is computed from the
// samples themselves; an empty Summary has Count 0 and zero values.
type Summary struct {
	Count       int               `json:"count"`
	Overflow    uint64            `json:"overflow"`
	Min         time.Duration     `json:"min_ns"`
	Max         time.Duration     `json:"max_ns"`
	MeanNanos   float64           `json:"mean_ns"`
	StdDevNanos float64           `json:"stddev_ns"`
	Percentiles []PercentileValue `json:"percentiles"`
}

// At returns the computed percentile q, or 0 when the summary is empty. It
// panics when q is not one of SummaryQuantiles.
func (s Summary) At(q Quantile) time.Duration {
	if s.Count == 0 {
		return 0
	}
	for _, p := range s.Percentiles {
		if p.Quantile == q {
			return p.Value
		}
	}
	panic(fmt.Sprintf("bench: summary has no %v", q))
}

// Mean returns the mean rounded to the nanosecond.
func (s Summary) Mean() time.Duration { return time.Duration(math.Round(s.MeanNanos)) }

// StdDev returns the population standard deviation rounded to the nanosecond.
func (s Summary) StdDev() time.Duration { return time.Duration(math.Round(s.StdDevNanos)) }

// Summarize sorts samplesNanos in place and describes them. overflow is the
// number of samples that were offered but not kept.
func Summarize(samplesNanos []int64, overflow uint64) Summary {
	summary := Summary{Count: len(samplesNanos), Overflow: overflow}
	if len(samplesNanos) == 0 {
		return summary
	}
	slices.Sort(samplesNanos)
	summary.Min = time.Duration(samplesNanos[0])
	summary.Max = time.Duration(samplesNanos[len(samplesNanos)-1])
	summary.MeanNanos, summary.StdDevNanos = meanAndStdDev(samplesNanos)
	summary.Percentiles = make([]PercentileValue, 0, len(SummaryQuantiles))
	for _, q := range SummaryQuantiles {
		summary.Percentiles = append(summary.Percentiles, PercentileValue{
			Quantile: q, Label: q.String(), Value: PercentileOfSorted(samplesNanos, q),
		})
	}
	return summary
}

// meanAndStdDev uses two passes, the mean first and then the squared
// distances from it, which keeps the result accurate for large nanosecond
// values where a one-pass sum of squares would lose precision.
func meanAndStdDev(samplesNanos []int64) (mean, stdDev float64) {
	var sum float64
	for _, sample := range samplesNanos {
		sum += float64(sample)
	}
	mean = sum / float64(len(samplesNanos))
	var squares float64
	for _, sample := range samplesNanos {
		distance := float64(sample) - mean
		squares += distance * distance
	}
	return mean, math.Sqrt(squares / float64(len(samplesNanos)))
}

// Recorder keeps up to a fixed number of raw samples. It is not safe for
// concurrent use: one goroutine owns it.
//
// Invariant: len(samplesNanos) <= cap(samplesNanos), fixed at construction.
type Recorder struct {
	samplesNanos []int64
	overflow     uint64
}

// NewRecorder allocates room for capacity samples up front.
func NewRecorder(capacity int) *Recorder {
	if capacity < 0 {
		panic(fmt.Sprintf("bench: recorder capacity %d", capacity))
	}
	return &Recorder{samplesNanos: make([]int64, 0, capacity)}
}

// Record keeps one sample, or counts it as overflow when the recorder is full.
func (r *Recorder) Record(sample time.Duration) {
	if len(r.samplesNanos) == cap(r.samplesNanos) {
		r.overflow++
		return
	}
	r.samplesNanos = append(r.samplesNanos, int64(sample))
}

// Len returns the number of samples kept.
func (r *Recorder) Len() int { return len(r.samplesNanos) }

// Cap returns the most samples the recorder keeps.
func (r *Recorder) Cap() int { return cap(r.samplesNanos) }

// Overflow returns the number of samples offered after the recorder was full.
func (r *Recorder) Overflow() uint64 { return r.overflow }

// Summary sorts the kept samples in place and describes them. Recording may
// continue afterwards; the next Summary sorts again.
func (r *Recorder) Summary() Summary { return Summarize(r.samplesNanos, r.overflow) }
