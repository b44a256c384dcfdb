package importer

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

const dcDir = "../testdata/import/dotcraft/.craft/threads/"

// A current DotCraft file: items replaced in place as they stream, tool
// pairs and a single-item MCP call, the exact model history, a
// compaction, a failed turn, a last turn still running, damage.
func TestReadDotCraft(t *testing.T) {
	s, err := Read("dotcraft", dcDir+"active/thread_20260505_k3v9qa.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if s.SourceID != "thread_20260505_k3v9qa" || s.Name != "Fix failing parser test" || s.Parent != "" || s.Created.IsZero() {
		t.Fatalf("session: %+v", s)
	}
	if len(s.Turns) != 2 {
		t.Fatalf("%d turns, want 2 (the third is still running)", len(s.Turns))
	}
	t1, t2 := s.Turns[0], s.Turns[1]
	want1 := []rollout.ItemType{rollout.ItemUserMessage, rollout.ItemReasoning, rollout.ItemToolCall, rollout.ItemToolResult,
		rollout.ItemToolCall, rollout.ItemToolResult, rollout.ItemAgentMessage}
	if !slices.Equal(kinds(t1), want1) || t1.Items[1].Text != "I should read the file first." || t1.Items[2].CallID != "call_abc123" ||
		t1.Items[3].CallID != "call_abc123" || t1.Items[4].Name != "github.search_issues" || !strings.Contains(t1.Items[5].Text, "#42") || t1.Model != "gpt-5" {
		t.Fatalf("turn 1: %v %+v", kinds(t1), t1.Items)
	}
	if t1.Usage.InputTokens != 15230 || t1.Usage.CachedInputTokens != 12000 || t1.Usage.ReasoningTokens != 300 || t1.Aborted != "" {
		t.Fatalf("turn 1 usage %+v, aborted %q", t1.Usage, t1.Aborted)
	}
	if len(t1.ModelHistory) != 3 || !bytes.Contains(t1.ModelHistory[1], []byte("function_call")) {
		t.Fatalf("turn 1 model history: %q", t1.ModelHistory)
	}
	if cp := t1.Checkpoint; cp == nil || cp.ID != "k-compact_20260505072000120_3f2a9c0d" || cp.TokensBefore != 16042 || len(cp.History) != 1 ||
		!bytes.Contains(cp.History[0], []byte("Summary:")) {
		t.Fatalf("compaction: %+v", t1.Checkpoint)
	}
	if !strings.HasPrefix(t2.Aborted, "failed: Provider returned 429") || kinds(t2)[3] != rollout.ItemError {
		t.Fatalf("turn 2: %v aborted %q", kinds(t2), t2.Aborted)
	}
	r := s.Report
	if len(r.Damaged) != 1 || r.Damaged[0].Line != 10 || len(r.Unknown) != 1 || r.Unknown[0].Type != "hologram_projected" ||
		len(r.Notes) != 1 || !strings.Contains(r.Notes[0].Reason, "still running") || !r.Notes[0].Later {
		t.Fatalf("report %+v, want line 10 (not JSON), an unknown kind, the running turn", r)
	}
}

// A subagent's own file names its parent; an older file (no source, CRLF,
// whole turns written again, a rollback, a compaction notice only) reads
// as DotCraft replays it.
func TestReadDotCraftSubagentAndOlderFile(t *testing.T) {
	sub, err := ReadDotCraft(dcDir + "active/thread_20260505_sub001.jsonl")
	if err != nil || sub.Parent != "thread_20260505_k3v9qa" || sub.Name != "check the other parsers" || len(sub.Turns) != 1 || sub.Turns[0].Model != "gpt-5-mini" {
		t.Fatalf("subagent: %+v, %v", sub, err)
	}
	old, err := ReadDotCraft(dcDir + "archived/thread_20260430_p0c2mz.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(old.Turns) != 2 || len(old.Turns[0].Items) != 4 || old.Turns[1].Items[0].Text != "Fix the TODO." {
		t.Fatalf("older file: %d turns %+v", len(old.Turns), old.Turns)
	}
	if old.Turns[0].Items[2].Text != "main.go:10: TODO handle errors" || old.Turns[0].Items[1].Name != "grep_todo" {
		t.Fatalf("plugin call: %+v", old.Turns[0].Items)
	}
	// The compaction notice holds no summary (it is in DotCraft's
	// state.db): no checkpoint. The rolled-back turn is named.
	if old.Turns[0].Checkpoint != nil || len(old.RolledBack) != 1 || old.RolledBack[0] != "t-turn_002-1777515000000" {
		t.Fatalf("checkpoint %+v, rolled back %v", old.Turns[0].Checkpoint, old.RolledBack)
	}
	if n := old.Report.Notes; len(n) != 1 || !strings.Contains(n[0].Reason, "archived") {
		t.Fatalf("notes %+v, want the archived note", n)
	}
	if _, err := ReadDotCraft("../testdata/import/claude-code/session.jsonl"); !errors.Is(err, ErrWrongFormat) {
		t.Fatalf("a Claude Code file read as DotCraft: %v", err)
	}
}

func FuzzReadDotCraft(f *testing.F) {
	f.Add([]byte(`{"kind":"thread_opened","threadOpened":{"threadId":"t"}}` + "\n" +
		`{"kind":"turn_started","turnStarted":{"turn":{"id":"a","status":"Completed"}}}` + "\n" +
		`{"kind":"item_appended","itemAppended":{"turnId":"a","item":{"id":"i","type":"UserMessage","payload":{"text":"x"}}}}` + "\n" +
		`{"kind":"thread_rolled_back","threadRolledBack":{"numTurns":3}}`))
	f.Add([]byte("\xef\xbb\xbf{}\r\nnot json\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := readBytes("dotcraft", b, "fuzz.jsonl")
		if err != nil {
			return
		}
		if rollout.ValidateThreadID(ThreadID(s.Format, s.SourceID)) != nil {
			t.Fatalf("thread id of %q is not valid", s.SourceID)
		}
		for _, tu := range s.Turns {
			if len(tu.Items) == 0 || tu.Items[0].Type != rollout.ItemUserMessage {
				t.Fatalf("a turn without its user message first: %+v", tu)
			}
		}
	})
}
