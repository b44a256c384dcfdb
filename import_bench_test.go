package rolloutdb_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
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
// result and an answer; BenchmarkImportCodex: a Codex rollout of as many
// turns, each a turn context, a prompt, reasoning, a function call and its
// output, token counts and an answer. Reported: the first import's source
// MB/s and turns/s (read, write, publish: the projector may still lag),
// the same until state.db and the search index have applied it
// (settled-MB/s), the peak live heap during an import per source byte
// (peak-heap/src-byte, in an untimed import of its own), and the time of importing it
// again (nothing new: it reads the file and compares ids).
func BenchmarkImportClaudeCode(b *testing.B) {
	benchImport(b, "claude-code", writeClaudeTranscript)
}

func BenchmarkImportCodex(b *testing.B) {
	benchImport(b, "codex", writeCodexRollout)
}

func benchImport(b *testing.B, format string, write func(testing.TB, string, int) int64) {
	turns := 2000
	if v, err := strconv.Atoi(os.Getenv("ROLLOUTDB_BENCH_IMPORT_TURNS")); err == nil && v > 0 {
		turns = v
	}
	src := filepath.Join(b.TempDir(), "bench-session.jsonl")
	size := write(b, src, turns)
	imp := func(db *rolloutdb.DB) rolloutdb.ImportResult {
		r, err := importer.Open(format, src)
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		res, err := db.Import(ctx, r, rolloutdb.ImportOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return res
	}
	for b.Loop() {
		b.StopTimer()
		db, err := rolloutdb.Open(ctx, b.TempDir(), rolloutdb.Options{})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		b.StartTimer()
		start := time.Now()
		if res := imp(db); res.Turns != turns {
			b.Fatalf("import: %d turns of %d", res.Turns, turns)
		}
		first := time.Since(start)
		if err := db.Settle(ctx); err != nil {
			b.Fatal(err)
		}
		settled := time.Since(start)
		start = time.Now()
		if again := imp(db); again.Turns != 0 || again.Existing != turns {
			b.Fatalf("second import: %+v", again)
		}
		second := time.Since(start)
		b.StopTimer()
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		// The heap, in an import of its own: the sampler's collections
		// would slow the timed one.
		db, err = rolloutdb.Open(ctx, b.TempDir(), rolloutdb.Options{})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		base := liveHeap()
		stop := samplePeakHeap()
		imp(db)
		peak := stop()
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(size)/1e6/first.Seconds(), "MB/s")
		b.ReportMetric(float64(size)/1e6/settled.Seconds(), "settled-MB/s")
		b.ReportMetric(float64(turns)/first.Seconds(), "turns/s")
		b.ReportMetric(float64(peak-min(peak, base))/float64(size), "peak-heap/src-byte")
		b.ReportMetric(float64(second.Milliseconds()), "reimport-ms")
		b.StartTimer()
	}
}

// liveHeap is the heap live after the last GC.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// samplePeakHeap collects and reads liveHeap every 25 ms until the
// returned function is called, which returns the highest value seen: the
// heap the import keeps reachable, not what a collection running beside it
// had yet to free.
func samplePeakHeap() func() uint64 {
	done := make(chan struct{})
	peak := make(chan uint64)
	go func() {
		var m uint64
		t := time.NewTicker(25 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				runtime.GC()
				peak <- max(m, liveHeap())
				return
			case <-t.C:
				runtime.GC()
				m = max(m, liveHeap())
			}
		}
	}()
	return func() uint64 { close(done); return <-peak }
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

// writeCodexRollout writes a Codex rollout of n turns and returns its size.
func writeCodexRollout(tb testing.TB, path string, n int) int64 {
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriter(f)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	line := func(typ, payload string) {
		at = at.Add(time.Second)
		fmt.Fprintf(w, `{"timestamp":"%s","type":"%s","payload":%s}`+"\n", at.Format(time.RFC3339Nano), typ, payload)
	}
	line("session_meta", `{"id":"019a2d7a-41c4-78b1-b7cc-a45d62a89cd5","timestamp":"2026-01-01T00:00:00Z","cwd":"/home/dev/app","originator":"codex_cli_rs","cli_version":"0.65.0","source":"cli"}`)
	out := strings.Repeat("x", 1024)
	for i := range n {
		line("turn_context", `{"cwd":"/home/dev/app","approval_policy":"on-request","sandbox_policy":{"type":"workspace-write","network_access":false},"model":"gpt-5-codex","effort":"medium","summary":"auto"}`)
		line("response_item", fmt.Sprintf(`{"type":"message","role":"user","content":[{"type":"input_text","text":"question %d about the parser"}]}`, i))
		line("event_msg", fmt.Sprintf(`{"type":"user_message","message":"question %d about the parser","kind":"plain"}`, i))
		line("response_item", `{"type":"reasoning","summary":[{"type":"summary_text","text":"**Reading the parser**"}],"encrypted_content":"gAAAAB"}`)
		line("response_item", fmt.Sprintf(`{"type":"function_call","name":"shell","arguments":"{\"command\":[\"cat\",\"f%d.go\"]}","call_id":"call_%d"}`, i, i))
		line("response_item", fmt.Sprintf(`{"type":"function_call_output","call_id":"call_%d","output":"%s"}`, i, out))
		line("event_msg", `{"type":"token_count","info":{"total_token_usage":{"input_tokens":1200,"output_tokens":30,"total_tokens":1230},"last_token_usage":{"input_tokens":1200,"cached_input_tokens":100,"output_tokens":30,"reasoning_output_tokens":10,"total_tokens":1230}}}`)
		line("response_item", fmt.Sprintf(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"answer %d: the parser is fine"}]}`, i))
		line("event_msg", fmt.Sprintf(`{"type":"task_complete","last_agent_message":"answer %d"}`, i))
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
