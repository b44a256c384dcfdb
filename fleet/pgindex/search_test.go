package pgindex

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// projection's TestSearchFindsOnlyWhatIsShown on both engines: an item's
// older version, a rolled-back turn and a deleted thread leave no word
// to find, with NOT too; archived threads only when asked.
func TestSearchFindsOnlyWhatIsShown(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	w.create("t1", rollout.Source{})
	w.turn("t1", "a0", "alpha beta") // its agent message says "thinking", then "answer to alpha beta"
	w.turn("t1", "a1", "gamma")
	w.append("t1", rec(t, rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: 1}))
	w.create("t2", rollout.Source{})
	w.turn("t2", "b0", "delta")
	all := projection.SearchOptions{IncludeArchived: true, Limit: 500}
	raw := all
	raw.Raw = true
	for _, c := range []struct {
		q    string
		o    projection.SearchOptions
		want []string
	}{
		{"thinking", all, nil},                                       // an older version's word
		{"gamma", all, nil},                                          // a rolled-back turn's
		{"answer alpha", all, []string{"t1/a0-a"}},                   // the shown version
		{"answer NOT thinking", raw, []string{"t1/a0-a", "t2/b0-a"}}, // NOT of a word only older versions held
		{"alpha NOT result", raw, []string{"t1/a0-a", "t1/a0-u"}},    // NOT that excludes a live item
		{"delta OR gamma", raw, []string{"t2/b0-a", "t2/b0-r", "t2/b0-u"}},
	} {
		if got := w.sameSearch(s, c.q, c.o); !slices.Equal(got, c.want) {
			t.Errorf("search %q = %v, want %v", c.q, got, c.want)
		}
	}
	w.remove("t2")
	w.create("t3", rollout.Source{})
	w.turn("t3", "c0", "epsilon")
	for _, c := range []struct {
		q    string
		o    projection.SearchOptions
		want []string
	}{
		{"delta", all, nil},
		{"epsilon NOT delta", raw, []string{"t3/c0-a", "t3/c0-r", "t3/c0-u"}},
		{"answer NOT thinking", raw, []string{"t1/a0-a", "t3/c0-a"}},
	} {
		if got := w.sameSearch(s, c.q, c.o); !slices.Equal(got, c.want) {
			t.Errorf("after a delete: search %q = %v, want %v", c.q, got, c.want)
		}
	}
	w.move("t1", projection.LocationArchived)
	if got := w.sameSearch(s, "alpha", projection.SearchOptions{}); len(got) != 0 {
		t.Fatalf("an archived thread searched by default: %v", got)
	}
	if got := w.sameSearch(s, "alpha", all); len(got) != 3 {
		t.Fatalf("an archived thread not searched when asked: %v", got)
	}
	checkEqualsRebuild(t, s)
}

