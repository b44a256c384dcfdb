package projection

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// A crash while the index lags: t2 (the highest tid) forgotten and t3
// made (taking t2's key) in state.db, none of it applied to search.db.
// At the next open the catch-up of the key compares t3's projected seq
// with t2's mark, and puts only t3's items past it: t2's words stay under
// t3's rowids, the key unlisted, and t3's first items are never indexed.
func TestReviewReusedKeyAfterACrash(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	path := filepath.Join(w.root, "state.db")
	s := w.open(path)
	w.store = s
	w.create("t1", rollout.Source{})
	w.turn("t1", "a", "alpha")
	w.create("t2", rollout.Source{})
	simpleTurn(t, w, "t2", "b", "delta")
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// What search.db holds when the crash comes (the index lagging).
	idx := filepath.Join(w.root, "search.db")
	snap, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	s = w.open(path)
	w.store = s
	w.deleteThread(s, "t2")
	w.create("t3", rollout.Source{})
	simpleTurn(t, w, "t3", "c0", "epsilon")
	simpleTurn(t, w, "t3", "c1", "zeta")
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var tid3 int64
	_ = s.r.QueryRow(`SELECT tid FROM threads WHERE id = 't3'`).Scan(&tid3)
	t.Logf("t3's tid %d, listed: %v", tid3, garbageOf(s))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, suf := range []string{"-wal", "-shm"} {
		_ = os.Remove(idx + suf)
	}
	if err := os.WriteFile(idx, snap, 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+idx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE meta SET value = '0' WHERE key = 'clean'`); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	s = w.open(path)
	w.store = s
	for _, c := range []struct {
		q    string
		want int
	}{{"delta", 0}, {"epsilon", 1}, {"zeta", 1}, {"alpha", 3}} {
		if got := searchItems(t, s, c.q, false); len(got) != c.want {
			t.Errorf("%s: %v, want %d hits (listed: %v)", c.q, got, c.want, garbageOf(s))
		}
	}
}

// simpleTurn: a turn of one user message, no item with two versions.
func simpleTurn(t *testing.T, w *workspace, id, turn, text string) {
	w.append(id, rec(t, rollout.KindTurnStarted, turn, rollout.TurnStarted{Model: "m1"}),
		rec(t, rollout.KindItemAppended, turn, rollout.Item{ID: turn + "-u", Type: rollout.ItemUserMessage, Text: text}),
		rec(t, rollout.KindTurnCompleted, turn, rollout.TurnCompleted{Status: rollout.TurnStatusCompleted}))
}
