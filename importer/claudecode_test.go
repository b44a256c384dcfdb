package importer

import (
	"bytes"
	"slices"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

func TestReadClaudeCode(t *testing.T) {
	s, err := ReadClaudeCode("testdata/claude-code/session.jsonl")
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
	kinds := func(tu Turn) []rollout.ItemType {
		var out []rollout.ItemType
		for _, it := range tu.Items {
			out = append(out, it.Type)
		}
		return out
	}
	t1, t2 := s.Turns[0], s.Turns[1]
	want1 := []rollout.ItemType{rollout.ItemUserMessage, rollout.ItemReasoning, rollout.ItemAgentMessage, rollout.ItemToolCall, rollout.ItemToolResult, rollout.ItemAgentMessage}
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
	for _, sk := range s.Skips {
		lines = append(lines, sk.Line)
	}
	if !slices.Equal(lines, []int{4, 7, 8}) {
		t.Fatalf("skipped lines %v (%+v), want 4 (not JSON), 7 (unknown type), 8 (missing parent)", lines, s.Skips)
	}
}

func TestReadClaudeCodeRefusesAnotherFormat(t *testing.T) {
	if _, err := ReadClaudeCode("testdata/claude-code/not-claude.jsonl"); !errors.Is(err, ErrWrongFormat) {
		t.Fatalf("another tool's file: %v", err)
	}
	if _, err := Read("dotcraft", "testdata/claude-code/session.jsonl"); !errors.Is(err, ErrUnknownFormat) {
		t.Fatalf("a format not read: %v", err)
	}
}

func FuzzReadClaudeCode(f *testing.F) {
	f.Add([]byte(`{"type":"user","sessionId":"s","uuid":"a","message":{"role":"user","content":"hi"}}` + "\n" + `{"type":"assistant","sessionId":"s","parentUuid":"a","message":{"content":[{"type":"tool_use","id":"x","input":{}}]}}`))
	f.Add([]byte("not json\n{}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := readClaudeCode(bytes.NewReader(b), "fuzz.jsonl")
		if err != nil {
			return
		}
		if rollout.ValidateThreadID(ThreadID(s.Format, s.SourceID)) != nil && s.SourceID != "" {
			t.Fatalf("thread id of %q is not valid", s.SourceID)
		}
	})
}
