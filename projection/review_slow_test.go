package projection

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/rollout"
)

func reviewItems(t *testing.T, w *workspace, id, turn, text string, n int) {
	w.append(id, rec(t, rollout.KindTurnStarted, turn, rollout.TurnStarted{Model: "m1"}))
	for i := 0; i < n; {
		var recs []rollout.Record
		for j := 0; j < 500 && i < n; j, i = j+1, i+1 {
			recs = append(recs, rec(t, rollout.KindItemAppended, turn, rollout.Item{ID: fmt.Sprint(turn, i), Type: rollout.ItemUserMessage, Text: text}))
		}
		w.append(id, recs...)
	}
}

// window-1 live matches newest, then garbage: the loop reads the garbage
// one candidate per query.
func TestReviewOneCandidatePerRound(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open(filepath.Join(w.root, "state.db"))
	w.store = s
	w.create("t0", rollout.Source{})
	reviewItems(t, w, "t0", "z", "filler", 2*10_000+1000)
	w.create("t2", rollout.Source{})
	reviewItems(t, w, "t2", "b", "common dead", 10_000)
	w.create("t1", rollout.Source{})
	reviewItems(t, w, "t1", "a", "common live", 499)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	w.deleteThread(s, "t2")
	for _, q := range []string{"live", "common"} {
		if _, err := s.Search(ctx, q, SearchOptions{}); err != nil { // warm
			t.Fatal(err)
		}
		t0 := time.Now()
		hits, err := s.Search(ctx, q, SearchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d hits in %v", q, len(hits), time.Since(t0))
	}
}
