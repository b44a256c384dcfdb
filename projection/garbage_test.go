package projection

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/cockroachdb/errors"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// searchItems runs a search and returns "thread/item" of each hit, sorted.
func searchItems(t *testing.T, s *Store, q string, raw bool) []string {
	t.Helper()
	return searchWith(t, s, q, SearchOptions{Raw: raw, IncludeArchived: true, Limit: 500})
}

func searchWith(t *testing.T, s *Store, q string, o SearchOptions) []string {
	t.Helper()
	hits, err := s.Search(context.Background(), q, o)
	if err != nil {
		t.Fatalf("search %q: %v", q, err)
	}
	var out []string
	for _, h := range hits {
		out = append(out, h.Thread+"/"+h.Item)
	}
	slices.Sort(out)
	return out
}

// The index never deletes (index.go): an item's older version, a rolled
// back turn and a dropped thread leave their words under their rowids.
// Search must return exactly what an index without them returns, across a
// reopen, for a reused thread key, and with NOT; a compaction removes them.
func TestSearchIgnoresWhatTheIndexLeftBehind(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	path := filepath.Join(w.root, "state.db")
	s := w.open(path)
	w.store = s
	w.create("t1", rollout.Source{})
	w.turn("t1", "a0", "alpha beta") // its agent message says "thinking", then "answer to alpha beta"
	w.turn("t1", "a1", "gamma")
	w.append("t1", rec(t, rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: 1}))
	w.create("t2", rollout.Source{})
	w.turn("t2", "b0", "delta")

	check := func(s *Store, when string) {
		t.Helper()
		for _, c := range []struct {
			q    string
			raw  bool
			want []string
		}{
			{"thinking", false, nil},                                      // an older version's word
			{"gamma", false, nil},                                         // a rolled-back turn's
			{"answer alpha", false, []string{"t1/a0-a"}},                  // the shown version
			{"answer NOT thinking", true, []string{"t1/a0-a", "t2/b0-a"}}, // NOT of a word only the older versions held
			{"alpha NOT result", true, []string{"t1/a0-a", "t1/a0-u"}},    // NOT that excludes a live item
			{"delta OR gamma", true, []string{"t2/b0-a", "t2/b0-r", "t2/b0-u"}},
		} {
			if got := searchItems(t, s, c.q, c.raw); !slices.Equal(got, c.want) {
				t.Errorf("%s: search %q = %v, want %v", when, c.q, got, c.want)
			}
		}
	}
	check(s, "before a reopen")
	if len(garbageOf(s)) == 0 {
		t.Fatal("no thread listed as holding garbage after a replaced version and a rollback")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = w.open(path)
	w.store = s
	check(s, "after a reopen")

	// t2 deleted for good; t3 made next takes its key (the highest tid
	// freed is handed out again), with its words at t2's old rowids.
	w.deleteThread(s, "t2")
	w.create("t3", rollout.Source{})
	w.turn("t3", "c0", "epsilon")
	var tid2, tid3 int64
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_ = s.r.QueryRow(`SELECT tid FROM threads WHERE id = 't3'`).Scan(&tid3)
	for tid := range s.idx.garbage {
		tid2 = max(tid2, tid)
	}
	if tid3 != tid2 {
		t.Fatalf("t3 did not take t2's key (%d, %d): the case this test is for did not happen", tid3, tid2)
	}
	for _, c := range []struct {
		q    string
		raw  bool
		want []string
	}{
		{"delta", false, nil},
		{"epsilon NOT delta", true, []string{"t3/c0-a", "t3/c0-r", "t3/c0-u"}},
		{"answer NOT thinking", true, []string{"t1/a0-a", "t3/c0-a"}},
	} {
		if got := searchItems(t, s, c.q, c.raw); !slices.Equal(got, c.want) {
			t.Errorf("after a delete: search %q = %v, want %v", c.q, got, c.want)
		}
	}

	// What is left behind is no damage to SQLite's (and FTS5's) check.
	if rep, err := s.CheckIntegrity(ctx); err != nil || !rep.OK() {
		t.Fatalf("integrity check with garbage in the index: %+v %v", rep, err)
	}
	before := dumpIndexWords(t, s)
	if !slices.Contains(before, "thinking") || !slices.Contains(before, "delta") {
		t.Fatalf("the index was expected to hold what it left behind: %v", before)
	}
	if err := s.idx.compactNow(ctx); err != nil {
		t.Fatal(err)
	}
	after := dumpIndexWords(t, s)
	if slices.Contains(after, "thinking") || slices.Contains(after, "delta") || slices.Contains(after, "gamma") {
		t.Fatalf("compaction kept words no item shows: %v", after)
	}
	if len(garbageOf(s)) != 0 {
		t.Fatalf("garbage listed after a compaction: %v", garbageOf(s))
	}
	if got := searchItems(t, s, "answer NOT thinking", true); !slices.Equal(got, []string{"t1/a0-a", "t3/c0-a"}) {
		t.Fatalf("after compaction: %v", got)
	}
	fresh := w.open("")
	if got, want := dump(t, s), dump(t, fresh); got != want {
		t.Fatalf("compacted index differs from a fresh build:\n%s", dumpDiff(got, want))
	}
}

