package importer

import (
	"bytes"
	"os"
	"slices"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

func TestReadCodex(t *testing.T) {
	s, err := Read("codex", "../testdata/import/codex/rollout-2026-11-20T10-00-00-019a2d7a.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if s.SourceID != "019a2d7a-41c4-78b1-b7cc-a45d62a89cd5" || ThreadID(s.Format, s.SourceID) != "cx-019a2d7a-41c4-78b1-b7cc-a45d62a89cd5" {
		t.Fatalf("session %q", s.SourceID)
	}
	if len(s.Turns) != 1 {
		t.Fatalf("%d turns (the environment message is not a prompt), want 1", len(s.Turns))
	}
	tu := s.Turns[0]
	var kinds []rollout.ItemType
	for _, it := range tu.Items {
		kinds = append(kinds, it.Type)
	}
	want := []rollout.ItemType{rollout.ItemUserMessage, rollout.ItemReasoning, rollout.ItemToolCall, rollout.ItemToolResult, rollout.ItemAgentMessage}
	if !slices.Equal(kinds, want) || tu.Items[2].CallID != "call_1" || tu.Items[3].CallID != "call_1" || tu.Model != "gpt-5-codex" {
		t.Fatalf("turn: %v %+v", kinds, tu.Items)
	}
	if tu.Usage.InputTokens != 900 || tu.Usage.CachedInputTokens != 100 || tu.Usage.OutputTokens != 40 || tu.Usage.ReasoningTokens != 10 {
		t.Fatalf("usage %+v", tu.Usage)
	}
	// The exact model history: the response items from the prompt on;
	// the compaction after the turn: its replacement history.
	if len(tu.ModelHistory) != 5 || !bytes.Contains(tu.ModelHistory[0], []byte("List the Go files.")) {
		t.Fatalf("model history %q", tu.ModelHistory)
	}
	if cp := tu.Checkpoint; cp == nil || len(cp.History) != 2 || !bytes.Contains(cp.History[1], []byte("nil map")) {
		t.Fatalf("compaction: %+v", tu.Checkpoint)
	}
	if d := s.Report.Damaged; len(d) != 1 || d[0].Line != 9 {
		t.Fatalf("damaged %+v, want line 9 (not JSON)", d)
	}
	if u := s.Report.Unknown; len(u) != 1 || u[0] != (Unknown{Type: "weather_report", Count: 1, FirstLine: 12}) {
		t.Fatalf("unknown %+v, want line 12's type", u)
	}
	if n := s.Report.Ignored["event_msg/user_message"]; n != 1 {
		t.Fatalf("ignored %v, want the user_message event", s.Report.Ignored)
	}
	// A subagent: a session of its own naming its parent thread.
	sub, err := ReadCodex("../testdata/import/codex/rollout-2026-11-20T10-01-00-019a2d7b.jsonl")
	if err != nil || sub.Parent != s.SourceID || len(sub.Turns) != 1 || s.Parent != "" {
		t.Fatalf("subagent: %+v, %v", sub, err)
	}
	// A Claude Code transcript is not a Codex session.
	if _, err := ReadCodex("../testdata/import/claude-code/session.jsonl"); !errors.Is(err, ErrWrongFormat) {
		t.Fatalf("a Claude Code file read as Codex: %v", err)
	}
}

// The older, unwrapped format: a first line with the id, then items.
func TestReadCodexOlderFormat(t *testing.T) {
	path := t.TempDir() + "/rollout-old.jsonl"
	if err := writeFile(path, []byte(`{"id":"5973b6c0-94b8-487b-a530-2aeb6098ae0e","timestamp":"2025-05-01T09:00:00.000Z","instructions":null}
{"type":"message","role":"user","content":[{"type":"input_text","text":"hello"}]}
{"record_type":"state"}
{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hi"}]}
`)); err != nil {
		t.Fatal(err)
	}
	s, err := ReadCodex(path)
	if err != nil || s.SourceID != "5973b6c0-94b8-487b-a530-2aeb6098ae0e" || len(s.Turns) != 1 || len(s.Turns[0].Items) != 2 {
		t.Fatalf("older format: %+v, %v", s, err)
	}
}

func FuzzReadCodex(f *testing.F) {
	f.Add([]byte(`{"type":"session_meta","payload":{"id":"s"}}` + "\n" + `{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}}`))
	f.Add([]byte(`{"id":"old"}` + "\n" + `{"type":"function_call_output","call_id":"x","output":{"output":"y"}}`))
	// The shapes of current and older versions, and a rollback.
	for _, p := range []string{"codex-shapes/rollout-2026-12-01T09-00-00-019ad000.jsonl", "codex-shapes/rollout-2025-05-01T09-00-00-5973b6c0.jsonl",
		"codex-two-files/diverge/other/rollout-2026-12-02T10-00-00-019ad100.jsonl"} {
		if b, err := os.ReadFile("../testdata/import/" + p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"type":"session_meta","payload":{"id":"s"}}` + "\n" + `{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"a"}]}}` + "\n" +
		`{"type":"event_msg","payload":{"type":"thread_rolled_back","num_turns":3}}` + "\n" + `{"type":"turn_context","payload":{"summary":[1]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := readBytes("codex", b, "fuzz.jsonl")
		if err == nil && rollout.ValidateThreadID(ThreadID(s.Format, s.SourceID)) != nil {
			t.Fatalf("thread id of %q is not valid", s.SourceID)
		}
	})
}
