package rollout

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram is a snapshot of observations counted in power-of-two
// buckets: Counts[0] counts values up to 1 (in the histogram's unit),
// Counts[i] values in (2^(i-1), 2^i]; the last bucket takes everything
// larger.
type Histogram struct {
	Counts []int64 `json:"counts"`
	Count  int64   `json:"count"`
	Sum    int64   `json:"sum"`
}

// UpperBound is the largest value bucket i counts (the last bucket has
// none: it is unbounded).
func (h Histogram) UpperBound(i int) int64 { return int64(1) << i }

// Quantile estimates the q-quantile (0 < q <= 1) as the upper bound of
// the bucket that holds it; 0 with no observations.
func (h Histogram) Quantile(q float64) int64 {
	if h.Count == 0 {
		return 0
	}
	want := int64(q * float64(h.Count))
	var n int64
	for i, c := range h.Counts {
		if n += c; n >= want && c > 0 {
			return h.UpperBound(i)
		}
	}
	return h.UpperBound(len(h.Counts) - 1)
}

const histBuckets = 32

// A Recorder counts observations into the buckets of a Histogram; it is
// safe for concurrent use and lock-free. The zero value is ready.
type Recorder struct {
	b     [histBuckets]atomic.Int64
	count atomic.Int64
	sum   atomic.Int64
}

// Observe counts one value.
func (h *Recorder) Observe(v int64) {
	i := 0
	if v > 1 {
		i = min(bits.Len64(uint64(v-1)), histBuckets-1)
	}
	h.b[i].Add(1)
	h.count.Add(1)
	h.sum.Add(v)
}

// ObserveSince counts the microseconds since t0.
func (h *Recorder) ObserveSince(t0 time.Time) { h.Observe(time.Since(t0).Microseconds()) }

// Snapshot returns the counts so far.
func (h *Recorder) Snapshot() Histogram {
	out := Histogram{Counts: make([]int64, histBuckets), Count: h.count.Load(), Sum: h.sum.Load()}
	for i := range h.b {
		out.Counts[i] = h.b[i].Load()
	}
	return out
}

// Metrics counts the rollout fdatasyncs of the writers that share it:
// pass one to every writer of a process (Options.Metrics) and read it with
// Snapshot. The journal counts its own (JournalMetrics).
type Metrics struct {
	syncs    Recorder // rollout fdatasyncs, µs
	failures atomic.Int64
}

// WriterMetrics is a snapshot of Metrics.
type WriterMetrics struct {
	// Syncs is the latency of the rollouts' own fdatasyncs, in µs (an
	// append through the journal syncs the journal instead:
	// JournalMetrics.SyncLatency).
	Syncs Histogram
	// Failures counts failed syncs.
	Failures int64
}

// Snapshot returns the counters; a nil Metrics has none.
func (m *Metrics) Snapshot() WriterMetrics {
	if m == nil {
		return WriterMetrics{Syncs: Histogram{Counts: make([]int64, histBuckets)}}
	}
	return WriterMetrics{Syncs: m.syncs.Snapshot(), Failures: m.failures.Load()}
}
