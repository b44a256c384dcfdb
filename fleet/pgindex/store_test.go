package pgindex

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// projection's TestProjectThreadsTurnsItems, on both engines: threads,
// turns, items (an item's last version in its first place), metadata,
// labels, a subagent, search literal and raw.
func TestProjectThreadsTurnsItems(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	w.create("t1", rollout.Source{})
	w.create("t2", rollout.Source{Kind: rollout.SourceSubagent, Parent: "t1", Root: "t1", Depth: 1})
	for i := range 5 {
		w.turn("t1", fmt.Sprintf("a%d", i), fmt.Sprintf("question number %d about zebras", i))
	}
	w.turn("t2", "b0", "a subagent task about giraffes")
	name := "Zebra study"
	w.metadata("t1", rollout.MetadataUpdated{Name: &name, Labels: []string{"zoo", "work"}})

	info, err := s.Thread(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Turns != 5 || info.Items != 20 || info.Name != name || info.Preview != "question number 0 about zebras" || info.LastRole != "agent" {
		t.Fatalf("thread info: %+v", info)
	}
	if info.Usage.TotalTokens != 75 || info.Status != projection.LocationActive || info.OpenTurn != "" || info.IdentityError != "" {
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
		t.Fatalf("items of turn 2: %+v", items)
	}
	if ids := w.sameList(s, projection.ListOptions{Parent: "t1"}); fmt.Sprint(ids) != "[t2]" {
		t.Fatalf("children of t1: %v", ids)
	}
	if ids := w.sameList(s, projection.ListOptions{Label: "zoo"}); fmt.Sprint(ids) != "[t1]" {
		t.Fatalf("label zoo: %v", ids)
	}
	hits, err := s.Search(ctx, "giraffes", projection.SearchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 3 || hits[0].Thread != "t2" {
		t.Fatalf("search giraffes: %+v", hits)
	}
	w.sameSearch(s, "giraffes", projection.SearchOptions{})
	// The user's words are taken literally, not as query syntax.
	if ids := w.sameSearch(s, `zebras" OR "giraffes`, projection.SearchOptions{}); len(ids) != 0 {
		t.Fatalf("literal query: %v", ids)
	}
	if _, err := s.Search(ctx, `zebras AND (`, projection.SearchOptions{Raw: true}); !errors.Is(err, projection.ErrBadQuery) {
		t.Fatalf("bad raw query: %v", err)
	}
	if ids := w.sameSearch(s, `zebra*`, projection.SearchOptions{Raw: true, Limit: 3}); len(ids) != 3 {
		t.Fatalf("raw prefix query: %v", ids)
	}
	for _, id := range []string{"t1", "t2"} {
		w.sameThread(s, id)
	}
	checkEqualsRebuild(t, s)
}
