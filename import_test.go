package rolloutdb_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/importer"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// A Claude Code session imported: its turns and items, name, usage and
// times; the skipped lines kept as diagnostics; importing it again changes
// nothing; importing it grown appends only the new turn.
func TestImportClaudeCodeIsIdempotentAndIncremental(t *testing.T) {
	db := importDB(t)
	src := "testdata/import/claude-code/session.jsonl"
	s, err := openSource("claude-code", src)
	if err != nil {
		t.Fatal(err)
	}
	res, err := importFrom(db, s, rolloutdb.ImportOptions{})
	if err != nil || !res.Created || res.Turns != 2 || len(res.Damaged) != 2 || len(res.Unknown) != 1 {
		t.Fatalf("first import: %+v, %v", res, err)
	}
	info, err := db.ThreadInfo(ctx, res.ID)
	if err != nil || info.Name != "Fix the nil map panic" || info.Turns != 2 || info.Source.Kind != rolloutdb.SourceImport || info.Usage.OutputTokens != 55 {
		t.Fatalf("imported thread: %+v, %v", info, err)
	}
	turns, err := db.Turns(ctx, res.ID, 1, 2)
	if err != nil || len(turns) != 2 || !turns[0].StartedAt.Equal(time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)) ||
		turns[1].EndedAt == nil || !turns[1].EndedAt.Equal(time.Date(2026, 11, 20, 10, 1, 3, 0, time.UTC)) {
		t.Fatalf("turn times (want the source's): %+v, %v", turns, err)
	}
	diags, err := db.Business().Diagnostics(ctx, res.ID)
	if err != nil || len(diags) != 3 {
		t.Fatalf("diagnostics: %+v, %v", diags, err)
	}
	th, st, err := db.Resume(ctx, res.ID, rolloutdb.ResumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Turns) != 2 || len(st.Turns[0].Items) != 7 || st.Turns[1].Items[2].Status != rollout.ItemFailed || len(st.Interrupted) != 0 {
		t.Fatalf("resumed: %+v", st.Turns)
	}
	last := th.LastSeq()
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}

	again, err := importFrom(db, s, rolloutdb.ImportOptions{})
	if err != nil || again.Created || again.Turns != 0 || again.Existing != 2 {
		t.Fatalf("second import: %+v, %v", again, err)
	}
	if th, err := db.OpenThread(ctx, res.ID); err != nil || th.LastSeq() != last {
		t.Fatalf("the second import wrote records: %v", err)
	} else {
		th.Close()
	}

	// The session grew.
	a, _ := os.ReadFile(src)
	b, _ := os.ReadFile("testdata/import/claude-code/grown.jsonl")
	grown := grownFile(t, "session.jsonl", a, b)
	g, err := openSource("claude-code", grown)
	if err != nil {
		t.Fatal(err)
	}
	dry, err := importFrom(db, g, rolloutdb.ImportOptions{DryRun: true})
	if err != nil || dry.Turns != 1 || dry.Existing != 2 {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	more, err := importFrom(db, g, rolloutdb.ImportOptions{})
	if err != nil || more.ID != res.ID || more.Turns != 1 || more.Existing != 2 {
		t.Fatalf("import of the grown session: %+v, %v", more, err)
	}
	if info, err := db.ThreadInfo(ctx, res.ID); err != nil || info.Turns != 3 || info.Preview != "Why does main.go panic?" {
		t.Fatalf("after the grown import: %+v, %v", info, err)
	}
}

