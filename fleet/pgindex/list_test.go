package pgindex

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// projection's TestListPagesByCursor on both engines: pages of 50 by
// either sort, a thread made while paging shifts no later page, a label
// filter, a forged cursor and one of another sort refused.
func TestListPagesByCursor(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	const n = 130
	for i := range n {
		id := fmt.Sprintf("t%03d", i)
		w.create(id, rollout.Source{})
		if i%3 == 0 {
			w.metadata(id, rollout.MetadataUpdated{Labels: []string{"third"}})
		}
	}
	// Touch a few so that updated order differs from created order.
	for _, id := range []string{"t005", "t100", "t050"} {
		w.turn(id, "x", "hello")
	}
	for _, sortBy := range []projection.Sort{projection.SortUpdated, projection.SortCreated} {
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			p, err := s.List(ctx, projection.ListOptions{Sort: sortBy, Limit: 50, Cursor: cursor})
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
			if pages == 0 && sortBy == projection.SortUpdated {
				w.create("zz-new", rollout.Source{})
			}
		}
		want := n
		if sortBy == projection.SortCreated {
			want++ // zz-new, made during the first pass
		}
		if len(got) != want || len(slices.Compact(slices.Sorted(slices.Values(got)))) != want {
			t.Fatalf("sort %d: %d threads, want %d distinct: %v", sortBy, len(got), want, got)
		}
		if sortBy == projection.SortUpdated && (got[0] != "t050" || got[1] != "t100" || got[2] != "t005") {
			t.Fatalf("most recently updated first: %v", got[:3])
		}
		if sortBy == projection.SortCreated && (got[0] != "zz-new" || got[1] != "t129" || got[n] != "t000") {
			t.Fatalf("newest created first: %v ... %v", got[:2], got[n-1:])
		}
	}
	p, err := s.List(ctx, projection.ListOptions{Label: "third", Limit: 1000})
	if err != nil || len(p.Threads) != 44 {
		t.Fatalf("label filter: %d threads, %v", len(p.Threads), err)
	}
	if _, err := s.List(ctx, projection.ListOptions{Cursor: "bm9wZQ"}); !errors.Is(err, projection.ErrBadCursor) {
		t.Fatalf("forged cursor: %v", err)
	}
	first, _ := s.List(ctx, projection.ListOptions{Limit: 2})
	if _, err := s.List(ctx, projection.ListOptions{Sort: projection.SortCreated, Cursor: first.NextCursor}); !errors.Is(err, projection.ErrBadCursor) {
		t.Fatalf("cursor of another sort: %v", err)
	}
	// Both engines page alike, with every filter, and hand out the same
	// cursors.
	for _, o := range []projection.ListOptions{
		{Limit: 7}, {Sort: projection.SortCreated, Limit: 9}, {Label: "third", Limit: 5}, {Label: "third", Sort: projection.SortCreated, Limit: 6},
		{Scope: projection.ScopeAll, Limit: 11}, {Scope: projection.ScopeArchived}, {Label: "nope"},
	} {
		w.sameList(s, o)
	}
}

// Every filter of ListOptions, alone and together, on both engines:
// scope (after threads are archived and restored with no frame
// published, as another host's move), state, label, source kind and
// parent, by either sort.
func TestListFilters(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	running, idle := "running", "idle"
	for i := range 24 {
		id := fmt.Sprintf("f%02d", i)
		src := rollout.Source{}
		if i%4 == 1 {
			src = rollout.Source{Kind: rollout.SourceSubagent, Parent: "f00", Root: "f00", Depth: 1}
		}
		w.create(id, src)
		u := rollout.MetadataUpdated{Status: &running}
		if i%2 == 0 {
			u.Status = &idle
		}
		switch i % 3 {
		case 0:
			u.Labels = []string{"red"}
		case 1:
			u.Labels = []string{"red", "blue"}
		}
		w.metadata(id, u)
		if i%5 == 0 {
			w.turn(id, "t", fmt.Sprintf("thread %d", i))
		}
	}
	for _, id := range []string{"f03", "f04", "f09", "f13"} {
		w.move(id, projection.LocationArchived)
	}
	w.move("f09", projection.LocationActive)
	// A label changed: the old one's rows go.
	w.metadata("f01", rollout.MetadataUpdated{Labels: []string{"green"}})
	for _, scope := range []projection.Scope{projection.ScopeActive, projection.ScopeArchived, projection.ScopeAll} {
		for _, sortBy := range []projection.Sort{projection.SortUpdated, projection.SortCreated} {
			for _, f := range []projection.ListOptions{{}, {State: "idle"}, {Label: "red"}, {Label: "blue", State: "running"}, {Label: "green"},
				{SourceKind: rollout.SourceSubagent}, {Parent: "f00"}, {Parent: "f00", Label: "red", State: "running"}} {
				f.Scope, f.Sort, f.Limit = scope, sortBy, 4
				w.sameList(s, f)
			}
		}
	}
	if ids := w.sameList(s, projection.ListOptions{Scope: projection.ScopeArchived}); fmt.Sprint(ids) != "[f13 f04 f03]" {
		t.Fatalf("archived: %v", ids)
	}
	// Another host's index lists the same.
	other := w.openIndex(w.openLog("b"), Options{})
	w.sameList(other, projection.ListOptions{Scope: projection.ScopeAll, Label: "red"})
	checkEqualsRebuild(t, s)
}
