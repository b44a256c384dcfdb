package importer

import (
	"bytes"
	"os"
	"slices"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

func TestReadClaudeCode(t *testing.T) {
	s, err := ReadClaudeCode("../testdata/import/claude-code/session.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if s.SourceID != "4f35e220-c435-4cf7-b9b9-f40426042847" || s.Name != "Fix the nil map panic" || s.Created.IsZero() {
		t.Fatalf("session: %q %q %v", s.SourceID, s.Name, s.Created)
	}
	if got := ThreadID(s.Format, s.SourceID); got != "cc-4f35e220-c435-4cf7-b9b9-f40426042847" || rollout.ValidateThreadID(got) != nil {
		t.Fatalf("thread id %q", got)
	}
	if len(s.Turns) != 2 {
		t.Fatalf("%d turns, want 2", len(s.Turns))
	}
	t1, t2 := s.Turns[0], s.Turns[1]
	// Line 8's parent is missing: kept (and reported), in the turn open.
	want1 := []rollout.ItemType{rollout.ItemUserMessage, rollout.ItemReasoning, rollout.ItemAgentMessage, rollout.ItemToolCall, rollout.ItemToolResult, rollout.ItemAgentMessage, rollout.ItemAgentMessage}
	if !slices.Equal(kinds(t1), want1) || t1.Items[3].CallID != "toolu_1" || t1.Items[4].CallID != "toolu_1" || t1.Model != "claude-sonnet-4-5" {
		t.Fatalf("turn 1: %v %+v", kinds(t1), t1.Items)
	}
	if t1.Usage.InputTokens != 320 || t1.Usage.CachedInputTokens != 20 || t1.Usage.OutputTokens != 45 {
		t.Fatalf("turn 1 usage: %+v", t1.Usage)
	}
	if t2.Items[0].Text != "Fix it please." || t2.Items[2].Status != rollout.ItemFailed || t2.Items[2].Text != "permission denied" {
		t.Fatalf("turn 2: %+v", t2.Items)
	}
	var lines []int
	for _, d := range s.Report.Damaged {
		lines = append(lines, d.Line)
	}
	if !slices.Equal(lines, []int{4, 8}) || s.Report.Damaged[1].Field != "parentUuid" {
		t.Fatalf("damaged lines %v (%+v), want 4 (not JSON), 8 (missing parent)", lines, s.Report.Damaged)
	}
	if u := s.Report.Unknown; len(u) != 1 || u[0] != (Unknown{Type: "hologram", Count: 1, FirstLine: 7}) {
		t.Fatalf("unknown types %+v, want line 7's", u)
	}
}

// Subagents: the sidechain lines in the file, and the subagents/ files
// beside it (not the internal acompact one); each turn keeps its exact
// model history; a compaction is a checkpoint after the turn before it.
func TestReadClaudeCodeSubagentsHistoryAndCompaction(t *testing.T) {
	s, err := ReadClaudeCode("../testdata/import/claude-code/session.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Turns[0].ModelHistory) != 5 || !bytes.Contains(s.Turns[0].ModelHistory[0], []byte("Why does main.go panic?")) {
		t.Fatalf("turn 1's model history: %q", s.Turns[0].ModelHistory)
	}
	if len(s.Subagents) != 2 {
		t.Fatalf("%d subagents, want 2 (inline sidechain, subagents/agent-a9c0d11.jsonl)", len(s.Subagents))
	}
	inline, file := s.Subagents[0], s.Subagents[1]
	if inline.SourceID != s.SourceID+"/b7e1f00" || inline.Parent != s.SourceID || len(inline.Turns) != 1 || len(inline.Turns[0].Items) != 2 {
		t.Fatalf("inline subagent: %+v", inline)
	}
	want := []rollout.ItemType{rollout.ItemUserMessage, rollout.ItemToolCall, rollout.ItemToolResult, rollout.ItemAgentMessage}
	var got []rollout.ItemType
	for _, it := range file.Turns[0].Items {
		got = append(got, it.Type)
	}
	if file.SourceID != s.SourceID+"/a9c0d11" || len(file.Turns) != 1 || !slices.Equal(got, want) || len(file.Report.Damaged) != 1 || file.Report.Damaged[0].Line != 5 {
		t.Fatalf("subagent file: %s %v damage %+v", file.SourceID, got, file.Report.Damaged)
	}
	if id := ThreadID(file.Format, file.SourceID); rollout.ValidateThreadID(id) != nil || id == ThreadID(s.Format, s.SourceID) {
		t.Fatalf("subagent thread id %q", id)
	}

	a, _ := os.ReadFile("../testdata/import/claude-code/session.jsonl")
	b, _ := os.ReadFile("../testdata/import/claude-code/grown.jsonl")
	g, err := readBytes("claude-code", append(a, b...), "grown")
	if err != nil {
		t.Fatal(err)
	}
	cp := g.Turns[1].Checkpoint
	if len(g.Turns) != 3 || cp == nil || cp.ID != "k-k1" || cp.TokensBefore != 5200 || cp.TokensAfter != 400 || len(cp.History) != 1 ||
		!bytes.Contains(cp.History[0], []byte("being continued")) || g.Turns[2].Items[0].Text != "Try again with sudo." {
		t.Fatalf("compaction: %d turns, checkpoint %+v", len(g.Turns), cp)
	}
}

func TestReadClaudeCodeRefusesAnotherFormat(t *testing.T) {
	if _, err := ReadClaudeCode("../testdata/import/claude-code/not-claude.jsonl"); !errors.Is(err, ErrWrongFormat) {
		t.Fatalf("another tool's file: %v", err)
	}
	if _, err := Read("opencode", "../testdata/import/claude-code/session.jsonl"); !errors.Is(err, ErrUnknownFormat) {
		t.Fatalf("a format not read: %v", err)
	}
}

func FuzzReadClaudeCode(f *testing.F) {
	f.Add([]byte(`{"type":"user","sessionId":"s","uuid":"a","message":{"role":"user","content":"hi"}}` + "\n" + `{"type":"assistant","sessionId":"s","parentUuid":"a","message":{"content":[{"type":"tool_use","id":"x","input":{}}]}}`))
	f.Add([]byte("not json\n{}\n"))
	if b, err := os.ReadFile("../testdata/import/claude-code-shapes/3c1d8a2e-5f4b-4e6a-9d7c-2b8e1f0a9c34.jsonl"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"type":"custom-title","customTitle":"n","sessionId":"s"}` + "\n" + `{"type":"user","sessionId":"s","uuid":"a","parentUuid":"gone","message":{"role":"user","content":[{"type":"server_tool_use","id":"x"},{"type":"web_search_tool_result","tool_use_id":"x","content":{"error_code":"max_uses_exceeded"}}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := readBytes("claude-code", b, "fuzz.jsonl")
		if err != nil {
			return
		}
		if rollout.ValidateThreadID(ThreadID(s.Format, s.SourceID)) != nil && s.SourceID != "" {
			t.Fatalf("thread id of %q is not valid", s.SourceID)
		}
	})
}
