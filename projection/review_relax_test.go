package projection

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// Raw queries whose operators FTS5 reads but queryTokens glues to the
// word before them ("..."NOT, word*NOT, "..."OR, word*OR).
func TestReviewGluedOperators(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open(filepath.Join(w.root, "state.db"))
	w.store = s
	w.create("t1", rollout.Source{})
	w.turn("t1", "a", "alpha") // t1/a-a said "thinking" first: garbage
	w.create("t2", rollout.Source{})
	w.turn("t2", "b", "gamma")
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.idx.flush(ctx); err != nil || len(garbageOf(s)) == 0 {
		t.Fatal("no garbage", err)
	}
	qs := []string{`answer NOT thinking`, `"answer"NOT thinking`, `answer*NOT thinking`,
		`alpha NOT zzz OR gamma`, `alpha NOT zzz*OR gamma`, `alpha NOT "zzz"OR gamma`}
	before := map[string][]string{}
	for _, q := range qs {
		before[q] = searchItems(t, s, q, true)
	}
	if err := s.idx.compactNow(ctx); err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		after := searchItems(t, s, q, true)
		if !slices.Equal(before[q], after) {
			t.Errorf("%q: with garbage %v, without %v", q, before[q], after)
		}
	}
}
