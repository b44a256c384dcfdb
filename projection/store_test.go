package projection

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rolloutdb/rolloutdb/journal"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
)

func TestProjectThreadsTurnsItems(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open(filepath.Join(t.TempDir(), "state.db"))
	w.store = s
	w.create("t1", rollout.Source{})
	w.create("t2", rollout.Source{Kind: rollout.SourceSubagent, Parent: "t1", Root: "t1", Depth: 1})
	for i := range 5 {
		w.turn("t1", fmt.Sprintf("a%d", i), fmt.Sprintf("question number %d about zebras", i))
	}
	w.turn("t2", "b0", "a subagent task about giraffes")
	name := "Zebra study"
	w.append("t1", rec(t, rollout.KindMetadataUpdated, "", rollout.MetadataUpdated{Name: &name, Labels: []string{"zoo", "work"}}))

	info, err := s.Thread(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Turns != 5 || info.Items != 20 || info.Name != name || info.Preview != "question number 0 about zebras" || info.LastRole != "agent" {
		t.Fatalf("thread info: %+v", info)
	}
	if info.Usage.TotalTokens != 75 || info.Status != LocationActive || info.OpenTurn != "" || info.IdentityError != "" {
		t.Fatalf("thread info: %+v", info)
	}
	turns, err := s.Turns(ctx, "t1", 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 2 || turns[0].ID != "a1" || turns[1].Ordinal != 3 || turns[0].Status != rollout.TurnStatusCompleted {
		t.Fatalf("turns: %+v", turns)
	}
	items := turns[0].Items
	if len(items) != 4 || items[1].ID != "a1-a" || items[1].Text != "answer to question number 1 about zebras" || items[1].Status != rollout.ItemCompleted {
		t.Fatalf("items of turn 2 (the agent message's final version, in its first place): %+v", items)
	}
	sub, err := s.List(ctx, ListOptions{Parent: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sub.Threads) != 1 || sub.Threads[0].ID != "t2" || sub.Threads[0].Source.Depth != 1 {
		t.Fatalf("children of t1: %+v", sub)
	}
	byLabel, err := s.List(ctx, ListOptions{Label: "zoo"})
	if err != nil || len(byLabel.Threads) != 1 || byLabel.Threads[0].ID != "t1" {
		t.Fatalf("label zoo: %+v %v", byLabel, err)
	}
	hits, err := s.Search(ctx, "giraffes", SearchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 3 || hits[0].Thread != "t2" || hits[0].Snippet != "a subagent task about [giraffes]" {
		t.Fatalf("search giraffes: %+v", hits)
	}
	// The user's words are taken literally, not as FTS syntax.
	if hits, err := s.Search(ctx, `zebras" OR "giraffes`, SearchOptions{}); err != nil || len(hits) != 0 {
		t.Fatalf("literal query: %v %v", hits, err)
	}
	if _, err := s.Search(ctx, `zebras AND (`, SearchOptions{Raw: true}); !errors.Is(err, ErrBadQuery) {
		t.Fatalf("bad raw query: %v", err)
	}
	if hits, err := s.Search(ctx, `zebra*`, SearchOptions{Raw: true, Limit: 3}); err != nil || len(hits) != 3 {
		t.Fatalf("raw prefix query: %v %v", hits, err)
	}
}

func TestRollbackHidesTurnsAndSkipsLateRecords(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open("")
	w.store = s
	w.create("t1", rollout.Source{})
	for i := range 4 {
		w.turn("t1", fmt.Sprintf("a%d", i), fmt.Sprintf("word%d", i))
	}
	w.append("t1", rec(t, rollout.KindCheckpoint, "a1", rollout.Checkpoint{ID: "c1", CoveredTurn: "a1", Trigger: rollout.TriggerManual, ReplacementHistory: [][]byte{[]byte("s1")}}))
	cpOff := w.append("t1", rec(t, rollout.KindCheckpoint, "a3", rollout.Checkpoint{ID: "c3", CoveredTurn: "a3", Trigger: rollout.TriggerManual, ReplacementHistory: [][]byte{[]byte("s3")}})).Offset
	info, _ := s.Thread(ctx, "t1")
	if info.CheckpointOffset != cpOff {
		t.Fatalf("checkpoint offset %d, want %d", info.CheckpointOffset, cpOff)
	}
	w.append("t1", rec(t, rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: 2}))
	// A late record of a rolled-back turn does not bring it back.
	w.append("t1", rec(t, rollout.KindItemAppended, "a3", rollout.Item{ID: "late", Type: rollout.ItemAgentMessage, Text: "late word3"}))
	info, err := s.Thread(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Turns != 2 || info.Items != 8 || info.Usage.TotalTokens != 30 {
		t.Fatalf("after rollback: %+v", info)
	}
	cps, _ := s.Checkpoints(ctx, "t1")
	if len(cps) != 2 || info.CheckpointOffset != cps[0].Offset {
		t.Fatalf("the checkpoint of a rolled-back turn is not offered: %+v, offset %d", cps, info.CheckpointOffset)
	}
	if hits, _ := s.Search(ctx, "word3", SearchOptions{}); len(hits) != 0 {
		t.Fatalf("rolled-back items still searchable: %+v", hits)
	}
	// A new turn reusing a rolled-back id is a new turn.
	w.turn("t1", "a3", "again")
	turns, err := s.Turns(ctx, "t1", 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 3 || turns[2].ID != "a3" || turns[2].Ordinal != 3 || len(turns[2].Items) != 4 || turns[2].Items[0].Text != "again" {
		t.Fatalf("turns: %+v", turns)
	}
	if fresh := w.open(""); dump(t, fresh) != dump(t, s) {
		t.Fatalf("incremental projection differs from a rebuild:\n%s\nvs\n%s", dump(t, s), dump(t, fresh))
	}
}

func TestListPagesByCursor(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	const n = 130
	for i := range n {
		id := fmt.Sprintf("t%03d", i)
		w.create(id, rollout.Source{})
		if i%3 == 0 {
			w.append(id, rec(t, rollout.KindMetadataUpdated, "", rollout.MetadataUpdated{Labels: []string{"third"}}))
		}
	}
	// Touch a few so that updated order differs from created order.
	for _, id := range []string{"t005", "t100", "t050"} {
		w.turn(id, "x", "hello")
	}
	s := w.open("")
	for _, sortBy := range []Sort{SortUpdated, SortCreated} {
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			p, err := s.List(ctx, ListOptions{Sort: sortBy, Limit: 50, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, th := range p.Threads {
				got = append(got, th.ID)
			}
			if p.NextCursor == "" {
				if pages != 2 {
					t.Fatalf("sort %d: %d pages", sortBy, pages+1)
				}
				break
			}
			cursor = p.NextCursor
			// A thread created while paging does not shift later pages.
			if pages == 0 && sortBy == SortUpdated {
				w.create("zz-new", rollout.Source{})
			}
		}
		want := n
		if sortBy == SortCreated {
			want++ // zz-new, made during the first pass
		}
		if len(got) != want || len(slices.Compact(slices.Sorted(slices.Values(got)))) != want {
			t.Fatalf("sort %d: %d threads, want %d distinct: %v", sortBy, len(got), want, got)
		}
		if sortBy == SortUpdated && (got[0] != "t050" || got[1] != "t100" || got[2] != "t005") {
			t.Fatalf("most recently updated first: %v", got[:3])
		}
		if sortBy == SortCreated && (got[0] != "zz-new" || got[1] != "t129" || got[n] != "t000") {
			t.Fatalf("newest created first: %v ... %v", got[:2], got[n-1:])
		}
	}
	p, err := s.List(ctx, ListOptions{Label: "third", Limit: 1000})
	if err != nil || len(p.Threads) != 44 {
		t.Fatalf("label filter: %d threads, %v", len(p.Threads), err)
	}
	if _, err := s.List(ctx, ListOptions{Cursor: "bm9wZQ"}); !errors.Is(err, ErrBadCursor) {
		t.Fatalf("forged cursor: %v", err)
	}
	first, _ := s.List(ctx, ListOptions{Limit: 2})
	if _, err := s.List(ctx, ListOptions{Sort: SortCreated, Cursor: first.NextCursor}); !errors.Is(err, ErrBadCursor) {
		t.Fatalf("cursor of another sort: %v", err)
	}
}

func TestReadRepair(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	path := filepath.Join(t.TempDir(), "state.db")
	s := w.open(path)
	w.store = s
	w.create("t1", rollout.Source{})
	w.create("t2", rollout.Source{})
	w.create("t3", rollout.Source{})
	w.turn("t1", "a0", "one")
	w.turn("t2", "b0", "two")
	w.turn("t3", "c0", "three")
	seedBusiness(t, s, "t1", "t2")
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	biz := business(t, s)
	check := func(what string) {
		t.Helper()
		if got := business(t, s); got != biz {
			t.Fatalf("%s changed business state:\n%s\nwant\n%s", what, got, biz)
		}
		fresh := w.open("")
		if got, want := dump(t, s), dump(t, fresh); got != want {
			t.Fatalf("%s: projection differs from a rebuild:\n%s\nwant\n%s", what, got, want)
		}
	}

	t.Run("row missing", func(t *testing.T) {
		// Lost by hand: an operator's sqlite3, another connection.
		other, err := sql.Open("sqlite", "file:"+path)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		if _, err := other.Exec(`DELETE FROM threads WHERE id = 't2'`); err != nil {
			t.Fatal(err)
		}
		p, err := s.List(ctx, ListOptions{})
		if err != nil || len(p.Threads) != 3 {
			t.Fatalf("list: %+v %v", p, err)
		}
		info, err := s.Thread(ctx, "t2")
		if err != nil || info.Turns != 1 {
			t.Fatalf("t2: %+v %v", info, err)
		}
		check("row missing")
	})
	t.Run("row stale", func(t *testing.T) {
		w.feed = false // another process appends: the projector hears nothing
		w.turn("t1", "a1", "stale no more")
		w.feed = true
		p, err := s.List(ctx, ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Threads[0].ID != "t1" || p.Threads[0].Turns != 2 {
			t.Fatalf("stale row returned: %+v", p.Threads[0])
		}
		// A process that died before projecting what it appended leaves
		// its journal; its replay (by whoever opens next) marks the
		// projections stale, and every store sweeps once: Search finds
		// what the row did not have.
		w.feed = false
		w.turn("t3", "c1", "quokka")
		w.feed = true
		mark := filepath.Join(w.root, journal.Dir, journal.StaleMark)
		if err := os.MkdirAll(filepath.Dir(mark), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(mark, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		next := w.open(path) // the next process: it takes the mark
		if _, err := os.Stat(mark); !os.IsNotExist(err) {
			t.Fatalf("the stale mark is still there after an open: %v", err)
		}
		for _, st := range []*Store{s, next} {
			if hits, err := st.Search(ctx, "quokka", SearchOptions{}); err != nil || len(hits) != 3 {
				t.Fatalf("search over a stale row after the sweep mark: %+v %v", hits, err)
			}
		}
		check("row stale")
	})
	t.Run("rollout missing", func(t *testing.T) {
		_ = w.writers["t3"].Close()
		delete(w.writers, "t3")
		if err := os.Remove(w.path("t3")); err != nil {
			t.Fatal(err)
		}
		p, err := s.List(ctx, ListOptions{})
		if err != nil || len(p.Threads) != 2 {
			t.Fatalf("list after the rollout went: %+v %v", p, err)
		}
		if _, err := s.Thread(ctx, "t3"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("thread whose rollout is gone: %v", err)
		}
		check("rollout missing")
	})
	t.Run("rollout replaced", func(t *testing.T) {
		// Another file under t2's name (a restore from backup, a repair):
		// the projection starts over from it.
		other := newWorkspace(t)
		other.create("t2", rollout.Source{})
		other.turn("t2", "z0", "replacement one")
		other.turn("t2", "z1", "replacement two")
		other.turn("t2", "z2", "replacement three")
		_ = other.writers["t2"].Close()
		delete(other.writers, "t2")
		_ = w.writers["t2"].Close()
		delete(w.writers, "t2")
		if err := os.Rename(other.path("t2"), w.path("t2")); err != nil {
			t.Fatal(err)
		}
		info, err := s.Thread(ctx, "t2")
		if err != nil || info.Turns != 3 {
			t.Fatalf("replaced rollout: %+v %v", info, err)
		}
		turns, _ := s.Turns(ctx, "t2", 1, 1)
		if turns[0].ID != "z0" {
			t.Fatalf("old turns survived the replacement: %+v", turns)
		}
		check("rollout replaced")
	})
	t.Run("moved to archived", func(t *testing.T) {
		w.move("t1", LocationArchived)
		p, err := s.List(ctx, ListOptions{Scope: ScopeArchived})
		if err != nil || len(p.Threads) != 1 || p.Threads[0].ID != "t1" || p.Threads[0].Status != LocationArchived {
			t.Fatalf("archived list: %+v %v", p, err)
		}
		if hits, _ := s.Search(ctx, "stale", SearchOptions{}); len(hits) != 0 {
			t.Fatalf("archived thread searched by default: %+v", hits)
		}
		if hits, _ := s.Search(ctx, "stale", SearchOptions{IncludeArchived: true}); len(hits) != 3 {
			t.Fatalf("archived thread not searched when asked: %+v", hits)
		}
		check("moved")
	})
}

// A rollout loses its last frames (a crash under SyncNever/SyncInterval
// loses frames the projector already applied; the writer cuts what is left
// of them), then the thread goes on and grows past the size the projection
// had read to, before any read. Same file id, size >= projected_offset:
// the projection must still drop the lost turn and show what resume sees.
// From a review: catchUp read on from the old offset, now mid-record, and kept the lost turn.
func TestARolloutCutThenGrownPastItsProjectedSizeIsProjectedAnew(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open("")
	w.store = s
	w.create("t1", rollout.Source{})
	w.turn("t1", "a", "first question")
	cut := rolloutSize(t, w.path("t1"))
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
	checkEqualsRebuild(t, w, s)
}

func TestThreadIDsAreChecked(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open("")
	for _, id := range []string{"../x", "a/b", "", "UPPER"} {
		if _, err := s.Thread(ctx, id); !errors.Is(err, rollout.ErrInvalidThreadID) {
			t.Errorf("Thread(%q): %v", id, err)
		}
		if _, err := s.AddGoal(ctx, id, "x"); !errors.Is(err, rollout.ErrInvalidThreadID) {
			t.Errorf("AddGoal(%q): %v", id, err)
		}
	}
	// Files that are not rollouts of ours are left alone, not listed.
	if err := os.WriteFile(filepath.Join(w.root, rollout.ActiveDir, "Not An Id.rollout"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := s.List(ctx, ListOptions{}); err != nil || len(p.Threads) != 0 {
		t.Fatalf("list: %+v %v", p, err)
	}
}

// A batch naming thread "../../../escape" does not make the store read a
// rollout outside the data directory, nor keep a row for it.
// From a review: Enqueue did not check the thread id the projector builds a path from.
func TestEnqueueOfAThreadIDLeavingTheDataDirReadsNothing(t *testing.T) {
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

func TestDamagedRolloutsAreListedWithDiagnostics(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open("")
	w.create("t1", rollout.Source{})
	for i := range 3 {
		w.turn("t1", fmt.Sprintf("a%d", i), "hello")
	}
	w.append("t1", rollout.Record{Kind: "from_the_future", Body: []byte{0x80}})
	// A header naming another workspace.
	wr, err := rollout.Create(ctx, filepath.Join(w.root, rollout.ActiveDir, "t2.rollout"),
		rollout.ThreadOpened{ThreadID: "t2", WorkspaceID: "elsewhere", Source: rollout.Source{Kind: "user"}}, w.writerOpts())
	if err != nil {
		t.Fatal(err)
	}
	_ = wr.Close()
	// A file whose file header is garbage.
	if err := os.WriteFile(filepath.Join(w.root, rollout.ActiveDir, "t3.rollout"), make([]byte, 300), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := s.List(ctx, ListOptions{Limit: 10})
	if err != nil || len(p.Threads) != 3 {
		t.Fatalf("list: %+v %v", p, err)
	}
	byID := map[string]ThreadInfo{}
	for _, th := range p.Threads {
		byID[th.ID] = th
	}
	if byID["t1"].Damage != 1 || byID["t1"].IdentityError != "" || byID["t1"].Turns != 3 {
		t.Fatalf("t1: %+v", byID["t1"])
	}
	if byID["t2"].IdentityError == "" || byID["t3"].IdentityError == "" {
		t.Fatalf("identity problems not shown: %+v / %+v", byID["t2"], byID["t3"])
	}
	diags, err := s.Diagnostics(ctx, "t1")
	if err != nil || len(diags) != 1 || diags[0].Reason != "unknown_kind" || diags[0].Kind != "from_the_future" {
		t.Fatalf("diagnostics: %+v %v", diags, err)
	}
	// A rebuild sees the same record again: still one diagnostic.
	if _, err := s.Rebuild(ctx, RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	if diags, _ := s.Diagnostics(ctx, ""); len(diags) != 1 {
		t.Fatalf("diagnostics after rebuild: %+v", diags)
	}
}

// A damaged frame read from the projected offset (read-repair, where the
// reader does not know the seq) and then from the start (rebuild, resume,
// where it does) is one diagnostic, not two.
// From a review: read-repair kept it with first_seq 0, the rebuild with its seq.
func TestADamagedRegionIsOneDiagnostic(t *testing.T) {
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

// A second header that differs from the first only in its source's client
// (or root, or depth) is an identity conflict for resume (sameIdentity
// compares the whole Source); the projection flags the thread too.
// From a review: the projection compared only kind and parent, and showed the thread as sound.
func TestASecondHeaderOfAnotherSourceIsAnIdentityError(t *testing.T) {
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
// refuses it (ErrNoHeader), and the projection lists it with an identity
// error.
// From a review: the record was rejected before any identity check; the thread listed as sound.
func TestAnUndecodableHeaderIsAnIdentityError(t *testing.T) {
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
// lost, it owns the record); the projection shows the same turns.
// From a review: the projection rejected the record before creating any turn.
func TestUndecodableHistoryOfAnUnseenTurnIsProjectedAsResumeSeesIt(t *testing.T) {
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
// (the first user message, text or not). Records applied in several
// batches give the preview a rebuild applying them in one gives. A user
// message with no text (an attachment only) is enough to tell.
// From a review: which way won depended on how records fell into transactions.
func TestPreviewDoesNotDependOnBatching(t *testing.T) {
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
	checkEqualsRebuild(t, w, s)
}

// A turn made by a record whose turn's start was lost is the last
// visible turn, with no end record: the open turn, as a rebuild (and
// resume) has it, however the records fell into transactions.
// From the fleet index's comparison with state.db: the open turn was
// found again only when a turn started or ended.
func TestATurnWhoseStartWasLostIsTheOpenTurn(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open("")
	w.store = s
	w.create("t1", rollout.Source{})
	w.append("t1", rec(t, rollout.KindTurnStarted, "a", rollout.TurnStarted{}))
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	w.append("t1", rec(t, rollout.KindItemAppended, "b", rollout.Item{ID: "b0", Type: rollout.ItemAgentMessage, Text: "its start was lost"}))
	info, err := s.Thread(ctx, "t1")
	if err != nil || info.OpenTurn != "b" || info.Turns != 2 {
		t.Fatalf("open turn %q of %d turns, want b: %v", info.OpenTurn, info.Turns, err)
	}
	checkEqualsRebuild(t, w, s)
}
