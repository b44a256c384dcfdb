package rolloutdb_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/importer"
)

// BenchmarkImportClaudeCode: one Claude Code transcript of
// ROLLOUTDB_BENCH_IMPORT_TURNS turns (default 2,000; BENCHMARKS.md's
// figure is 20,000), each a prompt, an assistant tool call, a 1 KiB tool
// result and an answer. Reported: the first import's source MB/s and
// turns/s, the heap the read session holds per source byte (a session is
// read whole before it is written), and the time of importing it again
// (nothing new: it reads the file and compares ids).
func BenchmarkImportClaudeCode(b *testing.B) {
	turns := 2000
	if v, err := strconv.Atoi(os.Getenv("ROLLOUTDB_BENCH_IMPORT_TURNS")); err == nil && v > 0 {
		turns = v
	}
	src := filepath.Join(b.TempDir(), "bench-session.jsonl")
	size := writeClaudeTranscript(b, src, turns)
	for b.Loop() {
		b.StopTimer()
		db, err := rolloutdb.Open(ctx, b.TempDir(), rolloutdb.Options{})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		b.StartTimer()
		start := time.Now()
		s, err := importer.Read("claude-code", src)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after) // the session read, live
		b.StartTimer()
		res, err := db.Import(ctx, s, rolloutdb.ImportOptions{})
		if err != nil || res.Turns != turns {
			b.Fatalf("import: %d turns of %d, %v", res.Turns, turns, err)
		}
		first := time.Since(start)
		s = importer.Session{}
		start = time.Now()
		s2, err := importer.Read("claude-code", src)
		if err != nil {
			b.Fatal(err)
		}
		again, err := db.Import(ctx, s2, rolloutdb.ImportOptions{})
		if err != nil || again.Turns != 0 || again.Existing != turns {
			b.Fatalf("second import: %+v, %v", again, err)
		}
		second := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(size)/1e6/first.Seconds(), "MB/s")
		b.ReportMetric(float64(turns)/first.Seconds(), "turns/s")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(size), "session-heap/src-byte")
		b.ReportMetric(float64(second.Milliseconds()), "reimport-ms")
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// writeClaudeTranscript writes a transcript of n turns and returns its size.
func writeClaudeTranscript(tb testing.TB, path string, n int) int64 {
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriter(f)
	const sid = "5b1c0f4e-9d2a-4c3b-8e7f-0a1b2c3d4e5f"
	out := strings.Repeat("x", 1024)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	parent := "null"
	line := func(uuid, typ, msg string) {
		at = at.Add(time.Second)
		fmt.Fprintf(w, `{"parentUuid":%s,"isSidechain":false,"sessionId":"%s","type":"%s","message":%s,"uuid":"%s","timestamp":"%s"}`+"\n",
			parent, sid, typ, msg, uuid, at.Format(time.RFC3339Nano))
		parent = `"` + uuid + `"`
	}
	for i := range n {
		line(fmt.Sprintf("p%d", i), "user", fmt.Sprintf(`{"role":"user","content":"question %d about the parser"}`, i))
		line(fmt.Sprintf("c%d", i), "assistant", fmt.Sprintf(`{"role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"toolu_%d","name":"Read","input":{"file_path":"f%d.go"}}],"usage":{"input_tokens":100,"output_tokens":20}}`, i, i))
		line(fmt.Sprintf("r%d", i), "user", fmt.Sprintf(`{"role":"user","content":[{"tool_use_id":"toolu_%d","type":"tool_result","content":"%s"}]}`, i, out))
		line(fmt.Sprintf("a%d", i), "assistant", fmt.Sprintf(`{"role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"answer %d: the parser is fine"}],"usage":{"input_tokens":1200,"output_tokens":30}}`, i))
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	st, err := f.Stat()
	if err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return st.Size()
}
