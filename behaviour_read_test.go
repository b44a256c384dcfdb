package rolloutdb_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The read side: lists, search and metadata.

// List filters by location, host status, label, source kind and parent,
// pages by cursor without losing or repeating a thread (also while
// threads are created), orders newest first, and reads the same from
// another host.
func behaveListFiltersAndCursors(t *testing.T, e engine) {
	ws, db := e.open(t, rolloutdb.Options{})
	var roots []string
	for i := range 12 {
		id := fmt.Sprintf("t%02d", i)
		roots = append(roots, id)
		th := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: id})
		mustCommitTurn(t, th, "question of "+id, nil)
		u := rolloutdb.MetadataUpdate{}
		if i%3 == 0 {
			u.AddLabels = []string{"red"}
		}
		if i%3 == 1 {
			waiting := "waiting"
			u.Status = &waiting
		}
		if i%3 == 2 {
			u.Flags = map[string]bool{"pinned": true}
		}
		if _, err := th.UpdateMetadata(ctx, u); err != nil {
			t.Fatal(err)
		}
		mustClose(t, th)
	}
	for _, id := range []string{"s1", "s2"} {
		mustThreadWithTurns(t, db, rolloutdb.ThreadOptions{ID: id, Source: rollout.Source{Kind: rollout.SourceSubagent, Parent: "t05", Root: "t05", Depth: 1}}, "subagent work")
	}
	if _, err := db.Archive(ctx, "t10", "done"); err != nil {
		t.Fatal(err)
	}
	active := slices.Concat(slices.DeleteFunc(slices.Clone(roots), func(id string) bool { return id == "t10" }), []string{"s1", "s2"})

	for _, c := range []struct {
		name string
		o    projection.ListOptions
		want []string
	}{
		{"active", projection.ListOptions{}, active},
		{"archived", projection.ListOptions{Scope: projection.ScopeArchived}, []string{"t10"}},
		{"all", projection.ListOptions{Scope: projection.ScopeAll}, append(slices.Clone(active), "t10")},
		{"label", projection.ListOptions{Label: "red"}, []string{"t00", "t03", "t06", "t09"}},
		{"label, all", projection.ListOptions{Label: "red", Scope: projection.ScopeAll}, []string{"t00", "t03", "t06", "t09"}},
		{"status", projection.ListOptions{State: "waiting"}, []string{"t01", "t04", "t07"}},
		{"status, archived", projection.ListOptions{State: "waiting", Scope: projection.ScopeArchived}, []string{"t10"}},
		{"label, archived", projection.ListOptions{Label: "red", Scope: projection.ScopeArchived}, nil},
		{"status, all", projection.ListOptions{State: "waiting", Scope: projection.ScopeAll}, []string{"t01", "t04", "t07", "t10"}},
		{"parent", projection.ListOptions{Parent: "t05"}, []string{"s1", "s2"}},
		{"source kind", projection.ListOptions{SourceKind: rollout.SourceSubagent}, []string{"s1", "s2"}},
		{"user threads with a label", projection.ListOptions{SourceKind: rollout.SourceUser, Label: "red"}, []string{"t00", "t03", "t06", "t09"}},
		{"no such label", projection.ListOptions{Label: "blue"}, nil},
	} {
		for _, limit := range []int{0, 1, 2, 5} {
			o := c.o
			o.Limit = limit
			got := listAll(t, db, o)
			if !slices.Equal(sorted(got), sorted(c.want)) {
				t.Fatalf("%s, limit %d: %v, want %v", c.name, limit, got, sorted(c.want))
			}
		}
	}

	// Newest first: by creation, the reverse of the order made; by update
	// (the default), a thread written to comes first.
	byCreation := listAll(t, db, projection.ListOptions{Sort: projection.SortCreated, Limit: 4})
	want := slices.Clone(active)
	slices.Reverse(want)
	if !slices.Equal(byCreation, want) {
		t.Fatalf("by creation: %v, want %v", byCreation, want)
	}
	th := mustOpenThread(t, db, "t03")
	mustCommitTurn(t, th, "again", nil)
	mustClose(t, th)
	page, err := db.List(ctx, projection.ListOptions{Limit: 1})
	if err != nil || len(page.Threads) != 1 || page.Threads[0].ID != "t03" || page.Threads[0].Turns != 2 || page.NextCursor == "" {
		t.Fatalf("the most recently updated: %+v, %v", page, err)
	}
	updated := listAll(t, db, projection.ListOptions{Limit: 3})
	infos := map[string]projection.ThreadInfo{}
	for _, id := range updated {
		infos[id] = mustInfo(t, db, id)
	}
	for i := 1; i < len(updated); i++ {
		if infos[updated[i]].UpdatedAt.After(infos[updated[i-1]].UpdatedAt) {
			t.Fatalf("by update: %s (%v) listed after %s (%v)", updated[i], infos[updated[i]].UpdatedAt, updated[i-1], infos[updated[i-1]].UpdatedAt)
		}
	}
	if info := infos["t02"]; !info.Flags["pinned"] || len(info.Labels) != 0 || info.State != "" {
		t.Fatalf("t02: %+v", info)
	}

	// A thread created while a client pages does not shift the pages after
	// it (ListOptions.Cursor, projection.Store.List).
	o := projection.ListOptions{Sort: projection.SortCreated, Limit: 5}
	first, err := db.List(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	mustThreadWithTurns(t, db, rolloutdb.ThreadOptions{ID: "t12"}, "new while paging")
	o.Cursor = first.NextCursor
	rest := listAll(t, db, o)
	var firstIDs []string
	for _, info := range first.Threads {
		firstIDs = append(firstIDs, info.ID)
	}
	if got := slices.Concat(firstIDs, rest); !slices.Equal(got, want) {
		t.Fatalf("paged while a thread was created: %v, want %v", got, want)
	}

	_, err = db.List(ctx, projection.ListOptions{Cursor: "not a cursor"})
	isErr(t, "a cursor no list handed out", err, projection.ErrBadCursor)

	// Another host lists the same.
	other := e.reopen(t, ws, rolloutdb.Options{})
	for _, o := range []projection.ListOptions{{Scope: projection.ScopeAll}, {Label: "red"}, {Parent: "t05"}} {
		if got, want := listAll(t, other, o), listAll(t, db, o); !slices.Equal(sorted(got), sorted(want)) {
			t.Fatalf("another host lists %+v as %v, this one as %v", o, got, want)
		}
	}
}

