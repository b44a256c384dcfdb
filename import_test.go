package rolloutdb_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/importer"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// A Claude Code session imported: its turns and items, name, usage and
// times; the skipped lines kept as diagnostics; importing it again changes
// nothing; importing it grown appends only the new turn.
func TestImportClaudeCodeIsIdempotentAndIncremental(t *testing.T) {
	db, err := rolloutdb.Open(ctx, t.TempDir(), rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	src := "importer/testdata/claude-code/session.jsonl"
	s, err := importer.Read("claude-code", src)
	if err != nil {
		t.Fatal(err)
	}
	res, err := db.Import(ctx, s, rolloutdb.ImportOptions{})
	if err != nil || !res.Created || res.Turns != 2 || len(res.Skipped) != 3 {
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
	if len(st.Turns) != 2 || len(st.Turns[0].Items) != 6 || st.Turns[1].Items[2].Status != rollout.ItemFailed || len(st.Interrupted) != 0 {
		t.Fatalf("resumed: %+v", st.Turns)
	}
	last := th.LastSeq()
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}

	again, err := db.Import(ctx, s, rolloutdb.ImportOptions{})
	if err != nil || again.Created || again.Turns != 0 || again.Existing != 2 {
		t.Fatalf("second import: %+v, %v", again, err)
	}
	if th, err := db.OpenThread(ctx, res.ID); err != nil || th.LastSeq() != last {
		t.Fatalf("the second import wrote records: %v", err)
	} else {
		th.Close()
	}

	// The session grew.
	grown := filepath.Join(t.TempDir(), "session.jsonl")
	a, _ := os.ReadFile(src)
	b, _ := os.ReadFile("importer/testdata/claude-code/grown.jsonl")
	if err := os.WriteFile(grown, append(a, b...), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := importer.Read("claude-code", grown)
	if err != nil {
		t.Fatal(err)
	}
	dry, err := db.Import(ctx, g, rolloutdb.ImportOptions{DryRun: true})
	if err != nil || dry.Turns != 1 || dry.Existing != 2 {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	more, err := db.Import(ctx, g, rolloutdb.ImportOptions{})
	if err != nil || more.ID != res.ID || more.Turns != 1 || more.Existing != 2 {
		t.Fatalf("import of the grown session: %+v, %v", more, err)
	}
	if info, err := db.ThreadInfo(ctx, res.ID); err != nil || info.Turns != 3 || info.Preview != "Why does main.go panic?" {
		t.Fatalf("after the grown import: %+v, %v", info, err)
	}
}
