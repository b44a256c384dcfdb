package fleet_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/follow"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// BenchmarkFollow is follow across hosts: host A appends 1 KiB records
// to one thread, one append at a time, b.N of them; on host B (another
// Log: its own pool and listening connection), 1 or 64 followers of the
// thread note when they yield each record. Reported: how long after its
// append returned on A a follower on B yielded a record (0 when it did
// before), p50 and p99 over every follower's records, and A's append
// rate. Both hosts are in this process, on a loopback PostgreSQL with
// fsync on.
func BenchmarkFollow(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprint("followers-", n), func(b *testing.B) {
			dsn := testDSN(b)
			a := openLog(b, dsn, "a", fleet.Options{})
			bl := openLog(b, dsn, "b", fleet.Options{})
			th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
			if err != nil {
				b.Fatal(err)
			}
			defer th.Close()
			recs := make([]rollout.Record, b.N)
			for i := range recs {
				recs[i] = benchRecord(b, i)
			}
			acked := make([]time.Time, b.N)
			seen := make([][]time.Time, n)
			last := uint64(b.N) + 1
			var wg sync.WaitGroup
			for k := range n {
				f, err := bl.Follow(ctx, "t1", follow.Options{AfterSeq: 1})
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				seen[k] = make([]time.Time, 0, b.N)
				wg.Go(func() {
					for f.Next() {
						seen[k] = append(seen[k], time.Now())
						if f.Record().Seq == last {
							return
						}
					}
					b.Error(f.Err())
				})
			}
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				if _, err := th.Append(ctx, recs[i:i+1], rollout.AppendOptions{}); err != nil {
					b.Fatal(err)
				}
				acked[i] = time.Now()
			}
			elapsed := time.Since(start)
			wg.Wait()
			b.StopTimer()
			var lat []time.Duration
			for k := range n {
				for i, at := range seen[k] {
					lat = append(lat, max(0, at.Sub(acked[i])))
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "appends/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
