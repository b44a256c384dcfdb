package rolloutdb_test

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/internal/pgtest/pgtesting"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// handOffThread makes a fleet thread of turns turns (a user message, a
// tool call and result, an answer, the model history; a post-turn
// checkpoint every 50 turns) on db, and closes it.
func handOffThread(b *testing.B, db *rolloutdb.DB, turns int) string {
	b.Helper()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range turns {
		tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: fmt.Sprintf("turn %d: run the tests of package %d", i, i%37)})
		if err != nil {
			b.Fatal(err)
		}
		c := rolloutdb.Commit{
			Items: []rollout.Item{
				{Type: rollout.ItemToolCall, CallID: fmt.Sprint("c", i), Name: "shell", Arguments: `{"cmd":"go test ./..."}`},
				{Type: rollout.ItemToolResult, CallID: fmt.Sprint("c", i), Text: "ok  \tgithub.com/example/pkg\t0.42s"},
				{Type: rollout.ItemAgentMessage, Text: fmt.Sprintf("All tests of package %d pass.", i%37)},
			},
			ModelHistory: [][]byte{[]byte(`{"role":"assistant","content":"All tests pass."}`)},
		}
		if i%50 == 49 {
			c.Checkpoint = &rollout.Checkpoint{CoveredTurn: tu.ID(), Trigger: rollout.TriggerPostTurn,
				ReplacementHistory: [][]byte{[]byte(`{"role":"system","content":"summary of the session so far"}`)}}
		}
		if _, err := tu.Commit(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
	if err := th.Close(); err != nil {
		b.Fatal(err)
	}
	return th.ID()
}

func fleetHost(b *testing.B, dsn, name string, lease time.Duration) *rolloutdb.DB {
	b.Helper()
	// Quiet: a crashed host's index warns that it cannot apply frames.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := rolloutdb.Open(ctx, dsn, rolloutdb.Options{Logger: quiet, Fleet: rolloutdb.FleetOptions{HostName: name, LeaseTTL: lease}})
	if err != nil {
		b.Fatalf("%+v", err)
	}
	return db
}

func reportPercentiles(b *testing.B, ds []time.Duration, unit string) {
	slices.Sort(ds)
	at := func(q float64) float64 { return float64(ds[min(len(ds)-1, int(q*float64(len(ds))))]) / 1e6 }
	b.ReportMetric(at(0.5), "p50-"+unit)
	b.ReportMetric(at(0.99), "p99-"+unit)
	b.ReportMetric(float64(ds[len(ds)-1])/1e6, "max-"+unit)
}

// BenchmarkFleetHandOff is the fleet's hand-off through the facade, of a
// 1,000-turn thread with a checkpoint every 50 turns, between two hosts
// (DBs of their own) on one PostgreSQL: the holder closes it, the other
// resumes it from its latest checkpoint (DB.Resume) and appends. The
// issue's figure: p99 ≤50 ms.
func BenchmarkFleetHandOff(b *testing.B) {
	dsn := pgtesting.Database(b)
	hosts := []*rolloutdb.DB{fleetHost(b, dsn, "a", 10*time.Second), fleetHost(b, dsn, "b", 10*time.Second)}
	defer func() {
		for _, h := range hosts {
			_ = h.Close()
		}
	}()
	id := handOffThread(b, hosts[0], 1000)
	th, _, err := hosts[0].Resume(ctx, id, rolloutdb.ResumeOptions{FromCheckpoint: true})
	if err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		if err := th.Close(); err != nil {
			b.Fatal(err)
		}
		next, st, err := hosts[(i+1)%2].Resume(ctx, id, rolloutdb.ResumeOptions{FromCheckpoint: true})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := next.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{AddLabels: []string{fmt.Sprint("h", i)}}); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		if st.Report.FromOffset == 0 {
			b.Fatal("resume did not start from a checkpoint")
		}
		th = next
	}
	b.StopTimer()
	_ = th.Close()
	reportPercentiles(b, ds, "ms")
}

// BenchmarkFleetCrashHandOff: the holder of the thread crashes (its lease
// neither renewed nor released); the other host tries to resume it every
// 10 ms until it may. Reported: from the crash until the resume and an
// append succeeded, and that less the lease's TTL. The figure:
// at most TTL + 200 ms.
func BenchmarkFleetCrashHandOff(b *testing.B) {
	const lease = time.Second
	dsn := pgtesting.Database(b)
	taker := fleetHost(b, dsn, "taker", lease)
	defer taker.Close()
	id := handOffThread(b, taker, 1000)
	var ds, over []time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		victim := fleetHost(b, dsn, fmt.Sprint("victim-", i), lease)
		th, _, err := victim.Resume(ctx, id, rolloutdb.ResumeOptions{FromCheckpoint: true})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := th.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{AddLabels: []string{fmt.Sprint("v", i)}}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		crashed := time.Now()
		rolloutdb.CrashForTest(victim)
		var next *rolloutdb.Thread
		for {
			next, _, err = taker.Resume(ctx, id, rolloutdb.ResumeOptions{FromCheckpoint: true})
			if err == nil {
				break
			}
			if !errors.Is(err, rolloutdb.ErrThreadLocked) {
				b.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if _, err := next.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{AddLabels: []string{fmt.Sprint("t", i)}}); err != nil {
			b.Fatal(err)
		}
		d := time.Since(crashed)
		ds, over = append(ds, d), append(over, d-lease)
		b.StopTimer()
		if err := next.Close(); err != nil {
			b.Fatal(err)
		}
		_ = victim.Close()
		b.StartTimer()
	}
	b.StopTimer()
	reportPercentiles(b, ds, "ms")
	slices.Sort(over)
	b.ReportMetric(float64(over[len(over)-1])/1e6, "max-over-ttl-ms")
}
