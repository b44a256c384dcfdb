package rolloutdb_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// Live readers: DB.Follow and DB.Watch.

// Followers of a thread this DB writes, from the start and from the
// middle, see every record once, in seq order, while four goroutines
// append; they end when the thread is archived (the archived record
// last), having seen what a reader of the whole thread reads.
func behaveFollowInOrder(t *testing.T, e engine) {
	_, db := e.open(t, rolloutdb.Options{})
	th := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "f"})
	mustCommitTurn(t, th, "q", nil)
	mid := th.LastSeq()
	all := startFollower(t, db, "f", rolloutdb.FollowOptions{})
	fromMid := startFollower(t, db, "f", rolloutdb.FollowOptions{AfterSeq: mid})
	all.waitSeq(t, mid) // caught up before the appends start

	tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "go"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				if _, err := tu.Add(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: fmt.Sprintf("%d.%d", g, i)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if _, err := tu.Commit(ctx, rolloutdb.Commit{}); err != nil {
		t.Fatal(err)
	}
	fromNow := startFollower(t, db, "f", rolloutdb.FollowOptions{AfterSeq: th.LastSeq()})
	if _, err := th.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{AddLabels: []string{"done"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Archive(ctx, "f", "done"); err != nil {
		t.Fatal(err)
	}
	last := th.LastSeq()
	mustClose(t, th)
	replay := startFollower(t, db, "f", rolloutdb.FollowOptions{}) // of the archived thread: every record, then the end
	for _, c := range []struct {
		name  string
		f     *follower
		first uint64
	}{{"from the start", all, 1}, {"from the middle", fromMid, mid + 1}, {"from now", fromNow, last - 1}, {"replay", replay, 1}} {
		c.f.waitEnd(t)
		if c.f.err != nil || c.f.end != rolloutdb.FollowArchived {
			t.Fatalf("%s: ended with %v, %q; want archived", c.name, c.f.err, c.f.end)
		}
		c.f.checkSeqs(t, c.name, c.first, last)
		if recs := c.f.seen(); recs[len(recs)-1].Kind != rollout.KindArchived {
			t.Fatalf("%s: the last record is %s", c.name, recs[len(recs)-1].Kind)
		}
	}
	live, whole := all.seen(), replay.seen()
	for i := range whole {
		if live[i].Seq != whole[i].Seq || live[i].Kind != whole[i].Kind || live[i].Turn != whole[i].Turn || string(live[i].Body) != string(whole[i].Body) {
			t.Fatalf("record %d followed live as %+v, read back as %+v", i, live[i], whole[i])
		}
	}
}

// Followers in two hosts of one thread see every record once, in order,
// as it is written, also when the writing moves from one host to the
// other (a hand-off); they end at the archive.
func behaveFollowFromAnotherHost(t *testing.T, e engine) {
	ws, a := e.open(t, rolloutdb.Options{})
	b := e.reopen(t, ws, rolloutdb.Options{})
	th := mustCreateThread(t, a, rolloutdb.ThreadOptions{ID: "x"})
	poll := rolloutdb.FollowOptions{PollInterval: 5 * time.Millisecond}
	inA := startFollower(t, a, "x", rolloutdb.FollowOptions{})
	inB := startFollower(t, b, "x", poll)
	midB := startFollower(t, b, "x", rolloutdb.FollowOptions{AfterSeq: 1, PollInterval: poll.PollInterval})
	write := func(th *rolloutdb.Thread, host string) {
		t.Helper()
		for i := range 10 {
			mustCommitTurn(t, th, fmt.Sprintf("%s %d", host, i), nil, rollout.Item{Type: rollout.ItemReasoning, Text: "r"})
			if i%5 == 4 { // live: each follower sees the records as they come
				inA.waitSeq(t, th.LastSeq())
				inB.waitSeq(t, th.LastSeq())
			}
		}
	}
	write(th, "a")
	mustClose(t, th)
	tb := mustOpenThread(t, b, "x")
	write(tb, "b")
	if _, err := b.Archive(ctx, "x", "done"); err != nil {
		t.Fatal(err)
	}
	last := tb.LastSeq()
	mustClose(t, tb)
	for _, c := range []struct {
		name  string
		f     *follower
		first uint64
	}{{"in the first host", inA, 1}, {"in the second host", inB, 1}, {"in the second host, after seq 1", midB, 2}} {
		c.f.waitEnd(t)
		if c.f.err != nil || c.f.end != rolloutdb.FollowArchived {
			t.Fatalf("%s: ended with %v, %q; want archived", c.name, c.f.err, c.f.end)
		}
		c.f.checkSeqs(t, c.name, c.first, last)
	}
}

// watchStream collects a watcher's events on a goroutine; the channel
// closes when Next returns false.
func watchStream(t testing.TB, w rolloutdb.Watcher) <-chan rolloutdb.ThreadEvent {
	ch := make(chan rolloutdb.ThreadEvent, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		for w.Next() {
			select {
			case ch <- w.Event():
			default: // a test that stopped reading: drop, do not block Close
			}
		}
	}()
	t.Cleanup(func() {
		_ = w.Close()
		<-done
	})
	return ch
}

// awaitAnyEvent reads events until one of the kinds came for thread id.
func awaitAnyEvent(t testing.TB, ch <-chan rolloutdb.ThreadEvent, id string, kinds ...rolloutdb.ThreadEventKind) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the watcher ended waiting for one of %v of %s", kinds, id)
			}
			if slices.Contains(kinds, ev.Kind) && ev.Thread == id {
				return
			}
		case <-deadline:
			t.Fatalf("no event of %v for %s", kinds, id)
		}
	}
}