// dumpIndexWords lists the distinct words the index holds.
func dumpIndexWords(t *testing.T, s *Store) []string {
	t.Helper()
	rows, err := s.idx.r.Query(`SELECT term FROM fts_terms ORDER BY term`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			t.Fatal(err)
		}
		out = append(out, w)
	}
	return out
}

// A compaction started by the garbage (not asked for) runs while threads
// are appended to, deleted and made; once swapped in, the index is what a
// fresh build makes.
func TestCompactionWhileThreadsChange(t *testing.T) {
	// Restored after the stores close (cleanups run last in, first out).
	n, b := compactMinGarbage, compactBatchThreads
	t.Cleanup(func() { compactMinGarbage, compactBatchThreads = n, b })
	compactMinGarbage, compactBatchThreads = 1, 1
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open(filepath.Join(w.root, "state.db"))
	w.store = s
	for i := range 12 {
		id := fmt.Sprintf("t%02d", i)
		w.create(id, rollout.Source{})
		w.turn(id, "a", fmt.Sprintf("word%d common", i))
	}
	if err := s.idx.flush(ctx); err != nil {
		t.Fatal(err)
	}
	s.idx.mu.Lock()
	swaps := s.idx.compactions
	s.idx.mu.Unlock()
	// Garbage: roll back most threads' only turn (4 items each).
	for i := range 10 {
		w.append(fmt.Sprintf("t%02d", i), rec(t, rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: 1}))
	}
	// While it compacts (a thread a step): more turns, a new thread, a delete.
	for i := range 12 {
		w.turn(fmt.Sprintf("t%02d", i), "b", fmt.Sprintf("later%d common", i))
	}
	w.create("t99", rollout.Source{})
	w.turn("t99", "a", "newcomer common")
	w.deleteThread(s, "t05")
	if err := s.idx.flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Wait for the swap the garbage started (not a timing: it must come).
	s.idx.mu.Lock()
	for s.idx.compactions == swaps && !s.idx.closed {
		s.idx.cond.Wait()
	}
	s.idx.mu.Unlock()
	if got := searchItems(t, s, "later3", false); len(got) != 3 {
		t.Fatalf("later3: %v", got)
	}
	if got := searchItems(t, s, "word3", false); len(got) != 0 {
		t.Fatalf("word3 (rolled back): %v", got)
	}
	if got := searchItems(t, s, "later5", false); len(got) != 0 {
		t.Fatalf("later5 (deleted): %v", got)
	}
	fresh := w.open("")
	if got, want := dump(t, s), dump(t, fresh); got != want {
		t.Fatalf("index after a compaction under writes differs from a fresh build:\n%s", dumpDiff(got, want))
	}
}

// Rows a deleted thread left (the highest tid: the newest rowids) must
// not crowd live matches out of a search's window, nor must a raw NOT's
// candidates the check drops.
func TestGarbageDoesNotCrowdTheWindow(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open(filepath.Join(w.root, "state.db"))
	w.store = s
	w.create("t1", rollout.Source{})
	w.turn("t1", "a", "common one")
	w.turn("t1", "b", "alpha")      // its agent message said "thinking" first
	w.turn("t1", "c", "alpha beta") // the newest alpha, excluded by NOT beta
	w.create("t2", rollout.Source{})
	for i := range 3 {
		w.turn("t2", fmt.Sprint("b", i), "common two")
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	w.deleteThread(s, "t2")
	cases := []struct {
		q string
		o SearchOptions
	}{
		{"common", SearchOptions{Limit: 3, Window: 3}},
		{"alpha NOT beta", SearchOptions{Raw: true, Limit: 3, Window: 3}},
		{"alpha NOT beta gamma", SearchOptions{Raw: true}}, // a NOT (beta gamma): phrases side by side are one unit
	}
	var before [][]string
	for _, c := range cases {
		before = append(before, searchWith(t, s, c.q, c.o))
	}
	if len(before[0]) != 3 || len(before[1]) != 3 || len(before[2]) != 6 {
		t.Fatalf("with garbage: %v", before)
	}
	if err := s.idx.compactNow(ctx); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		if after := searchWith(t, s, c.q, c.o); !slices.Equal(before[i], after) {
			t.Errorf("%q: %v with garbage, %v without", c.q, before[i], after)
		}
	}
}

// A raw query FTS5 refuses is refused with garbage in the index too (the
// part a NOT drops may be what is wrong with it).
func TestBadRawQueryWithGarbage(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open(filepath.Join(w.root, "state.db"))
	w.store = s
	w.create("t1", rollout.Source{})
	w.turn("t1", "a", "alpha gamma")
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(garbageOf(s)) == 0 {
		if err := s.idx.flush(ctx); err != nil || len(garbageOf(s)) == 0 {
			t.Fatal("no garbage to test with", err)
		}
	}
	for _, q := range []string{"(alpha NOT beta) gamma", "(alpha NOT beta) zeta", `alpha NOT "beta gamma"`, "alpha NOT (beta"} {
		if _, err := s.Search(ctx, q, SearchOptions{Raw: true}); !errors.Is(err, ErrBadQuery) {
			t.Errorf("%q: %v, want ErrBadQuery", q, err)
		}
	}
}

