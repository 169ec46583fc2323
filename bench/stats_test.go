package bench

import (
	"math"
	"testing"
	"time"
)

func nanos(values ...int64) []int64 { return append([]int64(nil), values...) }

// Every expected value below is worked out by hand from x[ceil(q*N)].
func TestNearestRankHandComputed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		q     Quantile
		count int
		rank  int
	}{
		{"median of 1", P50, 1, 1},
		{"p99.9 of 1", P999, 1, 1},
		{"p0 is the minimum", 0, 7, 1},
		{"p100 is the maximum", 1_000_000, 7, 7},
		{"median of 10: ceil(5) = 5", P50, 10, 5},
		{"median of 11: ceil(5.5) = 6", P50, 11, 6},
		{"p90 of 10: ceil(9) = 9", P90, 10, 9},
		{"p99 of 10: ceil(9.9) = 10", P99, 10, 10},
		{"p99.9 of 10: ceil(9.99) = 10", P999, 10, 10},
		{"p99 of 100: exactly 99", P99, 100, 99},
		{"p99.9 of 1000: exactly 999, no float rounding", P999, 1000, 999},
		{"p99.9 of 1001: ceil(999.999) = 1000", P999, 1001, 1000},
		{"p99.99 of 10000: exactly 9999", P9999, 10_000, 9999},
		{"p99.9 of 3: ceil(2.997) = 3", P999, 3, 3},
		{"p30 of 5: ceil(1.5) = 2", 300_000, 5, 2},
	} {
		if got := NearestRank(tc.q, tc.count); got != tc.rank {
			t.Errorf("%s: rank %d, want %d", tc.name, got, tc.rank)
		}
	}
}

func TestSummarizeClassicExample(t *testing.T) {
	// The usual nearest-rank example: 15, 20, 35, 40, 50, given unsorted.
	samples := nanos(50, 15, 40, 20, 35)
	if got := PercentileOfSorted(nanos(15, 20, 35, 40, 50), 300_000); got != 20 {
		t.Errorf("p30 = %d, want 20", got)
	}
	if got := PercentileOfSorted(nanos(15, 20, 35, 40, 50), 400_000); got != 20 {
		t.Errorf("p40 = %d, want 20 (rank ceil(2.0) = 2)", got)
	}
	s := Summarize(samples, 0)
	want := map[Quantile]time.Duration{P50: 35, P90: 50, P99: 50, P999: 50, P9999: 50}
	for q, value := range want {
		if got := s.At(q); got != value {
			t.Errorf("%v = %d, want %d", q, got, value)
		}
	}
	if s.Count != 5 || s.Min != 15 || s.Max != 50 || s.MeanNanos != 32 {
		t.Errorf("count %d min %d max %d mean %v, want 5 15 50 32", s.Count, s.Min, s.Max, s.MeanNanos)
	}
	// Squared distances from 32: 289, 144, 9, 64, 324; sum 830; /5 = 166.
	if math.Abs(s.StdDevNanos-math.Sqrt(166)) > 1e-9 {
		t.Errorf("stddev %v, want sqrt(166)", s.StdDevNanos)
	}
}

func TestSummarizeMeanAndStdDev(t *testing.T) {
	// Mean 5; squared distances 9,1,1,1,0,0,4,16 sum 32; 32/8 = 4; stddev 2.
	s := Summarize(nanos(2, 4, 4, 4, 5, 5, 7, 9), 0)
	if s.MeanNanos != 5 || s.StdDevNanos != 2 || s.Mean() != 5 || s.StdDev() != 2 {
		t.Fatalf("mean %v stddev %v, want 5 and 2", s.MeanNanos, s.StdDevNanos)
	}
	// Even count: median is rank 4 of 8, the lower middle, never an average.
	if s.At(P50) != 4 {
		t.Errorf("median %d, want 4", s.At(P50))
	}
}

func TestSummarizeOneSample(t *testing.T) {
	s := Summarize(nanos(1234), 0)
	for _, q := range SummaryQuantiles {
		if s.At(q) != 1234 {
			t.Errorf("%v = %d, want 1234", q, s.At(q))
		}
	}
	if s.Min != 1234 || s.Max != 1234 || s.MeanNanos != 1234 || s.StdDevNanos != 0 {
		t.Errorf("summary %+v", s)
	}
}

func TestSummarizeSmallSetTail(t *testing.T) {
	// 1..20: p99 is rank ceil(19.8) = 20; p99.9 rank ceil(19.98) = 20; p90 rank 18.
	samples := make([]int64, 0, 20)
	for i := int64(20); i >= 1; i-- {
		samples = append(samples, i*1000)
	}
	s := Summarize(samples, 0)
	if s.At(P90) != 18_000 || s.At(P99) != 20_000 || s.At(P999) != 20_000 || s.At(P50) != 10_000 {
		t.Errorf("p50 %d p90 %d p99 %d p99.9 %d", s.At(P50), s.At(P90), s.At(P99), s.At(P999))
	}
}

func TestSummarizeEmpty(t *testing.T) {
	s := Summarize(nil, 3)
	if s.Count != 0 || s.Overflow != 3 || s.At(P99) != 0 || s.Max != 0 {
		t.Errorf("empty summary %+v", s)
	}
}

func TestRecorderBoundedWithOverflow(t *testing.T) {
	r := NewRecorder(3)
	for _, d := range []time.Duration{30, 10, 20, 40, 50} {
		r.Record(d)
	}
	if r.Len() != 3 || r.Cap() != 3 || r.Overflow() != 2 {
		t.Fatalf("len %d cap %d overflow %d, want 3 3 2", r.Len(), r.Cap(), r.Overflow())
	}
	s := r.Summary()
	if s.Count != 3 || s.Overflow != 2 || s.Min != 10 || s.Max != 30 || s.At(P50) != 20 {
		t.Errorf("summary %+v", s)
	}
	// Recording after a summary keeps working within the bound.
	r2 := NewRecorder(4)
	r2.Record(5)
	_ = r2.Summary()
	r2.Record(1)
	if s := r2.Summary(); s.Min != 1 || s.Max != 5 || s.Count != 2 {
		t.Errorf("after re-summary %+v", s)
	}
}

func TestQuantileString(t *testing.T) {
	for q, want := range map[Quantile]string{P50: "p50", P90: "p90", P99: "p99", P999: "p99.9", P9999: "p99.99"} {
		if q.String() != want {
			t.Errorf("%d ppm prints %q, want %q", q, q.String(), want)
		}
	}
}

func TestSummaryAtUnknownQuantilePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("At(p75) on a summary without it did not panic")
		}
	}()
	Summarize(nanos(1, 2), 0).At(750_000)
}
