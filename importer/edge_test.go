package importer

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A line over the limit is skipped and reported; the lines after it are read.
func TestLongLineIsSkipped(t *testing.T) {
	defer func(n int) { maxLine = n }(maxLine)
	maxLine = 256
	in := `{"type":"user","sessionId":"s","uuid":"a","message":{"role":"user","content":"hi"}}` + "\n" +
		`{"type":"assistant","sessionId":"s","uuid":"b","parentUuid":"a","message":{"role":"assistant","content":"` + strings.Repeat("x", 1000) + `"}}` + "\n" +
		`{"type":"assistant","sessionId":"s","uuid":"c","parentUuid":"a","message":{"role":"assistant","content":[{"type":"text","text":"after"}]}}` + "\n"
	s, err := readBytes("claude-code", []byte(in), "long.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if d := s.Report.Damaged; len(d) != 1 || d[0].Line != 2 || !strings.Contains(d[0].Reason, "longer than") || len(s.Turns) != 1 || s.Turns[0].Items[1].Text != "after" {
		t.Fatalf("damage %+v, turns %+v", s.Report.Damaged, s.Turns)
	}
}

// Claude Code writes one assistant message as a line per content block,
// each with the message's usage: counted once. A compaction inside a turn
// keeps what followed it in the checkpoint's history. Times outside
// [1971, now] are unknown, and a turn never ends before it starts.
func TestClaudeCodeUsageMidTurnCompactionAndTimes(t *testing.T) {
	in := `{"type":"user","sessionId":"s","uuid":"a","timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"go"}}
{"type":"assistant","sessionId":"s","uuid":"b","parentUuid":"a","timestamp":"2026-01-01T00:00:01Z","message":{"id":"msg_1","role":"assistant","content":[{"type":"thinking","thinking":"hm"}],"usage":{"input_tokens":100,"output_tokens":10}}}
{"type":"assistant","sessionId":"s","uuid":"c","parentUuid":"b","timestamp":"2300-01-01T00:00:00Z","message":{"id":"msg_1","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{}}],"usage":{"input_tokens":100,"output_tokens":10}}}
{"type":"system","subtype":"compact_boundary","sessionId":"s","uuid":"k","parentUuid":null,"compactMetadata":{"preTokens":9000}}
{"type":"user","isCompactSummary":true,"sessionId":"s","uuid":"k2","parentUuid":"k","message":{"role":"user","content":"summary so far"}}
{"type":"user","sessionId":"s","uuid":"d","parentUuid":"k2","timestamp":"1500-01-01T00:00:00Z","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"file"}]}}
`
	s, err := readBytes("claude-code", []byte(in), "x.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	tu := s.Turns[0]
	if tu.Usage.InputTokens != 100 || tu.Usage.OutputTokens != 10 {
		t.Fatalf("usage %+v: counted once per message, not per line", tu.Usage)
	}
	if cp := tu.Checkpoint; cp == nil || len(cp.History) != 2 || !bytes.Contains(cp.History[0], []byte("summary so far")) || !bytes.Contains(cp.History[1], []byte("tool_result")) {
		t.Fatalf("checkpoint %+v", tu.Checkpoint)
	}
	if tu.Started.Year() != 2026 || tu.Ended.Before(tu.Started) || tu.Ended.Year() != 2026 {
		t.Fatalf("times %v .. %v", tu.Started, tu.Ended)
	}
}

// A session id from a file is a directory name, never a pattern; a
// subagent file's lines of another session are not this one's.
func TestClaudeCodeSubagentsOfOtherSessionsStayOut(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mine.jsonl"), []byte(`{"type":"user","sessionId":"*","uuid":"a","message":{"role":"user","content":"hi"}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other", "subagents")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "agent-x1.jsonl"), []byte(`{"type":"user","sessionId":"other","isSidechain":true,"uuid":"q","message":{"role":"user","content":"not yours"}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := ReadClaudeCode(filepath.Join(dir, "mine.jsonl"))
	if err != nil || len(s.Subagents) != 0 {
		t.Fatalf("subagents %+v, %v", s.Subagents, err)
	}
	mine := filepath.Join(dir, "mine", "subagents")
	if err := os.MkdirAll(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(other, "agent-x1.jsonl"), filepath.Join(mine, "agent-x1.jsonl")); err != nil {
		t.Fatal(err)
	}
	s, err = ReadClaudeCode(filepath.Join(dir, "mine.jsonl"))
	if err != nil || len(s.Subagents) != 1 || len(s.Subagents[0].Turns) != 1 || len(s.Subagents[0].Report.Damaged) != 0 {
		t.Fatalf("a subagent file of another session: %+v, %v", s.Subagents, err)
	}
}

// DotCraft: a header naming the thread its own parent has no parent; each
// turn has the model it started under; enum names in any case.
func TestDotCraftSelfParentModelAndCase(t *testing.T) {
	in := `{"kind":"thread_opened","timestamp":"2026-05-05T07:00:00+00:00","threadOpened":{"threadId":"me","originChannel":"subagent","channelContext":"me","configuration":{"model":"a"}}}
{"kind":"turn_started","timestamp":"2026-05-05T07:00:01+00:00","turnStarted":{"turn":{"id":"turn_001","status":"running","startedAt":"2026-05-05T07:00:01+00:00"}}}
{"kind":"item_appended","timestamp":"2026-05-05T07:00:01+00:00","itemAppended":{"turnId":"turn_001","item":{"id":"item_001","type":"usermessage","payload":{"text":"one"}}}}
{"kind":"turn_completed","timestamp":"2026-05-05T07:00:02+00:00","turnCompleted":{"turnId":"turn_001","status":"completed"}}
{"kind":"thread_opened","timestamp":"2026-05-05T07:00:03+00:00","threadOpened":{"threadId":"me","configuration":{"model":"b"}}}
{"kind":"turn_started","timestamp":"2026-05-05T07:00:04+00:00","turnStarted":{"turn":{"id":"turn_002","status":"Running","startedAt":"2026-05-05T07:00:04+00:00"}}}
{"kind":"item_appended","timestamp":"2026-05-05T07:00:04+00:00","itemAppended":{"turnId":"turn_002","item":{"id":"item_001","type":"UserMessage","payload":{"text":"two"}}}}
{"kind":"turn_completed","timestamp":"2026-05-05T07:00:05+00:00","turnCompleted":{"turnId":"turn_002","status":"Completed"}}
`
	s, err := readDotCraft(strings.NewReader(in), "me.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if s.Parent != "" || len(s.Turns) != 2 || s.Turns[0].Model != "a" || s.Turns[1].Model != "b" || s.Turns[0].Items[0].Text != "one" {
		t.Fatalf("parent %q, turns %+v", s.Parent, s.Turns)
	}
}

// A file written just now whose last turn waits on a tool: that turn is
// left for a later import; the same file untouched for longer than
// ActiveWindow is read whole.
func TestUnfinishedLastTurnWaits(t *testing.T) {
	defer func(w time.Duration) { ActiveWindow = w }(ActiveWindow)
	ActiveWindow = time.Hour
	path := filepath.Join(t.TempDir(), "s.jsonl")
	in := `{"type":"user","sessionId":"s","uuid":"a","message":{"role":"user","content":"one"}}
{"type":"assistant","sessionId":"s","uuid":"b","parentUuid":"a","message":{"role":"assistant","content":[{"type":"text","text":"done"}]}}
{"type":"user","sessionId":"s","uuid":"c","parentUuid":"b","message":{"role":"user","content":"two"}}
{"type":"assistant","sessionId":"s","uuid":"d","parentUuid":"c","message":{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{}}]}}
`
	if err := os.WriteFile(path, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := ReadClaudeCode(path)
	if n := s.Report.Notes; err != nil || len(s.Turns) != 1 || len(n) != 1 || !strings.Contains(n[0].Reason, "no end yet") || !n[0].Later {
		t.Fatalf("while written: %d turns, notes %+v, %v", len(s.Turns), s.Report.Notes, err)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if s, err := ReadClaudeCode(path); err != nil || len(s.Turns) != 2 {
		t.Fatalf("left alone: %d turns, %v", len(s.Turns), err)
	}
	// Claude Code marked the turn's end: imported at once.
	ended := in + `{"type":"user","sessionId":"s","uuid":"e","parentUuid":"d","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}}
{"type":"assistant","sessionId":"s","uuid":"f","parentUuid":"e","message":{"role":"assistant","stop_reason":"end_turn","content":[{"type":"text","text":"all done"}]}}
`
	if err := os.WriteFile(path, []byte(ended), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := ReadClaudeCode(path); err != nil || len(s.Turns) != 2 || len(s.Report.Notes) != 0 {
		t.Fatalf("an ended turn while written: %d turns, notes %+v, %v", len(s.Turns), s.Report.Notes, err)
	}
}

// A line that cannot be read does not orphan the rest of the session.
func TestDamagedLineDoesNotOrphanTheRest(t *testing.T) {
	in := `{"type":"user","sessionId":"s","uuid":"a","message":{"role":"user","content":"one"}}
{"type":"assistant","sessionId":"s","uuid":"b","parentUuid":"a","message":{"role":"assistant","content":[{"type":"text","text":"cut off
{"type":"user","sessionId":"s","uuid":"c","parentUuid":"b","message":{"role":"user","content":"two"}}
{"type":"assistant","sessionId":"s","uuid":"d","parentUuid":"c","message":{"role":"assistant","content":[{"type":"text","text":"answer"}]}}
`
	s, err := readBytes("claude-code", []byte(in), "x.jsonl")
	if err != nil || len(s.Turns) != 2 || len(s.Turns[1].Items) != 2 {
		t.Fatalf("%d turns (%+v), damage %+v, %v", len(s.Turns), s.Turns, s.Report.Damaged, err)
	}
}
