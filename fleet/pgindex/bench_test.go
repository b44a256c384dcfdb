package pgindex

import (
	"fmt"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// BenchmarkApply reports how fast the applier projects published frames
// (records/s from the first Enqueue to Settle: 16 threads, 20 turns of 8
// records each in 3 frames) and how fast a rebuild reads them back from
// the log (rebuild-records/s), on the test cluster.
func BenchmarkApply(b *testing.B) {
	w := newWorld(b)
	w.feed, w.keep = false, true
	var ids []string
	for i := range 16 {
		id := fmt.Sprint("b", i)
		ids = append(ids, id)
		w.create(id, rollout.Source{})
		for j := range 20 {
			w.turn(id, fmt.Sprint("a", j), fmt.Sprintf("question %d of thread %d", j, i))
		}
	}
	records := 0
	for _, bt := range w.kept {
		records += len(bt.Records)
	}
	var applied, rebuilt time.Duration
	for b.Loop() {
		s := w.openIndex(w.log, Options{})
		if err := s.Forget(ctx, ids...); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		for _, bt := range w.kept {
			s.Enqueue(bt)
		}
		if err := s.Settle(ctx); err != nil {
			b.Fatal(err)
		}
		applied += time.Since(t0)
		rep, err := s.Rebuild(ctx, projection.RebuildOptions{Restart: true})
		if err != nil {
			b.Fatal(err)
		}
		rebuilt += rep.Elapsed
		_ = s.Close()
	}
	b.ReportMetric(float64(records*b.N)/applied.Seconds(), "records/s")
	b.ReportMetric(float64(records*b.N)/rebuilt.Seconds(), "rebuild-records/s")
}
