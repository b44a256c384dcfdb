package projection

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// reviewSize is a rollout's size on disk.
func reviewSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// reviewCompareRebuild fails when the store's projection is not what a
// fresh rebuild gives.
func reviewCompareRebuild(t *testing.T, w *workspace, s *Store) {
	t.Helper()
	if err := s.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	fresh := w.open("")
	if got, want := dump(t, s), dump(t, fresh); got != want {
		t.Fatalf("projection differs from a rebuild (+ projected, - rebuilt):\n%s", dumpDiff(got, want))
	}
}

// A rollout loses its last frames (a crash under SyncNever/SyncInterval
// loses frames the projector already applied; the writer cuts what is left
// of them), then the thread goes on and grows past the size the projection
// had read to, before any read. Same file id, size >= projected_offset:
// catchUp reads incrementally from the old projected offset, which is now
// in the middle of other records, and keeps the lost turn.
func TestRegressTruncatedThenAppendedPastOldSize(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open("")
	w.store = s
	w.create("t1", rollout.Source{})
	w.turn("t1", "a", "first question")
	cut := reviewSize(t, w.path("t1"))
	w.turn("t1", "b", "second question, lost in the crash")
	if _, err := s.Thread(ctx, "t1"); err != nil {
		t.Fatal(err)
	}

	// The crash: frames after cut never reached the disk.
	if err := w.writers["t1"].Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(w.path("t1"), cut); err != nil {
		t.Fatal(err)
	}
	wr, _, err := rollout.Open(ctx, w.path("t1"), "t1", w.writerOpts())
	if err != nil {
		t.Fatal(err)
	}
	w.writers["t1"] = wr
	for i := range 3 {
		w.turn("t1", fmt.Sprintf("c%d", i), fmt.Sprintf("later question %d", i))
	}

	st, err := recovery.ResumeFile(ctx, nil, w.path("t1"), recovery.Options{ThreadID: "t1", WorkspaceID: testWorkspace})
	if err != nil {
		t.Fatal(err)
	}
	turns, err := s.Turns(ctx, "t1", 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, tu := range turns {
		got = append(got, tu.ID)
	}
	for _, tu := range st.Turns {
		want = append(want, tu.ID)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("projected turns %v, resume sees %v", got, want)
	}
	reviewCompareRebuild(t, w, s)
}

// A second header that differs from the first only in its source's client
// (or root, or depth) is an identity conflict for resume (sameIdentity
// compares the whole Source); the projection compares only kind and parent,
// so the thread is listed and searched as if nothing were wrong.
func TestRegressSecondHeaderConflictNotFlagged(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open("")
	w.store = s
	w.create("t1", rollout.Source{})
	w.turn("t1", "a", "hello")
	w.append("t1", rec(t, rollout.KindThreadOpened, "", rollout.ThreadOpened{ThreadID: "t1", WorkspaceID: testWorkspace,
		Source: rollout.Source{Kind: rollout.SourceUser, Client: "someone-else"}}))

	_, rerr := recovery.ResumeFile(ctx, nil, w.path("t1"), recovery.Options{ThreadID: "t1", WorkspaceID: testWorkspace})
	if rerr == nil {
		t.Skip("resume accepts the second header")
	}
	info, err := s.Thread(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if info.IdentityError == "" {
		t.Fatalf("resume fails (%v) but the projection lists the thread with no identity error", rerr)
	}
}

// A rollout whose seq 1 thread_opened record does not decode: resume
// refuses it (ErrNoHeader), the projection sets no identity error (the
// record is rejected as undecodable before any identity check), so the
// thread is listed as sound (search leaves it out only because its
// workspace_id stays "" and a WorkspaceID is configured).
func TestRegressUndecodableHeaderNotFlagged(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	bad, err := rollout.EncodeBody("not a header")
	if err != nil {
		t.Fatal(err)
	}
	now := w.now()
	item, err := rollout.EncodeBody(rollout.Item{ID: "u", Type: rollout.ItemUserMessage, Text: "zebra"})
	if err != nil {
		t.Fatal(err)
	}
	start, _ := rollout.EncodeBody(rollout.TurnStarted{Model: "m"})
	path, _ := rollout.ActivePath(w.root, "t1")
	frames := [][]rollout.Record{
		{{Seq: 1, Kind: rollout.KindThreadOpened, Time: now, Body: bad}},
		{{Seq: 2, Kind: rollout.KindTurnStarted, Time: now, Turn: "a", Body: start}, {Seq: 3, Kind: rollout.KindItemAppended, Time: now, Turn: "a", Body: item}},
	}
	if err := rollout.WriteFile(ctx, nil, path, "t1", frames, 0); err != nil {
		t.Fatal(err)
	}
	_, rerr := recovery.ResumeFile(ctx, nil, path, recovery.Options{ThreadID: "t1", WorkspaceID: testWorkspace})
	if rerr == nil {
		t.Skip("resume accepts the header")
	}
	s := w.open("")
	info, err := s.Thread(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if info.IdentityError == "" {
		t.Fatalf("resume fails (%v) but the projection lists the thread with no identity error", rerr)
	}
}

// An exact-history record that does not decode, for a turn not seen yet
// and with no turn open: resume's tieTurn creates the turn (its start was
// lost, it owns the record); the projection rejects the record before
// creating any turn. Visible turns differ.
func TestRegressUndecodableHistoryOfUnseenTurn(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open("")
	w.store = s
	w.create("t1", rollout.Source{})
	w.turn("t1", "a", "hello")
	bad, _ := rollout.EncodeBody("not model history")
	w.append("t1", rollout.Record{Kind: rollout.KindModelHistoryAppended, Turn: "ghost", Body: bad})

	st, err := recovery.ResumeFile(ctx, nil, w.path("t1"), recovery.Options{ThreadID: "t1", WorkspaceID: testWorkspace})
	if err != nil {
		t.Fatal(err)
	}
	turns, err := s.Turns(ctx, "t1", 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != len(st.Turns) {
		t.Fatalf("%d turns projected, resume sees %d", len(turns), len(st.Turns))
	}
}

// The preview is kept two ways: incrementally (the first user message with
// text, while the preview is "") and by a query at finish after a rollback
// (the first user message, text or not). Which one wins depends on how the
// records fall into transactions, so the projection of records applied in
// several batches differs from a rebuild applying them in one. A user
// message with no text (an attachment only) is enough.
func TestRegressPreviewDependsOnBatching(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open("")
	w.store = s
	w.create("t1", rollout.Source{})
	userTurn := func(turn, text string) {
		w.append("t1", rec(t, rollout.KindTurnStarted, turn, rollout.TurnStarted{Model: "m"}),
			rec(t, rollout.KindItemAppended, turn, rollout.Item{ID: turn + "-u", Type: rollout.ItemUserMessage, Text: text}),
			rec(t, rollout.KindTurnCompleted, turn, rollout.TurnCompleted{Status: rollout.TurnStatusCompleted}))
	}
	userTurn("a", "") // an attachment only
	userTurn("b", "second")
	w.append("t1", rec(t, rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: 1}))
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	userTurn("c", "third")
	reviewCompareRebuild(t, w, s)
}

// Enqueue does not check the thread id it is given, and the projector
// builds a path from it: a batch naming "../../../escape" makes the store
// read a rollout outside the data directory and keep a row for it.
func TestRegressEnqueuePathEscape(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open("")
	outside := filepath.Join(filepath.Dir(w.root), "escape"+rollout.RolloutExt)
	wr, err := rollout.Create(ctx, outside, rollout.ThreadOpened{ThreadID: "escape", WorkspaceID: testWorkspace, Source: rollout.Source{Kind: rollout.SourceUser}}, w.writerOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer wr.Close()
	r := rec(t, rollout.KindMetadataUpdated, "", rollout.MetadataUpdated{})
	res, err := wr.Append(ctx, []rollout.Record{r}, rollout.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := "../../../escape"
	s.Enqueue(Batch{Thread: id, Offset: res.Offset, End: res.End, Records: []rollout.Record{r}})
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s.w, `SELECT count(*) FROM threads WHERE id = ?`, id); n != 0 {
		var p string
		_ = s.w.QueryRow(`SELECT rollout_path FROM threads WHERE id = ?`, id).Scan(&p)
		t.Fatalf("the projector read %s (rollout_path %q), outside the data directory %s", outside, p, w.root)
	}
}

// Reads after Close dereference a nil *sql.DB (the write path returns
// "store closed"; the read path panics).
func TestRegressReadAfterClosePanics(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open("")
	w.create("t1", rollout.Source{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for name, read := range map[string]func() error{
		"Thread": func() error { _, err := s.Thread(ctx, "t1"); return err },
		"List":   func() error { _, err := s.List(ctx, ListOptions{}); return err },
		"Goals":  func() error { _, err := s.Goals(ctx, "t1"); return err },
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s after Close panics: %v", name, p)
				}
			}()
			_ = read()
		}()
	}
}

// A damaged frame read from the projected offset (read-repair) is kept as
// a diagnostic with first_seq 0 (the reader does not know the seq there);
// read from the start (rebuild, resume) it has the seq. The same damaged
// region becomes two diagnostics, not "once each".
func TestRegressDamageDiagnosticTwice(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open("")
	path, _ := rollout.ActivePath(w.root, "t1")
	wr, err := rollout.Create(ctx, path, rollout.ThreadOpened{ThreadID: "t1", WorkspaceID: testWorkspace, Source: rollout.Source{Kind: rollout.SourceUser}, Created: w.now()},
		rollout.Options{Sync: rollout.SyncAlways, Now: w.now})
	if err != nil {
		t.Fatal(err)
	}
	defer wr.Close()
	app := func(recs ...rollout.Record) rollout.AppendResult {
		res, err := wr.Append(ctx, recs, rollout.AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	app(rec(t, rollout.KindTurnStarted, "a", rollout.TurnStarted{Model: "m"}),
		rec(t, rollout.KindItemAppended, "a", rollout.Item{ID: "u", Type: rollout.ItemUserMessage, Text: "hi"}))
	if _, err := s.Thread(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	damaged := app(rec(t, rollout.KindItemAppended, "a", rollout.Item{ID: "x", Type: rollout.ItemAgentMessage, Text: "lost"}))
	app(rec(t, rollout.KindTurnCompleted, "a", rollout.TurnCompleted{Status: rollout.TurnStatusCompleted}))
	// Damage the frame header (its header CRC).
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, damaged.Offset+5); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, damaged.Offset+5); err != nil {
		t.Fatal(err)
	}
	f.Close()

	if _, err := s.Thread(ctx, "t1"); err != nil { // read-repair, from the projected offset
		t.Fatal(err)
	}
	if _, err := s.Rebuild(ctx, RebuildOptions{}); err != nil { // from the start
		t.Fatal(err)
	}
	d, err := s.Diagnostics(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if len(d) != 1 {
		t.Fatalf("one damaged region, %d diagnostics: %+v", len(d), d)
	}
}
