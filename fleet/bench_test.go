package fleet_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/journal"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// benchRecord is a 1 KiB agent message.
func benchRecord(b *testing.B, i int) rollout.Record {
	text := fmt.Sprintf("step %d: ", i) + strings.Repeat("the agent inspected the handler and found the nil map write. ", 17)
	rec, err := rollout.NewRecord(rollout.KindItemAppended, "", rollout.Item{Type: rollout.ItemAgentMessage, Text: text[:1000]})
	if err != nil {
		b.Fatal(err)
	}
	return rec
}

// appender is one thread's append, whatever keeps it.
type appender func(rec rollout.Record) error

// runAcks runs b.N appends of one record spread over the appenders, one
// goroutine each, and reports the acknowledgement latency's p50 and p99
// and the records per second.
func runAcks(b *testing.B, apps []appender) {
	per := max(b.N/len(apps), 1)
	lat := make([][]time.Duration, len(apps))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for g, app := range apps {
		wg.Go(func() {
			for i := range per {
				rec := benchRecord(b, i)
				t0 := time.Now()
				if err := app(rec); err != nil {
					b.Error(err)
					return
				}
				lat[g] = append(lat[g], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "records/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkAck is the acknowledgement of one 1 KiB record with 64 threads
// appending at once: over 4 fleet hosts (four Logs in this process, each
// with its own pool and commit rounds) on a loopback PostgreSQL with
// fsync on; the local journal on this machine's disk; and a naive writer
// that inserts each record as a row in its own transaction.
func BenchmarkAck(b *testing.B) {
	const threads, hosts = 64, 4
	b.Run("fleet", func(b *testing.B) {
		dsn := testDSN(b)
		var apps []appender
		var logs []*fleet.Log
		for h := range hosts {
			l, err := fleet.Open(ctx, dsn, fleet.Options{Host: fmt.Sprint("bench-", h)})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			logs = append(logs, l)
			for i := range threads / hosts {
				th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: fmt.Sprintf("h%d-t%d", h, i)})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { th.Close() })
				apps = append(apps, func(rec rollout.Record) error {
					_, err := th.Append(ctx, []rollout.Record{rec}, rollout.AppendOptions{})
					return err
				})
			}
		}
		runAcks(b, apps)
		var rounds, frames int64
		for _, l := range logs {
			m := l.Metrics()
			rounds, frames = rounds+m.Rounds, frames+m.Frames
		}
		if rounds > 0 {
			b.ReportMetric(float64(frames)/float64(rounds), "frames/round")
		}
	})
	b.Run("local-journal", func(b *testing.B) {
		root := b.TempDir()
		j, err := journal.Open(ctx, root, journal.Options{})
		if err != nil {
			b.Fatal(err)
		}
		g := rollout.NewLogGroup(j)
		var apps []appender
		var ws []*rollout.Writer
		for i := range threads {
			id := fmt.Sprintf("t%d", i)
			w, err := rollout.Create(ctx, filepath.Join(root, id+rollout.RolloutExt), rollout.ThreadOpened{ThreadID: id},
				rollout.Options{Log: g, Sync: rollout.SyncAlways})
			if err != nil {
				b.Fatal(err)
			}
			ws = append(ws, w)
			apps = append(apps, func(rec rollout.Record) error {
				_, err := w.Append(ctx, []rollout.Record{rec}, rollout.AppendOptions{})
				return err
			})
		}
		runAcks(b, apps)
		for _, w := range ws {
			w.Close()
		}
		g.Close()
		j.Close()
	})
	b.Run("naive-row-per-record", func(b *testing.B) {
		dsn := testDSN(b)
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `CREATE TABLE records (thread int, seq bigint, body bytea, PRIMARY KEY (thread, seq))`); err != nil {
			b.Fatal(err)
		}
		conn.Close(ctx)
		var apps []appender
		for i := range threads {
			c, err := pgx.Connect(ctx, dsn)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close(ctx) })
			seq := int64(0)
			apps = append(apps, func(rec rollout.Record) error {
				seq++
				_, err := c.Exec(ctx, `INSERT INTO records VALUES ($1, $2, $3)`, i, seq, rec.Body)
				return err
			})
		}
		runAcks(b, apps)
	})
}