// Search finds items of visible turns of active threads by every word,
// literally (FTS5's syntax taken as words), or with Raw by FTS5's syntax;
// archived threads only when asked; rolled-back turns and deleted threads
// never. Another host finds the same.
func behaveSearchLiteralAndRaw(t *testing.T, e engine) {
	ws, db := e.open(t, rolloutdb.Options{})
	msg := func(id, text string) rollout.Item {
		return rollout.Item{ID: id, Type: rollout.ItemAgentMessage, Text: text}
	}
	x := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "x"})
	mustCommitTurn(t, x, "first", nil, msg("a", "the wombat digs a burrow"))
	mustCommitTurn(t, x, "second", nil, msg("b", "the quokka smiles"))
	mustCommitTurn(t, x, "third", nil, msg("g", "a wombat rolled back"))
	if _, err := x.Rollback(ctx, 1); err != nil {
		t.Fatal(err)
	}
	mustClose(t, x)
	y := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "y"})
	mustCommitTurn(t, y, "first", nil, msg("c", "wombat and quokka together"))
	mustCommitTurn(t, y, "second", nil, msg("d", "now run go-test please"))
	mustClose(t, y)
	z := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "z"})
	mustCommitTurn(t, z, "first", nil, msg("k", `NOT a keyword: AND OR NEAR "quoted"`))
	mustClose(t, z)
	arch := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "arch"})
	mustCommitTurn(t, arch, "first", nil, msg("f", "an archived wombat"))
	mustClose(t, arch)
	if _, err := db.Archive(ctx, "arch", "done"); err != nil {
		t.Fatal(err)
	}

	search := func(db *rolloutdb.DB, q string, o projection.SearchOptions) []string {
		t.Helper()
		hits, err := db.Search(ctx, q, o)
		if err != nil {
			t.Fatalf("search %q: %v", q, err)
		}
		var items []string
		for _, h := range hits {
			items = append(items, h.Item)
		}
		slices.Sort(items)
		return items
	}
	cases := []struct {
		q    string
		o    projection.SearchOptions
		want []string
	}{
		{"wombat", projection.SearchOptions{}, []string{"a", "c"}},
		{"WOMBAT", projection.SearchOptions{}, []string{"a", "c"}},
		{"wombat", projection.SearchOptions{IncludeArchived: true}, []string{"a", "c", "f"}},
		{"wombat quokka", projection.SearchOptions{}, []string{"c"}},
		{"quokka wombat", projection.SearchOptions{}, []string{"c"}},
		{"go-test", projection.SearchOptions{}, []string{"d"}},
		{"run-now", projection.SearchOptions{}, nil}, // both words, not adjacent in this order
		{"NOT", projection.SearchOptions{}, []string{"k"}},
		{"AND OR", projection.SearchOptions{}, []string{"k"}},
		{`"quoted`, projection.SearchOptions{}, []string{"k"}},
		{"quok*", projection.SearchOptions{}, nil}, // the star is not a prefix operator
		{"rolled", projection.SearchOptions{}, nil},
		{"burrow", projection.SearchOptions{Limit: 1}, []string{"a"}},
		{"wombat NOT quokka", projection.SearchOptions{Raw: true}, []string{"a"}},
		{"wombat OR quokka", projection.SearchOptions{Raw: true}, []string{"a", "b", "c"}},
		{"wombat AND (burrow OR together)", projection.SearchOptions{Raw: true}, []string{"a", "c"}},
		{"quok*", projection.SearchOptions{Raw: true}, []string{"b", "c"}},
		{"wombat", projection.SearchOptions{Raw: true, IncludeArchived: true}, []string{"a", "c", "f"}},
	}
	for _, c := range cases {
		if got := search(db, c.q, c.o); !slices.Equal(got, c.want) {
			t.Fatalf("search %q %+v: %v, want %v", c.q, c.o, got, c.want)
		}
	}
	hits, err := db.Search(ctx, "burrow", projection.SearchOptions{})
	if err != nil || len(hits) != 1 {
		t.Fatalf("burrow: %+v, %v", hits, err)
	}
	if h := hits[0]; h.Thread != "x" || h.Ordinal != 1 || h.Type != rollout.ItemAgentMessage || h.Snippet == "" || !containsBracketed(h.Snippet, "burrow") {
		t.Fatalf("hit %+v", h)
	}
	if limited, err := db.Search(ctx, "wombat", projection.SearchOptions{Limit: 1}); err != nil || len(limited) != 1 {
		t.Fatalf("limit 1: %+v, %v", limited, err)
	}
	for _, q := range []string{"wombat AND", "OR quokka", "wombat NOT"} {
		_, err = db.Search(ctx, q, projection.SearchOptions{Raw: true})
		isErr(t, fmt.Sprintf("raw query %q, which FTS5 cannot parse", q), err, projection.ErrBadQuery)
	}

	other := e.reopen(t, ws, rolloutdb.Options{})
	for _, c := range cases {
		if got := search(other, c.q, c.o); !slices.Equal(got, c.want) {
			t.Fatalf("another host: search %q %+v: %v, want %v", c.q, c.o, got, c.want)
		}
	}

	if _, err := db.Delete(ctx, "y"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []*rolloutdb.DB{db, other} {
		if got := search(d, "quokka", projection.SearchOptions{}); !slices.Equal(got, []string{"b"}) {
			t.Fatalf("after y's delete: quokka finds %v", got)
		}
	}
}

