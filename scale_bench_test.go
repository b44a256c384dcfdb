package rolloutdb_test

import (
	"fmt"

	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// BenchmarkPerThreadAtScale times the operations on one thread of a
// workspace of ROLLOUTDB_BENCH_SCALE_THREADS threads of 3 turns each
// (default 1,000; the figure is at 100,000, a build of about two
// minutes): each should cost the same whatever the workspace's size, so
// run it at both and compare. Workspace-wide counts (Summary) and a page
// of List are timed too. The workspace is written through the public API
// with SyncNever, then reopened.
func BenchmarkPerThreadAtScale(b *testing.B) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("ROLLOUTDB_BENCH_SCALE_THREADS")); err == nil && v > 0 {
		n = v
	}
	dir := b.TempDir()
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{Sync: rollout.SyncNever})
	if err != nil {
		b.Fatal(err)
	}
	id := func(i int) string { return fmt.Sprintf("t%07d", i) }
	t0 := time.Now()
	for i := range n {
		th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: id(i)})
		if err != nil {
			b.Fatal(err)
		}
		for j := range 3 {
			tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: fmt.Sprintf("question %d of thread %d", j, i)})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tu.Commit(ctx, rolloutdb.Commit{Items: []rollout.Item{{Type: rollout.ItemAgentMessage, Text: "an answer"}}}); err != nil {
				b.Fatal(err)
			}
		}
		if err := th.Close(); err != nil {
			b.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d threads written in %s", n, time.Since(t0).Round(time.Millisecond))
	if db, err = rolloutdb.Open(ctx, dir, rolloutdb.Options{}); err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	target := id(n / 2)
	forks := 0
	ops := []struct {
		name string
		op   func(i int) error
	}{
		{"thread-info", func(int) error { _, err := db.ThreadInfo(ctx, target); return err }},
		{"turns-page", func(int) error { _, err := db.Turns(ctx, target, 1, 3); return err }},
		{"resume", func(int) error {
			th, _, err := db.Resume(ctx, target, rolloutdb.ResumeOptions{})
			if err != nil {
				return err
			}
			return th.Close()
		}},
		{"follow-first-record", func(int) error {
			f, err := db.Follow(ctx, target, rolloutdb.FollowOptions{})
			if err != nil {
				return err
			}
			defer f.Close()
			if !f.Next() {
				return fmt.Errorf("no record: %v", f.Err())
			}
			return nil
		}},
		{"set-name", func(i int) error {
			th, err := db.OpenThread(ctx, target)
			if err != nil {
				return err
			}
			name := fmt.Sprintf("name %d", i)
			_, err = th.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{Name: &name})
			return errors.CombineErrors(err, th.Close())
		}},
		{"fork", func(int) error {
			forks++
			th, err := db.Fork(ctx, target, rolloutdb.ForkOptions{ID: fmt.Sprintf("fork-%d", forks)})
			if err != nil {
				return err
			}
			return th.Close()
		}},
		{"archive-restore", func(int) error {
			if _, err := db.Archive(ctx, target, "bench"); err != nil {
				return err
			}
			_, err := db.Restore(ctx, target)
			return err
		}},
		{"list-first-page", func(int) error { _, err := db.List(ctx, projection.ListOptions{Limit: 50}); return err }},
		{"summary", func(int) error { _, err := db.Summary(ctx); return err }},
	}
	for _, o := range ops {
		b.Run(o.name, func(b *testing.B) {
			start := time.Now()
			for i := range b.N {
				if err := o.op(i); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/op")
			b.ReportMetric(float64(n), "threads")
		})
	}
}