// A chunk of a thread's operations committed past its mark, then a crash
// before the rest (the mark, the newer version): the catch-up at the
// next open must list the thread, whose rows hold the older version's
// words, so that Search checks them.
func TestCatchUpListsWhatAChunkLeftPastTheMark(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	path := filepath.Join(w.root, "state.db")
	s := w.open(path)
	w.store = s
	w.create("t1", rollout.Source{})
	w.append("t1", rec(t, rollout.KindTurnStarted, "a", rollout.TurnStarted{Model: "m1"}),
		rec(t, rollout.KindItemAppended, "a", rollout.Item{ID: "u", Type: rollout.ItemUserMessage, Text: "hello"}))
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.idx.flush(ctx); err != nil {
		t.Fatal(err)
	}
	var tid, m0 int64
	if err := s.r.QueryRow(`SELECT tid, projected_seq FROM threads WHERE id = 't1'`).Scan(&tid, &m0); err != nil {
		t.Fatal(err)
	}
	w.append("t1", rec(t, rollout.KindItemAppended, "a", rollout.Item{ID: "x", Type: rollout.ItemAgentMessage, Status: rollout.ItemInProgress, Text: "thinking"}))
	w.append("t1", rec(t, rollout.KindItemAppended, "a", rollout.Item{ID: "x", Type: rollout.ItemAgentMessage, Status: rollout.ItemCompleted, Text: "answer"}))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// What a kill leaves when the chunk with "put x thinking" committed
	// and the one with "put x answer (replace)" and the mark did not: the
	// words past the mark, the thread not listed, the file not clean.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(w.root, "search.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DELETE FROM garbage`, fmt.Sprintf(`UPDATE indexed SET seq = %d WHERE tid = %d`, m0, tid),
		`UPDATE meta SET value = '0' WHERE key = 'clean'`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	_ = db.Close()
	s = w.open(path)
	w.store = s
	if got := searchItems(t, s, "thinking", false); len(got) != 0 {
		t.Fatalf("an item whose shown text lacks the word is returned: %v (listed: %v)", got, garbageOf(s))
	}
	if got := searchItems(t, s, "answer", false); len(got) != 1 {
		t.Fatalf("answer: %v", got)
	}
	_ = dump(t, s) // and the index holds nothing unlisted
}

// A thread whose copy failed during a compaction (its rollout away for a
// moment), written to before the swap, is indexed again whole after it.
func TestCompactionRedoesAThreadWhoseCopyFailed(t *testing.T) {
	ctx := context.Background()
	b := compactBatchThreads
	t.Cleanup(func() { compactBatchThreads, compactCopied = b, nil })
	compactBatchThreads = 1
	w := newWorkspace(t)
	s := w.open(filepath.Join(w.root, "state.db"))
	w.store = s
	w.create("t1", rollout.Source{})
	w.turn("t1", "a", "alpha")
	w.create("t2", rollout.Source{})
	w.turn("t2", "a", "beta")
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.idx.flush(ctx); err != nil {
		t.Fatal(err)
	}
	p := w.path("t1")
	if err := os.Rename(p, p+".away"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	compactCopied = func(tid int64, failed bool) {
		if failed {
			once.Do(func() {
				// Back, and written to: its operations reach fts_next,
				// the mark with them.
				if err := os.Rename(p+".away", p); err != nil {
					t.Error(err)
				}
				w.turn("t1", "b", "omega")
				if err := s.Flush(ctx); err != nil { // its operations queued for the index before the swap
					t.Error(err)
				}
			})
		}
	}
	if err := s.idx.compactNow(ctx); err != nil {
		t.Fatal(err)
	}
	fired := false
	once.Do(func() { fired = true })
	if fired {
		t.Fatal("no copy failed: the case this test is for did not happen")
	}
	if got := searchItems(t, s, "alpha", false); len(got) != 3 {
		t.Fatalf("t1's first turn after the swap: %v", got)
	}
	if got := searchItems(t, s, "omega", false); len(got) != 3 {
		t.Fatalf("t1's second turn after the swap: %v", got)
	}
	_ = dump(t, s)
}

// Searches running while compactions swap tables never return an item
// whose shown text lacks the word.
func TestSearchDuringSwaps(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open(filepath.Join(w.root, "state.db"))
	w.store = s
	w.create("t1", rollout.Source{})
	for round := range 5 {
		for i := range 40 {
			w.turn("t1", fmt.Sprintf("x%d-%d", round, i), "hello") // each agent message said "thinking" first
		}
		if err := s.idx.flush(ctx); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.idx.compactNow(ctx) }()
		for searching := true; searching; {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				searching = false
			default:
			}
			hits, err := s.Search(ctx, "thinking", SearchOptions{Limit: 500})
			if err != nil {
				t.Fatal(err)
			}
			if len(hits) > 0 {
				t.Fatalf("round %d: %d hits for a word no shown text holds", round, len(hits))
			}
		}
	}
}
