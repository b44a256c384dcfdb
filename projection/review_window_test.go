package projection

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// A deleted thread (the highest tid: the newest rowids) whose rows match
// more than 10_000 candidates hides every older live match.
// No compaction starts: live rows outnumber twice the garbage.
func TestReviewGarbageBeyondTheExaminedCap(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open(filepath.Join(w.root, "state.db"))
	w.store = s
	// Live rows enough that the garbage below starts no compaction.
	w.create("t0", rollout.Source{})
	w.append("t0", rec(t, rollout.KindTurnStarted, "z", rollout.TurnStarted{Model: "m1"}))
	for i := 0; i < 2*10_000+1000; {
		var recs []rollout.Record
		for j := 0; j < 500; j, i = j+1, i+1 {
			recs = append(recs, rec(t, rollout.KindItemAppended, "z", rollout.Item{ID: fmt.Sprint("f", i), Type: rollout.ItemUserMessage, Text: "filler"}))
		}
		w.append("t0", recs...)
	}
	w.create("t1", rollout.Source{})
	w.turn("t1", "a", "common live")
	w.create("t2", rollout.Source{})
	w.append("t2", rec(t, rollout.KindTurnStarted, "b", rollout.TurnStarted{Model: "m1"}))
	for i := 0; i < 10_000+100; {
		var recs []rollout.Record
		for j := 0; j < 500; j, i = j+1, i+1 {
			recs = append(recs, rec(t, rollout.KindItemAppended, "b", rollout.Item{ID: fmt.Sprint("x", i), Type: rollout.ItemUserMessage, Text: "common dead"}))
		}
		w.append("t2", recs...)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := searchWith(t, s, "live", SearchOptions{}); len(got) != 3 {
		t.Fatalf("live: %v", got)
	}
	w.deleteThread(s, "t2")
	got := searchWith(t, s, "common", SearchOptions{})
	s.idx.mu.Lock()
	t.Logf("docs %d garbage %d compactions %d", s.idx.docs, s.idx.garbageDocs, s.idx.compactions)
	s.idx.mu.Unlock()
	t.Logf("common, before compaction: %v", got)
	if err := s.idx.compactNow(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("common, after compaction: %v", searchWith(t, s, "common", SearchOptions{}))
	if len(got) != 3 {
		t.Fatalf("garbage hid the live matches of common: %v", got)
	}
}
