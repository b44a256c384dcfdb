package rolloutdb_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// BenchmarkFollow: one goroutine appends items (SyncAlways, 512 B) into an
// open turn, in rounds of 500, with 0, 1 and 64 followers in turn, b.N
// times over (the disk's speed drifts: the rounds interleave, in an order
// that turns, so that each configuration meets it alike). Reported per
// configuration: the append rate against the rate with no follower in the
// same run (x-rate: all rounds; x-med: the median of each iteration's
// ratio to its own round with no follower), and how long
// after its append returned a follower saw each record (p50, p99; 0 when
// it saw it before the call returned). "cross" followers belong to a
// second DB on the workspace, which does not write the thread, as
// another process's would: they learn of appends from file-change
// notification and sync the bytes themselves.
func BenchmarkFollow(b *testing.B) {
	for _, cross := range []bool{false, true} {
		name := "in-process"
		if cross {
			name = "cross-process"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			fdb := db
			if cross {
				if fdb, err = rolloutdb.Open(ctx, dir, rolloutdb.Options{}); err != nil {
					b.Fatal(err)
				}
				defer fdb.Close()
			}
			th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "b"})
			if err != nil {
				b.Fatal(err)
			}
			turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "go"})
			if err != nil {
				b.Fatal(err)
			}
			item := rollout.Item{Type: rollout.ItemReasoning, Text: string(make([]byte, 512))}
			const round = 500
			configs := []int{0, 1, 64}
			elapsed := make([]time.Duration, len(configs))
			lats := make([][]time.Duration, len(configs))
			// Per iteration, each configuration's rate against none's in
			// the same iteration: paired, so the disk's drift between
			// iterations cancels (reported as the median of the pairs).
			pairs := make([][]float64, len(configs))
			b.ResetTimer()
			for iter := range b.N {
				var took [3]time.Duration
				// The order turns each iteration, so that no configuration
				// always runs right after another.
				for k := range configs {
					ci := (k + iter) % len(configs)
					n := configs[ci]
					first := th.LastSeq() + 1
					last := first + round - 1
					acked := make([]time.Time, round)
					ready := make(chan struct{})
					var mu sync.Mutex
					var wg sync.WaitGroup
					var fs []*rolloutdb.Follower
					for range n {
						f, err := fdb.Follow(ctx, "b", rolloutdb.FollowOptions{AfterSeq: first - 1})
						if err != nil {
							b.Fatal(err)
						}
						fs = append(fs, f)
						wg.Add(1)
						go func() {
							defer wg.Done()
							seen := make([]time.Time, 0, round)
							for f.Next() {
								if s := f.Record().Seq; s >= first && s <= last {
									seen = append(seen, time.Now())
									if s == last {
										break
									}
								}
							}
							<-ready
							mu.Lock()
							for i, t := range seen {
								lats[ci] = append(lats[ci], max(0, t.Sub(acked[i])))
							}
							mu.Unlock()
						}()
					}
					if n > 0 {
						// The followers open the rollout and wait, as long-lived
						// ones would be, before the timed appends.
						time.Sleep(50 * time.Millisecond)
					}
					start := time.Now()
					for i := range round {
						if err := turn.AppendItem(ctx, item); err != nil {
							b.Fatal(err)
						}
						acked[i] = time.Now()
					}
					took[ci] = time.Since(start)
					elapsed[ci] += took[ci]
					close(ready)
					wg.Wait()
					for _, f := range fs {
						f.Close()
					}
				}
				for ci := range configs {
					pairs[ci] = append(pairs[ci], took[0].Seconds()/took[ci].Seconds())
				}
			}
			b.StopTimer()
			base := float64(b.N*round) / elapsed[0].Seconds()
			b.ReportMetric(base, "appends/s-0")
			for ci, n := range configs[1:] {
				ci++
				rate := float64(b.N*round) / elapsed[ci].Seconds()
				b.ReportMetric(rate/base, fmt.Sprintf("x-rate-%d", n))
				slices.Sort(pairs[ci])
				b.ReportMetric(pairs[ci][len(pairs[ci])/2], fmt.Sprintf("x-med-%d", n))
				l := lats[ci]
				slices.Sort(l)
				b.ReportMetric(float64(l[len(l)/2].Microseconds()), fmt.Sprintf("p50-µs-%d", n))
				b.ReportMetric(float64(l[len(l)*99/100].Microseconds()), fmt.Sprintf("p99-µs-%d", n))
			}
		})
	}
}
