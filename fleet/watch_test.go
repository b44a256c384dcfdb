package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/follow"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// watched is a watcher read in a goroutine.
type watched struct {
	w   *fleet.Watcher
	evs chan follow.Event
}

func startWatch(t testing.TB, l *fleet.Log) *watched {
	t.Helper()
	w, err := l.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ww := &watched{w: w, evs: make(chan follow.Event, 1024)}
	go func() {
		defer close(ww.evs)
		for w.Next() {
			ww.evs <- w.Event()
		}
	}()
	t.Cleanup(func() {
		w.Close()
		for range ww.evs {
		}
	})
	return ww
}

// expect waits for an event of kind for thread id; the events before it
// may be any (merged, or repeated).
func (ww *watched) expect(t testing.TB, id string, kind follow.EventKind) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ww.evs:
			if !ok {
				t.Fatalf("watcher ended waiting for %s %s: %v", kind, id, ww.w.Err())
			}
			if ev.Thread == id && ev.Kind == kind {
				return
			}
			if ev.Thread != id {
				t.Fatalf("event %+v waiting for %s %s", ev, kind, id)
			}
		case <-deadline:
			t.Fatalf("no %s event for %s within 10s", kind, id)
		}
	}
}

// A watch on host B tells what host A does to threads: created, updated,
// archived, restored, deleted; from A's notices (B does not poll), and
// from B's polls when A sends none.
func TestWatchAcrossHosts(t *testing.T) {
	for _, mode := range []string{"notices", "polls"} {
		t.Run(mode, func(t *testing.T) {
			dsn := testDSN(t)
			ao, bo := fleet.Options{}, fleet.Options{PollInterval: noPoll}
			if mode == "polls" {
				ao, bo = fleet.Options{NoNotify: true}, fleet.Options{PollInterval: 20 * time.Millisecond}
			}
			a := openLog(t, dsn, "a", ao)
			b := openLog(t, dsn, "b", bo)
			old, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "old"})
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			ww := startWatch(t, b)
			second := startWatch(t, b) // shares the first one's look
			th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
			if err != nil {
				t.Fatal(err)
			}
			ww.expect(t, "t1", follow.EventCreated)
			second.expect(t, "t1", follow.EventCreated)
			appendTexts(t, th, "one")
			ww.expect(t, "t1", follow.EventUpdated)
			if err := a.Move(ctx, "t1", "active", "archived", th); err != nil {
				t.Fatal(err)
			}
			ww.expect(t, "t1", follow.EventArchived)
			if err := a.Move(ctx, "t1", "archived", "active", th); err != nil {
				t.Fatal(err)
			}
			ww.expect(t, "t1", follow.EventRestored)
			th.Close()
			if err := a.Delete(ctx, "t1"); err != nil {
				t.Fatal(err)
			}
			ww.expect(t, "t1", follow.EventDeleted)
			if m := b.FollowMetrics(); (mode == "polls") != (m.Received == 0) {
				t.Fatalf("B received %d notices", m.Received)
			}
		})
	}
}

// A watcher ends with its ctx, and with its Log (rollout.ErrClosed).
func TestWatchEnds(t *testing.T) {
	dsn := testDSN(t)
	b, err := fleet.Open(ctx, dsn, fleet.Options{Host: "b"})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	w, err := b.Watch(cctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if w.Next() || !errors.Is(w.Err(), context.Canceled) {
		t.Fatalf("watcher whose ctx is done: %v", w.Err())
	}
	ww := startWatch(t, b)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-ww.evs:
		if ok {
			t.Fatal("an event from a closed Log")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watcher still running after Close")
	}
	if !errors.Is(ww.w.Err(), rollout.ErrClosed) {
		t.Fatalf("watcher of a closed Log: %v", ww.w.Err())
	}
	if _, err := b.Watch(ctx); !errors.Is(err, rollout.ErrClosed) {
		t.Fatalf("Watch on a closed Log: %v", err)
	}
}