// What a literal query means, on both engines: every word, as words, in
// any case, with or without diacritics, a word of several tokens as those
// tokens side by side and in order; nothing the user types is syntax.
func TestLiteralSearch(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	w.create("t1", rollout.Source{})
	texts := []string{
		"Run go-test before the release",
		"test go later",
		"the Café serves crème brûlée",
		"zebras and giraffes",
		"a nil_map panic in main.go",
		`quote "AND" (paren) star* OR NOT`,
		"zebra",
	}
	for i, text := range texts {
		turn := fmt.Sprint("a", i)
		w.append("t1", rec(t, rollout.KindTurnStarted, turn, rollout.TurnStarted{}),
			rec(t, rollout.KindItemAppended, turn, rollout.Item{ID: turn, Type: rollout.ItemUserMessage, Text: text}))
	}
	w.append("t1", rec(t, rollout.KindItemAppended, "a6", rollout.Item{ID: "call", Type: rollout.ItemToolCall, Name: "shell", Arguments: `{"cmd":"go vet ./..."}`}))
	for _, c := range []struct {
		q    string
		want []string
	}{
		{"go-test", []string{"t1/a0"}},          // side by side, in order
		{"test-go", []string{"t1/a1"}},          // not "go-test"'s words in the other order
		{"GO TEST", []string{"t1/a0", "t1/a1"}}, // both words, anywhere, any case
		{"cafe creme", []string{"t1/a2"}},       // diacritics
		{"BRÛLÉE", []string{"t1/a2"}},
		{"zebra", []string{"t1/a6"}}, // a word, not a prefix
		{"zebr", nil},
		{"nil_map main.go", []string{"t1/a4"}},
		{`"AND" (paren)`, []string{"t1/a5"}}, // syntax is words
		{"star* OR NOT", []string{"t1/a5"}},
		{`zebras" OR "giraffes`, nil},      // or is a word too, which no item has
		{"shell vet", []string{"t1/call"}}, // a tool call's name and arguments
	} {
		if got := w.sameSearch(s, c.q, projection.SearchOptions{}); !slices.Equal(got, c.want) {
			t.Errorf("search %q = %v, want %v", c.q, got, c.want)
		}
	}
	for _, q := range []string{"", "   ", "!!", "--"} {
		if _, err := s.Search(ctx, q, projection.SearchOptions{}); !errors.Is(err, projection.ErrBadQuery) {
			t.Errorf("search %q: %v, want ErrBadQuery", q, err)
		}
	}
}

// A raw query is FTS5's syntax as state.db takes it: the same items for
// every query it accepts, and ErrBadQuery for what it refuses (phrases,
// NEAR, column filters, syntax errors), which state.db refuses too.
func TestRawSearch(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	w.create("t1", rollout.Source{})
	docs := []string{"alpha beta", "alpha gamma", "beta gamma", "delta", "go-test run", "foo_bar", "café zebra", "zebras and giraffes", "alpha", "Beta x"}
	for i, d := range docs {
		turn := fmt.Sprint("d", i)
		w.append("t1", rec(t, rollout.KindTurnStarted, turn, rollout.TurnStarted{}),
			rec(t, rollout.KindItemAppended, turn, rollout.Item{ID: turn, Type: rollout.ItemUserMessage, Text: d}))
	}
	raw := projection.SearchOptions{Raw: true, Limit: 100}
	for _, c := range []struct {
		q    string
		want int // -1: refused
	}{
		{"alpha", 3}, {"alpha beta", 1}, {"alpha AND beta", 1}, {"alpha OR beta", 5}, {"alpha NOT beta", 2},
		{"alpha NOT beta gamma", 3}, // alpha NOT (beta gamma): adjacent phrases bind tighter
		{"alpha OR beta gamma", 4}, {"alpha OR beta NOT gamma", 4}, {"alpha AND beta OR delta", 2}, {"delta OR alpha AND beta", 2},
		{"(alpha OR delta) AND gamma", 1}, {"(alpha)", 3}, {"(alpha beta)", 1}, {`"alpha"`, 3}, {`alpha"beta"`, 1},
		{"alp*", 3}, {`"alp"*`, 3}, {"alp *", 3}, {"al*pha", 0}, {"ALPHA", 3}, {"cafe", 1}, {"CAFÉ", 1}, {"zebra*", 2},
		{"alpha and beta", 0}, {"and", 1}, {`"and"`, 1}, {"near", 0}, {"alpha NEAR beta", 0}, {`""`, 0}, {`alpha OR ""`, 3},
		{"x1 OR 2x", 0}, {"日本語", 0},
		{`"alpha beta"`, -1}, {"alpha + beta", -1}, {"foo_bar", -1}, {`"go-test"`, -1}, {"^alpha", -1}, {"NEAR(alpha beta)", -1},
		{"NEAR (alpha beta)", -1}, {"text:alpha", -1}, {"{text}: alpha", -1}, {"-alpha", -1}, {"go-test", -1},
		{"(alpha OR delta) gamma", -1}, {"gamma (alpha OR beta)", -1}, {"(alpha) beta", -1}, {"alpha (beta)", -1}, {"(alpha) (beta)", -1},
		{"NOT alpha", -1}, {"alpha NOT", -1}, {"AND", -1}, {"OR alpha", -1}, {"alpha OR", -1}, {"alpha AND (", -1}, {"()", -1},
		{"!!", -1}, {"alpha !!", -1}, {"a'b", -1}, {"*", -1}, {"alpha**", -1}, {`"unterminated`, -1}, {"alpha.beta", -1}, {"", -1},
	} {
		got, err := s.Search(ctx, c.q, raw)
		if c.want < 0 {
			if !errors.Is(err, projection.ErrBadQuery) {
				t.Errorf("raw %q: %v, want ErrBadQuery", c.q, err)
			}
			if _, lerr := w.local.Search(ctx, c.q, raw); lerr == nil {
				t.Errorf("raw %q: state.db takes it", c.q)
			}
			continue
		}
		if err != nil || len(got) != c.want {
			t.Errorf("raw %q: %d hits %v, want %d", c.q, len(got), err, c.want)
			continue
		}
		w.sameSearch(s, c.q, raw)
	}
}

