package importer

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// What current Codex versions write (testdata/import/codex-shapes): a
// turn context with every field, arguments as a string and as an object,
// a freeform tool, web and tool searches, the event_msg types, an aborted
// turn with an error, a compaction. Nothing of it is damage or unknown;
// what carries nothing is counted as ignored.
func TestReadCodexCurrentShapes(t *testing.T) {
	s, err := ReadCodex("../testdata/import/codex-shapes/rollout-2026-12-01T09-00-00-019ad000.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Report.Damaged) != 0 || len(s.Report.Unknown) != 0 {
		t.Fatalf("damaged %+v, unknown %+v: want none", s.Report.Damaged, s.Report.Unknown)
	}
	wantIgnored := map[string]int{"event_msg/user_message": 1, "event_msg/exec_command_end": 1, "event_msg/patch_apply_end": 1,
		"response_item/ghost_snapshot": 1, "event_msg/web_search_end": 1, "event_msg/mcp_tool_call_end": 1, "event_msg/agent_message": 1,
		"event_msg/entered_review_mode": 1, "event_msg/exited_review_mode": 1, "event_msg/context_compacted": 1, "world_state": 1}
	if !maps.Equal(s.Report.Ignored, wantIgnored) {
		t.Fatalf("ignored %v, want %v", s.Report.Ignored, wantIgnored)
	}
	if len(s.Turns) != 2 {
		t.Fatalf("%d turns, want 2", len(s.Turns))
	}
	t1, t2 := s.Turns[0], s.Turns[1]
	wantMeta := map[string]string{"cwd": "/home/dev/cli", "approval_policy": "on-request", "sandbox_policy": "workspace-write", "effort": "high",
		"reasoning_summary": "auto", "personality": "pragmatic", "collaboration_mode": "default"}
	if t1.Model != "gpt-5.1-codex" || !maps.Equal(t1.Metadata, wantMeta) {
		t.Fatalf("turn 1's settings: %q %v", t1.Model, t1.Metadata)
	}
	if t2.Model != "gpt-5.1-codex-mini" || t2.Metadata["approval_policy"] != "never" || t2.Metadata["sandbox_policy"] != "read-only" || t2.Metadata["effort"] != "low" {
		t.Fatalf("turn 2's settings (its own turn context): %q %v", t2.Model, t2.Metadata)
	}
	want := []rollout.ItemType{rollout.ItemUserMessage, rollout.ItemReasoning,
		rollout.ItemToolCall, rollout.ItemToolResult, // arguments a string
		rollout.ItemToolCall, rollout.ItemToolResult, // arguments an object, failed
		rollout.ItemToolCall, rollout.ItemToolResult, // apply_patch, freeform
		rollout.ItemToolCall, rollout.ItemToolResult, // web search
		rollout.ItemToolCall, rollout.ItemToolResult, // tool search
		rollout.ItemAgentMessage}
	if got := kinds(t1); !slices.Equal(got, want) {
		t.Fatalf("turn 1's items %v, want %v", got, want)
	}
	it := t1.Items
	if it[2].Name != "shell_command" || it[2].Arguments != `{"command":"grep -rn Flags cmd/"}` ||
		it[4].Name != "read_file" || it[4].Arguments != `{"path":"cmd/root.go","offset":1}` || it[5].Status != rollout.ItemFailed || it[5].Text != "permission denied: cmd/root.go" ||
		it[6].Name != "apply_patch" || !strings.HasPrefix(it[6].Arguments, "*** Begin Patch") || !strings.HasPrefix(it[7].Text, "Success.") ||
		it[8].Name != "web_search" || !strings.Contains(it[8].Arguments, "cobra bool flag default") || it[9].CallID != it[8].CallID ||
		it[10].Name != "tool_search" || it[11].CallID != "ts_1" || !strings.Contains(it[11].Text, "changelog.add") {
		t.Fatalf("turn 1's tools: %+v", it)
	}
	if t1.Usage.InputTokens != 5000 || t1.Usage.ReasoningTokens != 100 || !t1.ended || t1.Aborted != "" {
		t.Fatalf("turn 1: usage %+v, ended %v, aborted %q", t1.Usage, t1.ended, t1.Aborted)
	}
	if got := kinds(t2); !slices.Equal(got, []rollout.ItemType{rollout.ItemUserMessage, rollout.ItemError}) || t2.Aborted != "interrupted" ||
		t2.Items[1].Text != "stream disconnected before completion" || t2.Checkpoint == nil || len(t2.Checkpoint.History) != 2 {
		t.Fatalf("turn 2: %v aborted %q checkpoint %+v", got, t2.Aborted, t2.Checkpoint)
	}
	// The model history: every response item of the turn, the developer
	// message before the prompt and the ghost snapshot not among them.
	if len(t1.ModelHistory) != 12 {
		t.Fatalf("turn 1's model history: %d items, want 12", len(t1.ModelHistory))
	}
}

