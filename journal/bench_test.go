package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// benchItem is a realistic ~1 KiB agent message.
func benchItem(i int) rollout.Item {
	text := fmt.Sprintf("step %d: ", i) + strings.Repeat("the agent inspected the handler and found the nil map write. ", 17)
	return rollout.Item{ID: rollout.NewID(), Type: rollout.ItemAgentMessage, Status: rollout.ItemCompleted, Text: text[:1000]}
}

// runConcurrent runs n appends split over `writers` goroutines and returns
// the elapsed time.
func runConcurrent(b *testing.B, n, writers int, appendOne func(i int) error) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > n {
					return
				}
				if err := appendOne(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkJournal64Threads: 64 threads, one appender each, every append
// durable through the workspace journal, against the ideal group commit
// of the same records into one pre-zeroed file (no encoding, no rollouts)
// in the same run: how close the journal gets to what the disk allows.
func BenchmarkJournal64Threads(b *testing.B) {
	const threads = 64
	dir := b.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, rollout.ActiveDir), 0o755); err != nil {
		b.Fatal(err)
	}
	seg, _ := strconv.ParseInt(os.Getenv("JSEG"), 10, 64)
	j, err := Open(bg, dir, Options{SegmentSize: seg})
	if err != nil {
		b.Fatal(err)
	}
	g := rollout.NewLogGroup(j)
	ws := make([]*rollout.Writer, threads)
	for i := range ws {
		path, _ := rollout.ActivePath(dir, fmt.Sprintf("t%02d", i))
		if ws[i], err = rollout.Create(bg, path, opened(fmt.Sprintf("t%02d", i)), rollout.Options{Log: g}); err != nil {
			b.Fatal(err)
		}
	}
	n := max(b.N, threads)
	items := make([]rollout.Item, threads)
	for i := range items {
		items[i] = benchItem(i)
	}
	b.ResetTimer()
	el := runConcurrent(b, n, threads, func(i int) error {
		rec, err := rollout.NewRecord(rollout.KindItemAppended, "turn", items[i%threads])
		if err != nil {
			return err
		}
		_, err = ws[i%threads].Append(bg, []rollout.Record{rec}, rollout.AppendOptions{})
		return err
	})
	b.StopTimer()
	m := j.Metrics()
	for _, w := range ws {
		_ = w.Close()
	}
	g.Close()
	_ = j.Close()
	ideal := idealGroupCommit(b, filepath.Join(dir, "ideal"), threads, n)
	b.ReportMetric(float64(m.Entries)/float64(max(m.Commits, 1)), "entries/commit")
	b.ReportMetric(float64(m.SyncNanos)/float64(max(m.Commits, 1))/1e3, "µs/fdatasync")
	b.ReportMetric(float64(n)/el.Seconds(), "records/s")
	b.ReportMetric(ideal, "ideal-records/s")
	b.ReportMetric(float64(n)/el.Seconds()/ideal, "of-ideal")
}

// idealGroupCommit appends n 1 KiB records from `writers` goroutines into
// one pre-zeroed file: the first waiter finding no commit running writes
// all that is queued and fdatasyncs it.
func idealGroupCommit(b *testing.B, path string, writers, n int) float64 {
	f, err := vfs.OS.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := zeroFill(f, int64(n+writers)*1024); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	var queued, synced int64
	syncing := false
	start := time.Now()
	runConcurrent(b, n, writers, func(int) error {
		mu.Lock()
		defer mu.Unlock()
		queued++
		mine := queued
		for synced < mine {
			if syncing {
				cond.Wait()
				continue
			}
			syncing = true
			from, to := synced, queued
			mu.Unlock()
			_, err := f.WriteAt(make([]byte, (to-from)*1024), from*1024)
			if err == nil {
				err = f.Sync()
			}
			mu.Lock()
			syncing, synced = false, to
			cond.Broadcast()
			if err != nil {
				return err
			}
		}
		return nil
	})
	return float64(n) / time.Since(start).Seconds()
}