// A deleted thread (the newest keys) and matches a NOT excludes do not
// crowd live matches out of a search's window (projection's
// TestDeletedThreadDoesNotCrowdTheWindow); the window holds the newest
// matches, the limit the best of them.
func TestSearchWindow(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	w.create("t1", rollout.Source{})
	w.turn("t1", "a", "common one")
	w.turn("t1", "b", "alpha")
	w.turn("t1", "c", "alpha beta")
	w.create("t2", rollout.Source{})
	for i := range 3 {
		w.turn("t2", fmt.Sprint("b", i), "common two")
	}
	if err := s.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	w.remove("t2")
	for i, c := range []struct {
		q string
		o projection.SearchOptions
	}{
		{"common", projection.SearchOptions{Limit: 3, Window: 3}},
		{"alpha NOT beta", projection.SearchOptions{Raw: true, Limit: 3, Window: 3}},
		{"alpha NOT beta gamma", projection.SearchOptions{Raw: true}},
	} {
		if got, want := len(w.sameSearch(s, c.q, c.o)), []int{3, 3, 6}[i]; got != want {
			t.Errorf("%q: %d hits, want %d", c.q, got, want)
		}
	}
	// The window is the newest matches: with a window of 3, the oldest
	// turn's "common" items are not among them.
	w.turn("t1", "d", "common three")
	hits, err := s.Search(ctx, "common", projection.SearchOptions{Limit: 3, Window: 3})
	if err != nil || len(hits) != 3 {
		t.Fatalf("window: %+v %v", hits, err)
	}
	for _, h := range hits {
		if h.Turn != "d" || h.Ordinal != 4 || h.Rank >= 0 {
			t.Fatalf("a hit outside the newest window: %+v", h)
		}
	}
}

// A word longer than PostgreSQL keeps in a tsvector is not indexed, and
// a query for one finds nothing (rather than failing).
func TestAVeryLongWord(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	long := strings.Repeat("x", 3000)
	w.create("t1", rollout.Source{})
	w.append("t1", rec(t, rollout.KindTurnStarted, "a", rollout.TurnStarted{}),
		rec(t, rollout.KindItemAppended, "a", rollout.Item{ID: "u", Type: rollout.ItemUserMessage, Text: "short " + long}))
	for _, o := range []projection.SearchOptions{{}, {Raw: true}} {
		if hits, err := s.Search(ctx, long, o); err != nil || len(hits) != 0 {
			t.Fatalf("search of a long word (raw %v): %+v %v", o.Raw, hits, err)
		}
		if hits, err := s.Search(ctx, "short", o); err != nil || len(hits) != 1 {
			t.Fatalf("search of its item's other word: %+v %v", hits, err)
		}
	}
	if hits, err := s.Search(ctx, long[:100]+"*", projection.SearchOptions{Raw: true}); err != nil || len(hits) != 0 {
		t.Fatalf("prefix of a long word: %+v %v", hits, err)
	}
}
