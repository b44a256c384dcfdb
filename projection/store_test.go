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
		mark := filepath.Join(w.root, rollout.JournalDir, rollout.StaleMark)
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