// A Claude Code session's subagents become subagent threads with open
// edges (they archive with it); each turn keeps its exact model history; a
// compaction the grown session adds after the last imported turn becomes
// the checkpoint Resume starts the model history from.
func TestImportClaudeCodeSubagentsAndCompaction(t *testing.T) {
	db := importDB(t)
	src := "testdata/import/claude-code/session.jsonl"
	s, err := openSource("claude-code", src)
	if err != nil {
		t.Fatal(err)
	}
	res, err := importFrom(db, s, rolloutdb.ImportOptions{})
	if err != nil || len(res.Subagents) != 2 || res.Subagents[1].Parent != res.ID || res.Subagents[1].Turns != 1 {
		t.Fatalf("import: %+v, %v", res, err)
	}
	sub, err := db.ThreadInfo(ctx, res.Subagents[1].ID)
	if err != nil || sub.Source.Kind != rollout.SourceSubagent || sub.Source.Parent != res.ID || sub.Source.Root != res.ID || sub.Source.Depth != 1 || sub.Items != 4 {
		t.Fatalf("subagent thread: %+v, %v", sub, err)
	}
	edges, err := db.Business().Edges(ctx, projection.EdgeFilter{Parent: res.ID})
	if err != nil || len(edges) != 2 || edges[0].Status != projection.EdgeOpen {
		t.Fatalf("edges: %+v, %v", edges, err)
	}
	th, st, err := db.Resume(ctx, res.ID, rolloutdb.ResumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	th.Close()
	if len(st.ModelHistory) != 8 || !strings.Contains(string(st.ModelHistory[0]), "Why does main.go panic?") || len(st.Report.RebuiltTurns) != 0 {
		t.Fatalf("model history: %d messages %q", len(st.ModelHistory), st.ModelHistory)
	}

	// Grown: a compaction, then a turn.
	a, _ := os.ReadFile(src)
	b, _ := os.ReadFile("testdata/import/claude-code/grown.jsonl")
	grown := grownFile(t, "4f35e220-c435-4cf7-b9b9-f40426042847.jsonl", a, b)
	g, err := openSource("claude-code", grown)
	if err != nil {
		t.Fatal(err)
	}
	more, err := importFrom(db, g, rolloutdb.ImportOptions{})
	if err != nil || more.Turns != 1 || more.Checkpoints != 1 || more.Subagents[0].Turns != 0 {
		t.Fatalf("grown import: %+v, %v", more, err)
	}
	th, st, err = db.Resume(ctx, res.ID, rolloutdb.ResumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	th.Close()
	if st.Report.Checkpoint == nil || st.Report.Checkpoint.ID != "k-k1" || len(st.ModelHistory) != 3 || !strings.Contains(string(st.ModelHistory[0]), "being continued") {
		t.Fatalf("after the compaction: checkpoint %+v, history %q", st.Report.Checkpoint, st.ModelHistory)
	}
	if again, err := importFrom(db, g, rolloutdb.ImportOptions{}); err != nil || again.Turns != 0 || again.Checkpoints != 0 {
		t.Fatalf("third import: %+v, %v", again, err)
	}

	// The subagents archive with their parent.
	rep, err := db.Archive(ctx, res.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Threads) != 3 {
		t.Fatalf("archive moved %v, want the session and its 2 subagents", rep.Threads)
	}
}

// A craft-agents session: its name, labels, flag and status on the
// thread, its session-wide token usage on the thread (its compaction
// notice holds no summary: no checkpoint), its Task's inner tools a
// subagent thread; the file
// rewritten with a new turn and a changed header gets the turn, the new
// usage and the new label.
func TestImportCraftAgents(t *testing.T) {
	db := importDB(t)
	src := "testdata/import/craft-agents/sessions/260120-quiet-lake/session.jsonl"
	s, err := openSource("craft-agents", src)
	if err != nil {
		t.Fatal(err)
	}
	res, err := importFrom(db, s, rolloutdb.ImportOptions{})
	if err != nil || res.ID != "ca-260120-quiet-lake" || res.Turns != 2 || res.Checkpoints != 0 || len(res.Subagents) != 1 || len(res.Damaged) != 2 || len(res.Unknown) != 1 {
		t.Fatalf("import: %+v, %v", res, err)
	}
	info, err := db.ThreadInfo(ctx, res.ID)
	if err != nil || info.Name != "Flaky upload test" || !slices.Equal(info.Labels, []string{"bug", "area::ci"}) || !info.Flags["flagged"] ||
		info.CreatedAt.UnixMilli() != 1763632800000 || info.UpdatedAt.UnixMilli() != 1763633002000 ||
		info.State != "in-progress" || info.Usage.InputTokens != 4200 || info.Usage.OutputTokens != 610 || info.CheckpointOffset != 0 {
		t.Fatalf("thread: %+v, %v", info, err)
	}
	if list, err := db.List(ctx, projection.ListOptions{State: "in-progress"}); err != nil || len(list.Threads) != 1 || list.Threads[0].ID != res.ID {
		t.Fatalf("list by the imported status: %+v, %v", list, err)
	}
	if sub, err := db.ThreadInfo(ctx, res.Subagents[0].ID); err != nil || sub.Name != "Search the CI logs" || sub.Source.Parent != res.ID || sub.Items != 4 {
		t.Fatalf("subagent: %+v, %v", sub, err)
	}

	// craft-agents rewrites the file: the header changed, a turn added.
	a, _ := os.ReadFile(src)
	lines := strings.SplitN(string(a), "\n", 2)
	header := strings.NewReplacer(`"inputTokens":4200`, `"inputTokens":5000`, `"labels":["bug","area::ci"]`, `"labels":["bug","area::ci","retry"]`).Replace(lines[0])
	extra, _ := os.ReadFile("testdata/import/craft-agents/grown-lines.jsonl")
	dir := filepath.Join(t.TempDir(), "sessions", "260120-quiet-lake")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "session.jsonl"), []byte(header+"\n"+lines[1]+string(extra)), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := openSource("craft-agents", filepath.Join(dir, "session.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	more, err := importFrom(db, g, rolloutdb.ImportOptions{})
	if err != nil || more.Turns != 1 || more.Existing != 2 || more.Checkpoints != 0 {
		t.Fatalf("grown import: %+v, %v", more, err)
	}
	info, err = db.ThreadInfo(ctx, res.ID)
	if err != nil || info.Turns != 3 || info.Usage.InputTokens != 5000 || !slices.Contains(info.Labels, "retry") {
		t.Fatalf("after the grown import: %+v, %v", info, err)
	}
	before := info.ProjectedSeq
	if again, err := importFrom(db, g, rolloutdb.ImportOptions{}); err != nil || again.Turns != 0 {
		t.Fatalf("third import: %+v, %v", again, err)
	}
	if info, err := db.ThreadInfo(ctx, res.ID); err != nil || info.ProjectedSeq != before {
		t.Fatalf("the third import wrote records: seq %d, was %d (%v)", info.ProjectedSeq, before, err)
	}
}

// DotCraft: a subagent imported before its parent gets its edge when it is
// imported again after the parent; a failed turn is aborted; the last
// turn, still running, is imported once the source has ended it.
func TestImportDotCraft(t *testing.T) {
	db := importDB(t)
	dir := "testdata/import/dotcraft/.craft/threads/active/"
	read := func(path string) source {
		t.Helper()
		s, err := openSource("dotcraft", path)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sub := read(dir + "thread_20260505_sub001.jsonl")
	first, err := importFrom(db, sub, rolloutdb.ImportOptions{})
	if err != nil || first.Parent != "" || len(first.Notes) != 1 || !strings.Contains(first.Notes[0].Reason, "not imported") {
		t.Fatalf("the subagent before its parent: %+v, %v", first, err)
	}
	res, err := importFrom(db, read(dir+"thread_20260505_k3v9qa.jsonl"), rolloutdb.ImportOptions{})
	if err != nil || res.Turns != 2 || res.Checkpoints != 1 {
		t.Fatalf("the parent: %+v, %v", res, err)
	}
	if again, err := importFrom(db, sub, rolloutdb.ImportOptions{}); err != nil || again.Turns != 0 || again.Parent != res.ID {
		t.Fatalf("the subagent again: %+v, %v", again, err)
	}
	edges, err := db.Business().Edges(ctx, projection.EdgeFilter{Parent: res.ID})
	if err != nil || len(edges) != 1 || edges[0].Child != first.ID {
		t.Fatalf("edges: %+v, %v", edges, err)
	}
	turns, err := db.Turns(ctx, res.ID, 1, 10)
	if err != nil || len(turns) != 2 || turns[0].Status != rollout.TurnStatusCompleted || turns[1].Status != rollout.TurnStatusAborted {
		t.Fatalf("turns: %+v, %v", turns, err)
	}
	th, st, err := db.Resume(ctx, res.ID, rolloutdb.ResumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	th.Close()
	// The summary, then turn 2 (no exact history: rebuilt from its items).
	if st.Report.Checkpoint == nil || len(st.ModelHistory) != 4 || !strings.Contains(string(st.ModelHistory[0]), "Summary:") {
		t.Fatalf("resume from the compaction: %+v %q", st.Report.Checkpoint, st.ModelHistory)
	}

	// DotCraft ends the running turn.
	a, _ := os.ReadFile(dir + "thread_20260505_k3v9qa.jsonl")
	done := `{"kind":"item_appended","timestamp":"2026-05-05T07:30:09+00:00","itemAppended":{"turnId":"turn_003","item":{"id":"item_002","turnId":"turn_003","type":"AgentMessage","status":"Completed","createdAt":"2026-05-05T07:30:09+00:00","completedAt":"2026-05-05T07:30:09+00:00","payload":{"text":"All tests pass."}}}}
{"kind":"turn_completed","timestamp":"2026-05-05T07:30:10+00:00","turnCompleted":{"turnId":"turn_003","status":"Completed","completedAt":"2026-05-05T07:30:10+00:00","tokenUsage":{"inputTokens":100,"outputTokens":5,"totalTokens":105},"error":null}}
`
	grown := grownFile(t, "thread_20260505_k3v9qa.jsonl", a, []byte(done))
	more, err := importFrom(db, read(grown), rolloutdb.ImportOptions{})
	if err != nil || more.Turns != 1 || more.Existing != 2 || more.Checkpoints != 0 {
		t.Fatalf("after the turn ended: %+v, %v", more, err)
	}
	if info, err := db.ThreadInfo(ctx, res.ID); err != nil || info.Turns != 3 || info.Name != "Fix failing parser test" {
		t.Fatalf("thread: %+v, %v", info, err)
	}
}

// A DotCraft rollback of a turn imported before is a rollback in the
// thread; the turn that takes its number is a new one.
func TestImportDotCraftRollback(t *testing.T) {
	db := importDB(t)
	src := "testdata/import/dotcraft/.craft/threads/archived/thread_20260430_p0c2mz.jsonl"
	a, _ := os.ReadFile(src)
	head := grownFile(t, "thread_20260430_p0c2mz.jsonl", []byte(strings.Join(strings.SplitAfter(string(a), "\n")[:11], "")))
	s, err := openSource("dotcraft", head)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := importFrom(db, s, rolloutdb.ImportOptions{}); err != nil || res.Turns != 2 {
		t.Fatalf("before the rollback: %+v, %v", res, err)
	}
	s, err = openSource("dotcraft", src)
	if err != nil {
		t.Fatal(err)
	}
	res, err := importFrom(db, s, rolloutdb.ImportOptions{})
	if err != nil || res.RolledBack != 1 || res.Turns != 1 || res.Existing != 1 {
		t.Fatalf("after the rollback: %+v, %v", res, err)
	}
	turns, err := db.Turns(ctx, res.ID, 1, 10)
	if err != nil || len(turns) != 2 || turns[1].ID != "t-turn_002-1777518000000" {
		t.Fatalf("turns: %+v, %v", turns, err)
	}
	if again, err := importFrom(db, s, rolloutdb.ImportOptions{}); err != nil || again.RolledBack != 0 || again.Turns != 0 {
		t.Fatalf("again: %+v, %v", again, err)
	}
}

// A turn whose exact history is larger than a frame is written in
// several records, and resume has all of it. (The limits are lowered: 64
// KiB a frame, 192 KiB a record, for 1 MiB of tool results.)
func TestImportLargeTurn(t *testing.T) {
	db := importDB(t)
	rolloutdb.SetImportLimitsForTest(db, 64<<10, 192<<10)
	var b strings.Builder
	b.WriteString(`{"type":"user","sessionId":"big","uuid":"p","message":{"role":"user","content":"read them all"}}` + "\n")
	// A compaction early in the turn: its checkpoint would hold the 1 MiB
	// after it, too large for a record; it is left out, the turn is not.
	b.WriteString(`{"type":"system","subtype":"compact_boundary","sessionId":"big","uuid":"k","parentUuid":"p"}` + "\n")
	b.WriteString(`{"type":"user","isCompactSummary":true,"sessionId":"big","uuid":"k2","parentUuid":"k","message":{"role":"user","content":"summary"}}` + "\n")
	out := strings.Repeat("y", 50<<10)
	for i := range 20 {
		fmt.Fprintf(&b, `{"type":"user","sessionId":"big","uuid":"r%d","parentUuid":"p","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t%d","content":"%s"}]}}`+"\n", i, i, out)
	}
	path := grownFile(t, "big.jsonl", []byte(b.String()))
	s, err := openSource("claude-code", path)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := importFrom(db, s, rolloutdb.ImportOptions{}); err != nil || res.Turns != 1 || res.Checkpoints != 0 ||
		len(res.Notes) != 1 || !strings.Contains(res.Notes[0].Reason, "too large") {
		t.Fatalf("import: %+v, %v", res, err)
	}
	if again, err := importFrom(db, s, rolloutdb.ImportOptions{}); err != nil || again.Turns != 0 {
		t.Fatalf("again: %+v, %v", again, err)
	}
	th, st, err := db.Resume(ctx, "cc-big", rolloutdb.ResumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	th.Close()
	if len(st.ModelHistory) != 21 || len(st.Report.RebuiltTurns) != 0 {
		t.Fatalf("model history of %d messages (rebuilt %v), want 21 exact", len(st.ModelHistory), st.Report.RebuiltTurns)
	}
}

// importDB is a new workspace, closed at the end of the test.
func importDB(t *testing.T) *rolloutdb.DB {
	t.Helper()
	db, err := rolloutdb.Open(ctx, t.TempDir(), rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// grownFile writes name in a new directory: the parts one after another
// (a source file as it is, then what its tool added).
func grownFile(t *testing.T, name string, parts ...[]byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, bytes.Join(parts, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// source is a session file to import: each import reads it again.
type source struct{ format, path string }

// openSource checks that path opens as a session of format.
func openSource(format, path string) (source, error) {
	r, err := importer.Open(format, path)
	if err != nil {
		return source{}, err
	}
	return source{format, path}, r.Close()
}

// importFrom imports the session at src.
func importFrom(db *rolloutdb.DB, src source, o rolloutdb.ImportOptions) (rolloutdb.ImportResult, error) {
	r, err := importer.Open(src.format, src.path)
	if err != nil {
		return rolloutdb.ImportResult{}, err
	}
	defer r.Close()
	return db.Import(ctx, r, o)
}
