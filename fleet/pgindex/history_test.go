package pgindex

import (
	"fmt"
	"testing"

	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// Turns pages through a long thread: any range of ordinals, the items of
// each turn in their places, an open turn as open; both engines alike.
func TestTurnsPages(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	w.create("t1", rollout.Source{})
	for i := range 30 {
		w.turn("t1", fmt.Sprintf("a%02d", i), fmt.Sprintf("question %d", i))
	}
	w.append("t1", rec(t, rollout.KindTurnStarted, "open", rollout.TurnStarted{Model: "m9"}),
		rec(t, rollout.KindItemAppended, "open", rollout.Item{ID: "u", Type: rollout.ItemUserMessage, Text: "still running"}))
	for _, r := range [][2]int64{{1, 1}, {5, 9}, {28, 40}, {31, 31}, {0, 3}, {9, 5}, {32, 50}} {
		want, err := w.local.Turns(ctx, "t1", r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Turns(ctx, "t1", r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
			t.Fatalf("turns %v:\nfleet %+v\nlocal %+v", r, got, want)
		}
	}
	last, _ := s.Turns(ctx, "t1", 31, 31)
	if len(last) != 1 || last[0].Status != projection.TurnStatusOpen || last[0].EndedAt != nil || len(last[0].Items) != 1 {
		t.Fatalf("the open turn: %+v", last)
	}
	if info, _ := s.Thread(ctx, "t1"); info.OpenTurn != "open" || info.Turns != 31 {
		t.Fatalf("thread: %+v", info)
	}
	if _, err := s.Turns(ctx, "nope", 1, 2); err == nil {
		t.Fatal("turns of no thread")
	}
}

// A frame damaged in the log after it was projected (its payload no
// longer checks): a page or a search that meets it projects the thread
// again, and the thread is then what a reader of its frames sees: the
// frame's records skipped, counted and kept as a diagnostic.
func TestADamagedFrameIsProjectedAgain(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	w.create("t1", rollout.Source{})
	var frames []int64
	for i := range 4 {
		turn := fmt.Sprint("a", i)
		res := w.append("t1", rec(t, rollout.KindTurnStarted, turn, rollout.TurnStarted{}),
			rec(t, rollout.KindItemAppended, turn, rollout.Item{ID: "u", Type: rollout.ItemUserMessage, Text: fmt.Sprintf("question number %d", i)}))
		frames = append(frames, res.Offset)
		w.append("t1", rec(t, rollout.KindItemAppended, turn, rollout.Item{ID: "a", Type: rollout.ItemAgentMessage, Text: fmt.Sprintf("answer %d", i)}),
			rec(t, rollout.KindTurnCompleted, turn, rollout.TurnCompleted{}))
	}
	if err := s.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	damage := func(off int64) {
		exec(t, s.pool, `UPDATE rolloutdb.frames f SET data = set_byte(data, 60, get_byte(data, 60) # 255)
			FROM rolloutdb.threads th WHERE f.tid = th.tid AND th.id = 't1' AND f.off = $1`, off)
	}
	damage(frames[1])
	turns, err := s.Turns(ctx, "t1", 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 4 || len(turns[1].Items) != 1 || turns[1].Items[0].Text != "answer 1" {
		t.Fatalf("turns after the damage: %+v", turns)
	}
	damage(frames[2])
	hits, err := s.Search(ctx, "question", projection.SearchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The search that meets it passes over the thread's hits from there
	// (as state.db's does), and projects it again for the next one.
	for _, h := range hits {
		if h.Turn == "a2" {
			t.Fatalf("a hit in a damaged frame: %+v", h)
		}
	}
	hits, err = s.Search(ctx, "question", projection.SearchOptions{})
	if err != nil || len(hits) != 2 {
		t.Fatalf("search after: %+v %v", hits, err)
	}
	info, err := s.Thread(ctx, "t1")
	if err != nil || info.Damage != 2 || info.Items != 6 {
		t.Fatalf("thread after the damage: %+v %v", info, err)
	}
	d, err := s.Diagnostics(ctx, "t1")
	if err != nil || len(d) != 2 || d[0].Offset != frames[1] || d[1].Offset != frames[2] {
		t.Fatalf("diagnostics: %+v %v", d, err)
	}
	checkEqualsRebuild(t, s)
}

// A thread whose header names another workspace is listed with its
// identity error and left out of search, by both engines; a second
// header of another source makes one too.
func TestIdentityErrorsAreListedNotSearched(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	w.create("t1", rollout.Source{})
	w.turn("t1", "a", "wombat here")
	opened := rollout.ThreadOpened{ThreadID: "t2", WorkspaceID: "elsewhere", Source: rollout.Source{Kind: rollout.SourceUser}, Created: w.now()}
	th, err := w.log.Create(ctx, opened)
	if err != nil {
		t.Fatal(err)
	}
	w.threads["t2"], w.loc["t2"] = th, projection.LocationActive
	wr, err := rollout.Create(ctx, w.localPath("t2"), opened, rollout.Options{Sync: rollout.SyncNever, CompressAbove: -1, Now: w.now})
	if err != nil {
		t.Fatal(err)
	}
	w.writers["t2"] = wr
	w.turn("t2", "b", "wombat there")
	w.append("t1", rec(t, rollout.KindThreadOpened, "", rollout.ThreadOpened{ThreadID: "t1", WorkspaceID: testWorkspace,
		Source: rollout.Source{Kind: rollout.SourceUser, Client: "someone-else"}}))
	for _, id := range []string{"t1", "t2"} {
		w.sameThread(s, id)
		info, _ := s.Thread(ctx, id)
		if info.IdentityError == "" {
			t.Fatalf("%s: no identity error: %+v", id, info)
		}
	}
	w.sameList(s, projection.ListOptions{})
	if ids := w.sameSearch(s, "wombat", projection.SearchOptions{}); len(ids) != 0 {
		t.Fatalf("threads in doubt searched: %v", ids)
	}
}
