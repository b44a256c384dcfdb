package rolloutdb

import (
	"testing"
	"time"
)

// Both notifiers serve followers and watchers of another process's
// threads: the platform's (inotify read between rounds, on Linux) and the
// portable one (fsnotify), which other systems use and which is tested
// here on every system.
func TestNotifiersServeFollowersAndWatchers(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  func([]string) (dirNotifier, error)
	}{{"platform", newPlatformNotifier}, {"fsnotify", newFsnotifyNotifier}} {
		t.Run(tc.name, func(t *testing.T) {
			th, r := writerAndFollower(t, Options{})
			r.private.newDirNotifier = tc.new
			wr := th.db
			events := watchEvents(t, r)
			const n = 100
			gots := followS(t, r, 1, FollowOptions{})
			appendFlags(t, th, n)
			expectSeqs(t, r, gots, 1, n+1)
			// Each change is waited for before the next: a round of the
			// watch that holds several tells only what still holds.
			told := func(kind ThreadEventKind) {
				t.Helper()
				deadline := time.After(30 * time.Second)
				for {
					select {
					case ev := <-events:
						if ev.Thread == "t2" && ev.Kind == kind {
							return
						}
					case <-deadline:
						t.Fatalf("the watcher was not told %s of thread t2", kind)
					}
				}
			}
			other, err := wr.CreateThread(ictx, ThreadOptions{ID: "t2"})
			if err != nil {
				t.Fatal(err)
			}
			_ = other.Close()
			told(ThreadCreated)
			if _, err := wr.Archive(ictx, "t2", "done"); err != nil {
				t.Fatal(err)
			}
			told(ThreadArchived)
			if _, err := wr.Delete(ictx, "t2"); err != nil {
				t.Fatal(err)
			}
			told(ThreadDeleted)
		})
	}
}

// Followers in this process of another process's thread look at its file
// once per notice that it may have changed (a write the watch reported,
// a due look at an unvouched tail), not each at every wake-up: 64 of
// them each looking, one after another, was most of their processor time.
func TestCaughtUpFollowersLetOneLookAtTheFile(t *testing.T) {
	th, r := writerAndFollower(t, Options{})
	const followers = 16
	gots := followS(t, r, followers, FollowOptions{})
	const n = 300
	appendFlags(t, th, n)
	expectSeqs(t, r, gots, 1, n+1)
	h := r.hubOf("s")
	// Each notice is looked at once, by whichever follower takes it; a
	// follower also looks while it is not caught up (its first steps).
	if looks, notices := h.looks.Load(), h.gen.Load(); looks > int64(notices)+4*followers {
		t.Fatalf("%d followers looked at the file %d times for %d notices; want at most %d", followers, looks, notices, int64(notices)+4*followers)
	}
}

// A follower that has synced a tail (the writer paused) and then finds
// one frame at a time, each vouched for only by the next, does not sync
// at every step: the sync counts as progress. (It did: 30-90 syncs in
// 500 appends of BenchmarkFollow, each making the writer's next pause.)
func TestFollowerDoesNotSyncEachFrameAfterAPause(t *testing.T) {
	th, r := writerAndFollower(t, Options{})
	gots := followS(t, r, 1, FollowOptions{})
	expectSeqs(t, r, gots, 1, 1)
	// The header's tail is synced once the file is quiet; then a frame
	// every 3 ms (a pace, not a wait), slower than the watch's rounds, so
	// that each look finds one new frame.
	time.Sleep(3 * tailMaxWait)
	const n = 60
	for i := range n {
		if _, err := th.UpdateMetadata(ictx, MetadataUpdate{Flags: map[string]bool{"f": i%2 == 0}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Millisecond)
	}
	expectSeqs(t, r, gots, 2, n+1)
	// The first tail, the last, and one for each pause of the disk over
	// tailWait; not one a frame.
	if syncs := r.hubOf("s").syncs.Load(); syncs > n/4 {
		t.Fatalf("the follower synced the file %d times for %d frames written 3 ms apart", syncs, n)
	}
}

// A thread archived and deleted by another process within one round of
// the watch is told deleted, and nothing after that: the round's events
// are judged by what the directories hold when it is taken.
func TestWatchRoundEndsWithWhatHolds(t *testing.T) {
	th, r := writerAndFollower(t, Options{})
	wr := th.db
	events := watchEvents(t, r)
	other, err := wr.CreateThread(ictx, ThreadOptions{ID: "t2"})
	if err != nil {
		t.Fatal(err)
	}
	_ = other.Close()
	if _, err := wr.Archive(ictx, "t2", "done"); err != nil {
		t.Fatal(err)
	}
	if _, err := wr.Delete(ictx, "t2"); err != nil {
		t.Fatal(err)
	}
	var last ThreadEvent
	for quiet := time.NewTimer(5 * time.Second); ; {
		select {
		case ev := <-events:
			if ev.Thread == "t2" {
				last = ev
			}
			quiet.Reset(2 * time.Second) // the last event, then a quiet spell
			continue
		case <-quiet.C:
		}
		break
	}
	if last.Kind != ThreadDeleted {
		t.Fatalf("the last event of a thread created, archived and deleted is %+v, want deleted", last)
	}
}

// When the kernel drops notifications, watchers are told to re-read the
// list (a thread event of no thread), and followers look where their
// rollouts are.
func TestWatchersHearOfMissedNotifications(t *testing.T) {
	th, r := writerAndFollower(t, Options{})
	w, err := r.Watch(ictx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	gots := followS(t, r, 1, FollowOptions{})
	expectSeqs(t, r, gots, 1, 1)
	h := r.hubOf("s")
	moves := h.moved()
	r.overflowed()
	if !w.Next() {
		t.Fatal(w.Err())
	}
	if ev := w.Event(); ev != (ThreadEvent{Kind: ThreadsMissed}) {
		t.Fatalf("after an overflow the watcher was told %+v", ev)
	}
	if h.moved() == moves {
		t.Fatal("the followers were not told to look where their rollouts are")
	}
	appendFlags(t, th, 1)
	expectSeqs(t, r, gots, 2, 2) // after the overflow
}

// watchEvents opens a watcher of db, closed when the test ends, and
// passes on what it tells.
func watchEvents(t *testing.T, db *DB) <-chan ThreadEvent {
	t.Helper()
	w, err := db.Watch(ictx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	events := make(chan ThreadEvent, 1024)
	go func() {
		for w.Next() {
			events <- w.Event()
		}
	}()
	return events
}