// awaitEvents reads events until one of each kind came for thread id.
func awaitEvents(t testing.TB, ch <-chan rolloutdb.ThreadEvent, id string, kinds ...rolloutdb.ThreadEventKind) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for len(kinds) > 0 {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the watcher ended waiting for %v of %s", kinds, id)
			}
			if i := slices.Index(kinds, ev.Kind); i >= 0 && ev.Thread == id {
				kinds = slices.Delete(kinds, i, i+1)
			}
		case <-deadline:
			t.Fatalf("no %v event for %s", kinds, id)
		}
	}
}

// A watcher hears of every thread created, updated, archived, restored
// and deleted by its DB, and, where the engine carries them, by another
// host's; Close ends it without an error.
func behaveWatch(t *testing.T, e engine) {
	ws, db := e.open(t, rolloutdb.Options{})
	other := e.reopen(t, ws, rolloutdb.Options{})
	w, err := db.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	near := watchStream(t, w)
	var far <-chan rolloutdb.ThreadEvent
	if e.remoteWatch {
		fw, err := other.Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		far = watchStream(t, fw)
	}

	th := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "side"})
	awaitEvents(t, near, "side", rolloutdb.ThreadCreated)
	mustCommitTurn(t, th, "q", nil)
	awaitEvents(t, near, "side", rolloutdb.ThreadUpdated)
	mustClose(t, th)
	if far != nil {
		awaitEvents(t, far, "side", rolloutdb.ThreadCreated, rolloutdb.ThreadUpdated)
	}
	if _, err := db.Archive(ctx, "side", "done"); err != nil {
		t.Fatal(err)
	}
	awaitEvents(t, near, "side", rolloutdb.ThreadArchived)
	if far != nil {
		awaitEvents(t, far, "side", rolloutdb.ThreadArchived)
	}
	if _, err := db.Restore(ctx, "side"); err != nil {
		t.Fatal(err)
	}
	awaitEvents(t, near, "side", rolloutdb.ThreadRestored)
	if far != nil {
		// Another host's restore: restored, where the engine carries it,
		// or (a local workspace's directory watch) it appeared among the
		// active.
		awaitAnyEvent(t, far, "side", rolloutdb.ThreadRestored, rolloutdb.ThreadCreated)
	}
	if _, err := db.Delete(ctx, "side"); err != nil {
		t.Fatal(err)
	}
	awaitEvents(t, near, "side", rolloutdb.ThreadDeleted)
	if far != nil {
		awaitEvents(t, far, "side", rolloutdb.ThreadDeleted)
		// And this DB hears of the other host's threads.
		mustThreadWithTurns(t, other, rolloutdb.ThreadOptions{ID: "theirs"}, "q")
		awaitEvents(t, near, "theirs", rolloutdb.ThreadCreated, rolloutdb.ThreadUpdated)
	}

	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for range near { // ends once closed
	}
	if w.Err() != nil {
		t.Fatalf("a closed watcher: %v", w.Err())
	}
}
