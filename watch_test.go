package rolloutdb_test

import (
	"slices"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb"
)

// events collects a watcher's events on a goroutine.
func events(w rolloutdb.Watcher) <-chan rolloutdb.ThreadEvent {
	ch := make(chan rolloutdb.ThreadEvent, 1024)
	go func() {
		defer close(ch)
		for w.Next() {
			ch <- w.Event()
		}
	}()
	return ch
}

// waitFor reads events until one of each wanted kind for thread id came.
func waitFor(t *testing.T, ch <-chan rolloutdb.ThreadEvent, id string, kinds ...rolloutdb.ThreadEventKind) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for len(kinds) > 0 {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the watcher ended waiting for %v of %s", kinds, id)
			}
			if ev.Thread == id {
				if i := slices.Index(kinds, ev.Kind); i >= 0 {
					kinds = slices.Delete(kinds, i, i+1)
				}
			}
		case <-deadline:
			t.Fatalf("no %v event for %s", kinds, id)
		}
	}
}

// A sidebar watching the workspace hears of threads created, updated,
// archived, restored and deleted by this DB, and (through file-change
// notification) by another DB on the workspace, as another process's.
func TestWatchSeesThisAndAnotherProcessesChanges(t *testing.T) {
	dir := t.TempDir()
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	other, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	w, err := db.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	far, err := other.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer far.Close()
	near, remote := events(w), events(far)

	newThreadWithTurn(t, db, "side")
	waitFor(t, near, "side", rolloutdb.ThreadCreated, rolloutdb.ThreadUpdated)
	waitFor(t, remote, "side", rolloutdb.ThreadCreated, rolloutdb.ThreadUpdated)
	if _, err := db.Archive(ctx, "side", "done"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, near, "side", rolloutdb.ThreadArchived)
	waitFor(t, remote, "side", rolloutdb.ThreadArchived)
	if _, err := db.Restore(ctx, "side"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, near, "side", rolloutdb.ThreadRestored)
	waitFor(t, remote, "side", rolloutdb.ThreadCreated) // it appeared in threads/active
	if _, err := db.Delete(ctx, "side"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, near, "side", rolloutdb.ThreadDeleted)
	waitFor(t, remote, "side", rolloutdb.ThreadDeleted)

	w.Close()
	for range near { // ends once closed
	}
	if w.Err() != nil {
		t.Fatalf("closed: %v", w.Err())
	}
}

// A thread created, archived and deleted by another process in quick
// succession is told deleted last: what each change tells is judged by
// what the directories hold when it is taken.
func TestWatchEndsWithWhatHolds(t *testing.T) {
	dir := t.TempDir()
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	wr, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wr.Close()
	w, err := db.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	evs := events(w)
	th, err := wr.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "t2"})
	if err != nil {
		t.Fatal(err)
	}
	_ = th.Close()
	if _, err := wr.Archive(ctx, "t2", "done"); err != nil {
		t.Fatal(err)
	}
	if _, err := wr.Delete(ctx, "t2"); err != nil {
		t.Fatal(err)
	}
	var last rolloutdb.ThreadEvent
	for quiet := time.NewTimer(5 * time.Second); ; {
		select {
		case ev := <-evs:
			if ev.Thread == "t2" {
				last = ev
			}
			quiet.Reset(2 * time.Second) // the last event, then a quiet spell
			continue
		case <-quiet.C:
		}
		break
	}
	if last.Kind != rolloutdb.ThreadDeleted {
		t.Fatalf("the last event of a thread created, archived and deleted is %+v, want deleted", last)
	}
}