func containsBracketed(s, word string) bool {
	return slices.Contains(bracketed(s), word)
}

// bracketed returns the [terms] of a snippet.
func bracketed(s string) []string {
	var out []string
	for {
		i := strings.IndexByte(s, '[')
		if i < 0 {
			return out
		}
		j := strings.IndexByte(s[i:], ']')
		if j < 0 {
			return out
		}
		out = append(out, s[i+1:i+j])
		s = s[i+j:]
	}
}

// Name, labels, flags and host status, set by UpdateMetadata, read back
// the same from ThreadInfo, List, Resume and another host, and after a
// reopen; an update naming nothing is refused.
func behaveMetadataSetAndRead(t *testing.T, e engine) {
	ws, db := e.open(t, rolloutdb.Options{})
	th := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "meta"})
	str := func(s string) *string { return &s }
	for _, u := range []rolloutdb.MetadataUpdate{
		{Name: str("draft")},
		{AddLabels: []string{"bug", "ui", "p1"}},
		{RemoveLabels: []string{"ui"}, AddLabels: []string{"ui2"}},
		{AddLabels: []string{"gone"}, RemoveLabels: []string{"gone"}}, // in both: removed
		{Flags: map[string]bool{"pinned": true, "muted": true}},
		{Flags: map[string]bool{"muted": false}},
		{Status: str("review")},
		{Name: str("final name")},
		{AddLabels: []string{"bug"}}, // already there: written, changes nothing
	} {
		if _, err := th.UpdateMetadata(ctx, u); err != nil {
			t.Fatalf("%+v: %v", u, err)
		}
	}
	seq := th.LastSeq()
	_, err := th.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{})
	isErr(t, "an update naming nothing", err, rolloutdb.ErrEmptyUpdate)
	if _, err := th.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{AddLabels: []string{""}}); err == nil {
		t.Fatal("an empty label was written")
	}
	if th.LastSeq() != seq {
		t.Fatalf("refused updates moved the thread to seq %d", th.LastSeq())
	}
	wantLabels := []string{"bug", "p1", "ui2"}
	check := func(db *rolloutdb.DB, when string) {
		t.Helper()
		info := mustInfo(t, db, "meta")
		if info.Name != "final name" || !slices.Equal(sorted(info.Labels), wantLabels) || info.State != "review" || info.Flags["pinned"] != true || info.Flags["muted"] {
			t.Fatalf("%s: info name %q labels %v flags %v state %q", when, info.Name, info.Labels, info.Flags, info.State)
		}
		for _, o := range []projection.ListOptions{{Label: "bug"}, {Label: "ui2"}, {State: "review"}, {Label: "p1", State: "review"}} {
			if ids := listAll(t, db, o); !slices.Equal(ids, []string{"meta"}) {
				t.Fatalf("%s: list %+v: %v", when, o, ids)
			}
		}
		for _, o := range []projection.ListOptions{{Label: "ui"}, {Label: "gone"}, {State: "draft"}} {
			if ids := listAll(t, db, o); len(ids) != 0 {
				t.Fatalf("%s: list %+v: %v", when, o, ids)
			}
		}
	}
	check(db, "written")
	other := e.reopen(t, ws, rolloutdb.Options{})
	check(other, "another host")
	mustClose(t, th)
	// Another host, whose last read of the thread is stale, changes the
	// labels from what the thread holds now.
	if _, err := other.ThreadInfo(ctx, "meta"); err != nil {
		t.Fatal(err)
	}
	th = mustOpenThread(t, db, "meta")
	if _, err := th.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{AddLabels: []string{"from-this"}}); err != nil {
		t.Fatal(err)
	}
	mustClose(t, th)
	oth := mustOpenThread(t, other, "meta")
	if _, err := oth.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{AddLabels: []string{"from-other"}, RemoveLabels: []string{"from-this"}}); err != nil {
		t.Fatal(err)
	}
	mustClose(t, oth)
	if info := mustInfo(t, db, "meta"); !slices.Equal(sorted(info.Labels), []string{"bug", "from-other", "p1", "ui2"}) {
		t.Fatalf("labels changed by two hosts in turn: %v", info.Labels)
	}
	th = mustOpenThread(t, db, "meta")
	if _, err := th.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{RemoveLabels: []string{"from-other"}}); err != nil {
		t.Fatal(err)
	}
	mustClose(t, th)
	st := mustResumeState(t, db, "meta")
	if md := st.Metadata; md.Name != "final name" || !slices.Equal(sorted(md.Labels), wantLabels) || md.Status != "review" || !md.Flags["pinned"] || md.Flags["muted"] || md.Archived {
		t.Fatalf("resumed metadata %+v", md)
	}

	// A name cleared with "", and the label set emptied.
	th = mustOpenThread(t, db, "meta")
	if _, err := th.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{Name: str(""), RemoveLabels: wantLabels}); err != nil {
		t.Fatal(err)
	}
	mustClose(t, th)
	mustClose(t, db)
	mustClose(t, other)
	db = e.reopen(t, ws, rolloutdb.Options{})
	if info := mustInfo(t, db, "meta"); info.Name != "" || len(info.Labels) != 0 || info.State != "review" {
		t.Fatalf("after clearing, reopened: name %q labels %v state %q", info.Name, info.Labels, info.State)
	}
	if ids := listAll(t, db, projection.ListOptions{Label: "bug"}); len(ids) != 0 {
		t.Fatalf("a removed label still lists: %v", ids)
	}
}