// Older Codex files: no wrapper, a first line with the id, state lines.
func TestReadCodexOlderShapes(t *testing.T) {
	s, err := ReadCodex("../testdata/import/codex-shapes/rollout-2025-05-01T09-00-00-5973b6c0.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	want := []rollout.ItemType{rollout.ItemUserMessage, rollout.ItemReasoning, rollout.ItemToolCall, rollout.ItemToolResult,
		rollout.ItemToolCall, rollout.ItemToolResult, rollout.ItemAgentMessage}
	if s.SourceID != "5973b6c0-94b8-487b-a530-2aeb6098ae0e" || len(s.Turns) != 1 || !slices.Equal(kinds(s.Turns[0]), want) ||
		s.Turns[0].Items[4].Name != "shell" || !strings.Contains(s.Turns[0].Items[4].Arguments, `"wc"`) {
		t.Fatalf("older format: %+v", s)
	}
	if len(s.Report.Damaged) != 0 || len(s.Report.Unknown) != 0 || s.Report.Ignored["record_type:state"] != 3 {
		t.Fatalf("report %+v", s.Report)
	}
}

// What current Claude Code versions write (testdata/import/claude-code-
// shapes): the name from custom-title, the settings, snapshots, queue,
// progress and attachment lines ignored, a server's web search as a tool
// call and its result, and a resumed session's lines (another sessionId)
// kept in the one transcript.
func TestReadClaudeCodeCurrentShapes(t *testing.T) {
	s, err := ReadClaudeCode("../testdata/import/claude-code-shapes/3c1d8a2e-5f4b-4e6a-9d7c-2b8e1f0a9c34.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if s.SourceID != "3c1d8a2e-5f4b-4e6a-9d7c-2b8e1f0a9c34" || s.Name != "Flaky upload test" {
		t.Fatalf("session %q, name %q", s.SourceID, s.Name)
	}
	if len(s.Report.Damaged) != 0 || len(s.Report.Unknown) != 0 {
		t.Fatalf("damaged %+v, unknown %+v: want none", s.Report.Damaged, s.Report.Unknown)
	}
	wantIgnored := map[string]int{"permission-mode": 1, "file-history-snapshot": 1, "queue-operation": 2, "attachment": 1, "progress": 1,
		"system/turn_duration": 1, "last-prompt": 2}
	if !maps.Equal(s.Report.Ignored, wantIgnored) {
		t.Fatalf("ignored %v, want %v", s.Report.Ignored, wantIgnored)
	}
	if len(s.Turns) != 2 {
		t.Fatalf("%d turns, want 2 (the resumed session's turn too)", len(s.Turns))
	}
	want := []rollout.ItemType{rollout.ItemUserMessage, rollout.ItemReasoning, rollout.ItemToolCall, rollout.ItemToolResult,
		rollout.ItemToolCall, rollout.ItemToolResult, rollout.ItemAgentMessage}
	t1 := s.Turns[0]
	if got := kinds(t1); !slices.Equal(got, want) || t1.Items[4].Name != "web_search" || t1.Items[5].CallID != "srvtoolu_1" ||
		!strings.Contains(t1.Items[5].Text, "https://example.com/flaky") || t1.Model != "claude-opus-4-5" {
		t.Fatalf("turn 1: %v %+v", got, t1.Items)
	}
	if s.Turns[1].Items[0].Text != "Raise the deadline to 1s." {
		t.Fatalf("turn 2: %+v", s.Turns[1].Items)
	}
}

// The name: custom-title, else agent-name, else ai-title, else the
// summary of a message in the file.
func TestClaudeCodeNameOrder(t *testing.T) {
	base := `{"type":"user","sessionId":"s","uuid":"a","message":{"role":"user","content":"hi"}}` + "\n"
	for _, c := range []struct{ lines, want string }{
		{`{"type":"summary","summary":"elsewhere","leafUuid":"zz"}` + "\n" + `{"type":"summary","summary":"here","leafUuid":"a"}` + "\n" + `{"type":"summary","summary":"later elsewhere","leafUuid":"yy"}` + "\n", "here"},
		{`{"type":"summary","summary":"sum","leafUuid":"a"}` + "\n" + `{"type":"ai-title","aiTitle":"ai","sessionId":"s"}` + "\n", "ai"},
		{`{"type":"ai-title","aiTitle":"ai","sessionId":"s"}` + "\n" + `{"type":"agent-name","agentName":"agent","sessionId":"s"}` + "\n", "agent"},
		{`{"type":"custom-title","customTitle":"one","sessionId":"s"}` + "\n" + `{"type":"agent-name","agentName":"agent","sessionId":"s"}` + "\n" + `{"type":"custom-title","customTitle":"two","sessionId":"s"}` + "\n", "two"},
	} {
		s, err := readBytes("claude-code", []byte(base+c.lines), "x.jsonl")
		if err != nil || s.Name != c.want {
			t.Errorf("%q: name %q, want %q (%v)", c.lines, s.Name, c.want, err)
		}
	}
}
