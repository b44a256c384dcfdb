package projection

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkProjectorUnderLoad: 64 threads append whole turns (3 records a
// frame) as fast as their fsyncs allow, with a Flush (what a read waits
// for) every 2 s, ROLLOUTDB_BENCH_FLUSHES times (default 1), each logged
// with how long it waited. It reports the append rate, and the
// projector's (everything appended, over the load and the drain after it).
// ROLLOUTDB_BENCH_MAXLAG, a positive count, sets Options.MaxLag.
func BenchmarkProjectorUnderLoad(b *testing.B) {
	for range b.N {
		dir := b.TempDir()
		root := filepath.Join(dir, ".craft")
		if err := os.MkdirAll(filepath.Join(root, "threads", "active"), 0o755); err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		s, err := Open(ctx, Options{Path: filepath.Join(root, "state.db"), Root: root, WorkspaceID: testWorkspace, MaxLag: benchSize("ROLLOUTDB_BENCH_MAXLAG", 0)})
		if err != nil {
			b.Fatal(err)
		}
		f := &benchFixture{root: root, store: s}
		start := time.Now()
		stop := appendLoad(b, f, 64)
		for i := range benchSize("ROLLOUTDB_BENCH_FLUSHES", 1) {
			time.Sleep(2 * time.Second)
			t0 := time.Now()
			if err := s.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.Logf("flush %d after %v: %v", i, time.Since(start).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
		}
		frames := stop()
		load := time.Since(start)
		if err := s.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		total := time.Since(start)
		b.ReportMetric(float64(frames*3)/load.Seconds(), "appended-rec/s")
		b.ReportMetric(float64(frames*3)/total.Seconds(), "projected-rec/s")
		b.ReportMetric((total - load).Seconds(), "drain-s")
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
