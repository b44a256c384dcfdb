package fleet_test

import (
	"fmt"
	"os"
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
			l, err := fleet.Open(ctx, dsn, fleet.Options{Host: fmt.Sprint("bench-", h), NoNotify: os.Getenv("FLEET_BENCH_NONOTIFY") != ""})
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

// BenchmarkHandOff is a graceful hand-off of a 1,000-turn thread (5
// records a turn, 1 KiB each) between two hosts: Close on one, Open on the
// other, and a read of the thread's last 64 KiB (what a resume from a late
// checkpoint reads). It reports p50 and p99.
func BenchmarkHandOff(b *testing.B) {
	dsn := testDSN(b)
	hosts := make([]*fleet.Log, 2)
	for i := range hosts {
		l, err := fleet.Open(ctx, dsn, fleet.Options{Host: fmt.Sprint("handoff-", i)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		hosts[i] = l
	}
	th, err := hosts[0].Create(ctx, rollout.ThreadOpened{ThreadID: "long"})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 1000 {
		recs := make([]rollout.Record, 5)
		for k := range recs {
			recs[k] = benchRecord(b, i*5+k)
		}
		if _, err := th.Append(ctx, recs, rollout.AppendOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	buf := make([]byte, 64<<10)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if err := th.Close(); err != nil {
			b.Fatal(err)
		}
		th, err = hosts[(i+1)%2].Open(ctx, "long", "active")
		if err != nil {
			b.Fatal(err)
		}
		s, err := hosts[(i+1)%2].Read(ctx, "long")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.ReadAt(buf, s.Size()-int64(len(buf))); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op")
	th.Close()
}

// BenchmarkBytesPerRecord writes 20,000 records of 1 KiB over 64 threads
// and reports PostgreSQL's bytes for the frames table (heap, TOAST and
// index) against the frames' own bytes: what the rollouts would hold.
// It measures once, whatever b.N (run it with -benchtime 1x).
func BenchmarkBytesPerRecord(b *testing.B) {
	dsn := testDSN(b)
	l, err := fleet.Open(ctx, dsn, fleet.Options{Host: "bytes"})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var ths []*fleet.Thread
	for i := range 64 {
		th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: fmt.Sprint("t", i)})
		if err != nil {
			b.Fatal(err)
		}
		ths = append(ths, th)
	}
	var wg sync.WaitGroup
	for i, th := range ths {
		wg.Go(func() {
			for k := range 20000 / 64 {
				if _, err := th.Append(ctx, []rollout.Record{benchRecord(b, i*1000+k)}, rollout.AppendOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `VACUUM ANALYZE rolloutdb.frames`); err != nil {
		b.Fatal(err)
	}
	var pg, raw int64
	if err := conn.QueryRow(ctx, `SELECT pg_total_relation_size('rolloutdb.frames'), (SELECT sum(octet_length(data)) FROM rolloutdb.frames)`).Scan(&pg, &raw); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(pg)/float64(raw), "pg/rollout")
	b.ReportMetric(float64(raw)/20064, "rollout-B/rec")
	b.ReportMetric(0, "ns/op")
}
