package importer

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

const caSession = "../testdata/import/craft-agents/sessions/260120-quiet-lake/session.jsonl"

func TestReadCraftAgents(t *testing.T) {
	s, err := Read("craft-agents", caSession)
	if err != nil {
		t.Fatal(err)
	}
	if s.SourceID != "260120-quiet-lake" || s.Name != "Flaky upload test" || s.State != "in-progress" || !s.Flags["flagged"] ||
		!slices.Equal(s.Labels, []string{"bug", "area::ci"}) || s.Created.UnixMilli() != 1763632800000 {
		t.Fatalf("session: %+v", s)
	}
	if !s.Flags["flagged"] {
		t.Fatalf("flags %v", s.Flags)
	}
	if s.Usage == nil || s.Usage.InputTokens != 4200 || s.Usage.CachedInputTokens != 1800 || s.Usage.OutputTokens != 610 {
		t.Fatalf("usage %+v", s.Usage)
	}
	if len(s.Turns) != 2 {
		t.Fatalf("%d turns, want 2", len(s.Turns))
	}
	t1, t2 := s.Turns[0], s.Turns[1]
	want1 := []rollout.ItemType{rollout.ItemUserMessage, rollout.ItemAgentMessage, rollout.ItemToolCall, rollout.ItemToolResult,
		rollout.ItemToolCall, rollout.ItemToolResult, rollout.ItemAgentMessage}
	if !slices.Equal(kinds(t1), want1) || t1.Items[2].CallID != "toolu_01" || t1.Items[3].CallID != "toolu_01" || t1.Model != "claude-sonnet-4-5" {
		t.Fatalf("turn 1: %v %+v", kinds(t1), t1.Items)
	}
	// {{SESSION_PATH}} is the session's directory, absolute, as
	// craft-agents reads it.
	dir, _ := filepath.Abs(filepath.Dir(caSession))
	if !strings.Contains(t1.Items[2].Arguments, `"`+filepath.ToSlash(dir)+"/plans/upload.md") {
		t.Fatalf("the session path token was not expanded: %s", t1.Items[2].Arguments)
	}
	// Its compaction notice holds no summary: no checkpoint.
	if t1.Checkpoint != nil {
		t.Fatalf("a checkpoint from a notice: %+v", t1.Checkpoint)
	}
	want2 := []rollout.ItemType{rollout.ItemUserMessage, rollout.ItemToolCall, rollout.ItemToolResult, rollout.ItemError}
	if !slices.Equal(kinds(t2), want2) || t2.Items[2].Status != rollout.ItemFailed || t2.Items[3].Text != "Tool failed: The edit was refused." {
		t.Fatalf("turn 2: %v %+v", kinds(t2), t2.Items)
	}
	// The Task call's inner tool is the subagent's, not the turn's.
	if len(s.Subagents) != 1 {
		t.Fatalf("%d subagents, want 1", len(s.Subagents))
	}
	sub := s.Subagents[0]
	wantSub := []rollout.ItemType{rollout.ItemUserMessage, rollout.ItemToolCall, rollout.ItemToolResult, rollout.ItemAgentMessage}
	if sub.SourceID != "260120-quiet-lake/toolu_02" || sub.Parent != s.SourceID || sub.Name != "Search the CI logs" || len(sub.Turns) != 1 ||
		!slices.Equal(kinds(sub.Turns[0]), wantSub) || sub.Turns[0].Items[0].Text != "Find the TestUpload failures in the CI logs." ||
		sub.Turns[0].Items[3].Text != "3 failures, all timeouts after 10ms." {
		t.Fatalf("subagent: %+v", sub)
	}
	var lines []int
	for _, d := range s.Report.Damaged {
		lines = append(lines, d.Line)
	}
	if !slices.Equal(lines, []int{7, 14}) || len(s.Report.Unknown) != 1 || s.Report.Unknown[0].FirstLine != 13 {
		t.Fatalf("report %+v, want lines 7 (not JSON), 14 (missing parent tool) damaged, 13 of an unknown type", s.Report)
	}
	if _, err := ReadCraftAgents("../testdata/import/claude-code/session.jsonl"); !errors.Is(err, ErrWrongFormat) {
		t.Fatalf("a Claude Code file read as craft-agents: %v", err)
	}
}

// An older craft-agents header: todoState and labelIds.
func TestReadCraftAgentsOlderHeader(t *testing.T) {
	in := `{"id":"260111-swift-river","workspaceRootPath":"~/w","createdAt":1768100000000,"lastUsedAt":1768100000000,"todoState":"done","labelIds":["infra"],"messageCount":2}
{"id":"a","type":"user","content":"hi","timestamp":1768100000000}
{"id":"b","type":"assistant","content":"hello","timestamp":1768100001000}
`
	s, err := readCraftAgents(strings.NewReader(in), "sessions/260111-swift-river/session.jsonl")
	if err != nil || s.State != "done" || !slices.Equal(s.Labels, []string{"infra"}) || len(s.Turns) != 1 {
		t.Fatalf("%+v, %v", s, err)
	}
}

func FuzzReadCraftAgents(f *testing.F) {
	f.Add([]byte(`{"id":"s","createdAt":1,"messageCount":2,"workspaceRootPath":"~/w"}` + "\n" +
		`{"id":"a","type":"user","content":"hi"}` + "\n" + `{"id":"b","type":"tool","toolUseId":"t","toolInput":{}}` + "\n" +
		`{"id":"c","type":"tool","toolUseId":"u","parentToolUseId":"t","toolResult":"x"}`))
	f.Add([]byte("{}\nnot json\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := readBytes("craft-agents", b, "fuzz/session.jsonl")
		if err != nil {
			return
		}
		for _, sub := range append([]Session{s}, s.Subagents...) {
			if rollout.ValidateThreadID(ThreadID(sub.Format, sub.SourceID)) != nil {
				t.Fatalf("thread id of %q is not valid", sub.SourceID)
			}
		}
	})
}
