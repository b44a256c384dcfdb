package rollout

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/vfs"
)

// Benchmarks report their figure with b.ReportMetric and, where the issue
// names a baseline, measure it in the same run: durable appends against a
// JSONL file with one fsync per record, reading against encoding/json over
// the same records as JSONL. docs/BENCHMARKS.md records the results.

// benchItem is a realistic ~1 KiB agent message.
func benchItem(i int) Item {
	text := fmt.Sprintf("step %d: ", i) + strings.Repeat("the agent inspected the handler and found the nil map write. ", 17)
	return Item{ID: NewID(), Type: ItemAgentMessage, Status: ItemCompleted, Text: text[:1000]}
}

// jsonlRecord is the baseline's line: the same envelope and body, as JSON.
type jsonlRecord struct {
	Seq  uint64    `json:"seq"`
	Kind Kind      `json:"kind"`
	Time time.Time `json:"time"`
	Turn string    `json:"turn"`
	Item Item      `json:"item"`
}

// jsonlFile is what most agent tools do: append a line, fsync, per record.
type jsonlFile struct {
	mu  sync.Mutex
	f   vfs.File // an OS file: Sync is fdatasync
	end int64
	seq uint64
}

func (j *jsonlFile) append(it Item) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.seq++
	b, err := json.Marshal(jsonlRecord{Seq: j.seq, Kind: KindItemAppended, Time: time.Now(), Turn: "turn", Item: it})
	if err != nil {
		return err
	}
	n, err := j.f.WriteAt(append(b, '\n'), j.end)
	if err != nil {
		return err
	}
	j.end += int64(n)
	return j.f.Sync()
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

// BenchmarkDurableAppend: 1 KiB records, SyncAlways, 1/8/64 concurrent
// appenders on one thread, against a JSONL file with one fsync per record
// driven the same way. Reports both rates and their ratio.
func BenchmarkDurableAppend(b *testing.B) {
	for _, writers := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			dir := b.TempDir()
			w, _ := newRollout(b, vfs.OS, dir, "bench", Options{Sync: SyncAlways})
			defer w.Close()
			jf, err := vfs.OS.Create(filepath.Join(dir, "bench.jsonl"))
			if err != nil {
				b.Fatal(err)
			}
			defer jf.Close()
			j := &jsonlFile{f: jf}
			items := make([]Item, 256)
			for i := range items {
				items[i] = benchItem(i)
			}
			n := max(b.N, 64)
			b.ResetTimer()
			ours := runConcurrent(b, n, writers, func(i int) error {
				r, err := NewRecord(KindItemAppended, "turn", items[i%len(items)])
				if err != nil {
					return err
				}
				_, err = w.Append(bg, []Record{r}, AppendOptions{})
				return err
			})
			base := runConcurrent(b, n, writers, func(i int) error { return j.append(items[i%len(items)]) })
			b.StopTimer()
			oursRate := float64(n) / ours.Seconds()
			baseRate := float64(n) / base.Seconds()
			b.ReportMetric(oursRate, "records/s")
			b.ReportMetric(baseRate, "jsonl-fsync-records/s")
			b.ReportMetric(oursRate/baseRate, "x-vs-jsonl")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkAppendNoSync: the encoder and writer without fsync, MB/s of file.
func BenchmarkAppendNoSync(b *testing.B) {
	dir := b.TempDir()
	w, _ := newRollout(b, vfs.OS, dir, "bench", Options{Sync: SyncNever})
	defer w.Close()
	recs := make([]Record, 256)
	for i := range recs {
		recs[i], _ = NewRecord(KindItemAppended, "turn", benchItem(i))
	}
	start := w.End()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := recs[i%len(recs)]
		r.Seq, r.Time = 0, time.Time{}
		if _, err := w.Append(bg, []Record{r}, AppendOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.SetBytes((w.End() - start) / int64(b.N))
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// readCorpus is a large rollout and the same records as JSONL.
var readCorpus struct {
	once   sync.Once
	roll   []byte
	jsonl  []byte
	nRecs  int
	hasErr error
}

func loadReadCorpus(b *testing.B) {
	readCorpus.once.Do(func() {
		dir, err := os.MkdirTemp("", "rolloutbench")
		if err != nil {
			readCorpus.hasErr = err
			return
		}
		defer os.RemoveAll(dir)
		w, path := newRollout(b, vfs.OS, dir, "bench", Options{Sync: SyncNever})
		var jl bytes.Buffer
		const turns = 20000
		for t := 0; t < turns; t++ {
			turn := NewID()
			// A turn: user message, two items, and a completion, batched
			// like a commit.
			its := []Item{benchItem(t), benchItem(t + 1), benchItem(t + 2)}
			its[0].Type, its[0].Text = ItemUserMessage, its[0].Text[:200]
			var recs []Record
			for _, it := range its {
				r, _ := NewRecord(KindItemAppended, turn, it)
				recs = append(recs, r)
			}
			res, err := w.Append(bg, recs, AppendOptions{})
			if err != nil {
				readCorpus.hasErr = err
				return
			}
			for i, it := range its {
				line, _ := json.Marshal(jsonlRecord{Seq: res.FirstSeq + uint64(i), Kind: KindItemAppended, Time: recs[i].Time, Turn: turn, Item: it})
				jl.Write(line)
				jl.WriteByte('\n')
			}
		}
		w.Close()
		readCorpus.roll, readCorpus.hasErr = os.ReadFile(path)
		readCorpus.jsonl = jl.Bytes()
		readCorpus.nRecs = turns*3 + 1
	})
	if readCorpus.hasErr != nil {
		b.Fatal(readCorpus.hasErr)
	}
}

// BenchmarkRead: reading a ~60 MB rollout, with and without decoding the
// bodies, against encoding/json over the same records as JSONL. MB/s is of
// each format's own bytes; records/s is the comparable figure.
func BenchmarkRead(b *testing.B) {
	loadReadCorpus(b)
	b.Run("rollout/envelopes", func(b *testing.B) {
		b.SetBytes(int64(len(readCorpus.roll)))
		for i := 0; i < b.N; i++ {
			r, _ := NewReader(bytes.NewReader(readCorpus.roll), int64(len(readCorpus.roll)), ReaderOptions{})
			n := 0
			for r.Next() {
				n++
			}
			if n != readCorpus.nRecs {
				b.Fatalf("%d records", n)
			}
		}
		b.ReportMetric(float64(readCorpus.nRecs*b.N)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("rollout/decoded", func(b *testing.B) {
		b.SetBytes(int64(len(readCorpus.roll)))
		for i := 0; i < b.N; i++ {
			r, _ := NewReader(bytes.NewReader(readCorpus.roll), int64(len(readCorpus.roll)), ReaderOptions{})
			for r.Next() {
				rec := r.Record()
				if _, err := rec.DecodeBody(); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(readCorpus.nRecs*b.N)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("jsonl/encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(readCorpus.jsonl)))
		for i := 0; i < b.N; i++ {
			sc := bufio.NewScanner(bytes.NewReader(readCorpus.jsonl))
			sc.Buffer(make([]byte, 1<<20), 16<<20)
			n := 0
			for sc.Scan() {
				var rec jsonlRecord
				if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
					b.Fatal(err)
				}
				n++
			}
			if n != readCorpus.nRecs-1 {
				b.Fatalf("%d lines", n)
			}
		}
		b.ReportMetric(float64((readCorpus.nRecs-1)*b.N)/b.Elapsed().Seconds(), "records/s")
	})
}
