package importer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkReadClaudeCode reads a Claude Code transcript of
// ROLLOUTDB_BENCH_IMPORT_TURNS turns (default 2,000) through a Reader,
// against the baseline in the same run: encoding/json decoding the same
// lines into the structs the readers used before the scanner (a line, its
// message, its content blocks). Reported: source MB/s, and the peak live
// heap while reading per source byte.
func BenchmarkReadClaudeCode(b *testing.B) {
	benchRead(b, "claude-code", benchClaudeLines)
}

// BenchmarkReadCodex is the same for a Codex rollout.
func BenchmarkReadCodex(b *testing.B) {
	benchRead(b, "codex", benchCodexLines)
}

func benchRead(b *testing.B, format string, lines func(int) []string) {
	turns := 2000
	if v, err := strconv.Atoi(os.Getenv("ROLLOUTDB_BENCH_IMPORT_TURNS")); err == nil && v > 0 {
		turns = v
	}
	path := filepath.Join(b.TempDir(), "bench.jsonl")
	data := []byte(strings.Join(lines(turns), "\n") + "\n")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, read func() int) {
		for b.Loop() {
			start := time.Now()
			if n := read(); n != turns {
				b.Fatalf("%d turns, want %d", n, turns)
			}
			took := time.Since(start)
			b.StopTimer()
			// The heap, in a read of its own: the sampler's collections
			// would slow the timed one.
			runtime.GC()
			base := benchLiveHeap()
			stop := benchPeakHeap()
			read()
			peak := stop()
			b.ReportMetric(float64(len(data))/1e6/took.Seconds(), "MB/s")
			b.ReportMetric(float64(peak-min(peak, base))/float64(len(data)), "peak-heap/src-byte")
			b.StartTimer()
		}
	}
	b.Run("scanner", func(b *testing.B) {
		run(b, func() int {
			r, err := Open(format, path)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			n := 0
			for r.Next() {
				n++
			}
			if err := r.Err(); err != nil {
				b.Fatal(err)
			}
			return n
		})
	})
	b.Run("encoding-json", func(b *testing.B) {
		run(b, func() int { return decodeWithEncodingJSON(b, format, path) })
	})
}

// decodeWithEncodingJSON decodes every line of path with encoding/json as
// the readers did before the scanner, and counts the prompts.
func decodeWithEncodingJSON(b *testing.B, format, path string) int {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	n := 0
	for sc.Scan() {
		raw := bytes.TrimSpace(sc.Bytes())
		switch format {
		case "claude-code":
			var l struct {
				Type, UUID, SessionID, Timestamp string
				ParentUUID                       *string         `json:"parentUuid"`
				Message                          json.RawMessage `json:"message"`
			}
			if json.Unmarshal(raw, &l) != nil {
				b.Fatal("not JSON")
			}
			var m struct {
				ID, Role, Model string
				StopReason      string          `json:"stop_reason"`
				Content         json.RawMessage `json:"content"`
				Usage           *struct {
					Input  int64 `json:"input_tokens"`
					Output int64 `json:"output_tokens"`
				} `json:"usage"`
			}
			if json.Unmarshal(l.Message, &m) != nil {
				b.Fatal("message")
			}
			if len(m.Content) > 0 && m.Content[0] == '"' {
				var s string
				_ = json.Unmarshal(m.Content, &s)
				if l.Type == "user" {
					n++
				}
				continue
			}
			var blocks []struct {
				Type, Text, Thinking, ID, Name string
				ToolUseID                      string          `json:"tool_use_id"`
				Input                          json.RawMessage `json:"input"`
				Content                        json.RawMessage `json:"content"`
			}
			_ = json.Unmarshal(m.Content, &blocks)
		case "codex":
			var l struct {
				Timestamp, Type string
				Payload         json.RawMessage
			}
			if json.Unmarshal(raw, &l) != nil {
				b.Fatal("not JSON")
			}
			var it struct {
				Type, Role, Name, Arguments, CallID, Model string
				Content                                    []struct{ Type, Text string }
				Output                                     json.RawMessage
				Info                                       *struct {
					Last *struct{ InputTokens, OutputTokens int64 } `json:"last_token_usage"`
				}
			}
			_ = json.Unmarshal(l.Payload, &it)
			if l.Type == "response_item" && it.Type == "message" && it.Role == "user" {
				n++
			}
		}
	}
	return n
}

func benchLiveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// benchPeakHeap collects and reads the live heap every 25 ms until the
// returned function is called, which returns the highest value seen.
func benchPeakHeap() func() uint64 {
	done, peak := make(chan struct{}), make(chan uint64)
	go func() {
		var m uint64
		t := time.NewTicker(25 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				runtime.GC()
				peak <- max(m, benchLiveHeap())
				return
			case <-t.C:
				runtime.GC()
				m = max(m, benchLiveHeap())
			}
		}
	}()
	return func() uint64 { close(done); return <-peak }
}

// benchClaudeLines is a transcript of n turns, each a prompt, a tool call,
// a 1 KiB tool result and an answer.
func benchClaudeLines(n int) []string {
	const sid = "5b1c0f4e-9d2a-4c3b-8e7f-0a1b2c3d4e5f"
	out := strings.Repeat("x", 1024)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	parent := "null"
	var lines []string
	line := func(uuid, typ, msg string) {
		at = at.Add(time.Second)
		lines = append(lines, fmt.Sprintf(`{"parentUuid":%s,"isSidechain":false,"sessionId":"%s","type":"%s","message":%s,"uuid":"%s","timestamp":"%s"}`,
			parent, sid, typ, msg, uuid, at.Format(time.RFC3339Nano)))
		parent = `"` + uuid + `"`
	}
	for i := range n {
		line(fmt.Sprintf("p%d", i), "user", fmt.Sprintf(`{"role":"user","content":"question %d about the parser"}`, i))
		line(fmt.Sprintf("c%d", i), "assistant", fmt.Sprintf(`{"role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"toolu_%d","name":"Read","input":{"file_path":"f%d.go"}}],"usage":{"input_tokens":100,"output_tokens":20}}`, i, i))
		line(fmt.Sprintf("r%d", i), "user", fmt.Sprintf(`{"role":"user","content":[{"tool_use_id":"toolu_%d","type":"tool_result","content":"%s"}]}`, i, out))
		line(fmt.Sprintf("a%d", i), "assistant", fmt.Sprintf(`{"role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"answer %d: the parser is fine"}],"usage":{"input_tokens":1200,"output_tokens":30}}`, i))
	}
	return lines
}

// benchCodexLines is a rollout of n turns, each a turn context, a prompt,
// reasoning, a function call, a 1 KiB output, token counts and an answer.
func benchCodexLines(n int) []string {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var lines []string
	line := func(typ, payload string) {
		at = at.Add(time.Second)
		lines = append(lines, fmt.Sprintf(`{"timestamp":"%s","type":"%s","payload":%s}`, at.Format(time.RFC3339Nano), typ, payload))
	}
	line("session_meta", `{"id":"019a2d7a-41c4-78b1-b7cc-a45d62a89cd5","timestamp":"2026-01-01T00:00:00Z","cwd":"/home/dev/app","cli_version":"0.65.0"}`)
	out := strings.Repeat("x", 1024)
	for i := range n {
		line("turn_context", `{"cwd":"/home/dev/app","approval_policy":"on-request","sandbox_policy":{"type":"workspace-write"},"model":"gpt-5-codex","effort":"medium","summary":"auto"}`)
		line("response_item", fmt.Sprintf(`{"type":"message","role":"user","content":[{"type":"input_text","text":"question %d about the parser"}]}`, i))
		line("response_item", `{"type":"reasoning","summary":[{"type":"summary_text","text":"**Reading the parser**"}],"encrypted_content":"gAAAAB"}`)
		line("response_item", fmt.Sprintf(`{"type":"function_call","name":"shell","arguments":"{\"command\":[\"cat\",\"f%d.go\"]}","call_id":"call_%d"}`, i, i))
		line("response_item", fmt.Sprintf(`{"type":"function_call_output","call_id":"call_%d","output":"%s"}`, i, out))
		line("event_msg", `{"type":"token_count","info":{"last_token_usage":{"input_tokens":1200,"cached_input_tokens":100,"output_tokens":30,"total_tokens":1230}}}`)
		line("response_item", fmt.Sprintf(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"answer %d"}]}`, i))
		line("event_msg", `{"type":"task_complete","last_agent_message":"answer"}`)
	}
	return lines
}
