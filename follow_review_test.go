package rolloutdb

import (
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// Found by a review of the followers' shared looks at another process's
// file (7974f6e); each failed before its fix. Followers poll every hour
// here, so that the safety net cannot hide a follower left waiting.

// Two followers of another process's thread that no frame vouches for
// (SyncNever), more than followBatch frames behind. The reader syncs the
// first followBatch frames, reads them (not "cut"), and stores looked =
// gen: the rest of the file is never looked at again until the 8x
// PollInterval safety net.
func TestASyncedBatchDoesNotEndTheLook(t *testing.T) {
	th, r := writerAndFollower(t, Options{Sync: rollout.SyncNever})
	const n = 1500
	appendFlags(t, th, n)
	gots := followS(t, r, 2, FollowOptions{PollInterval: time.Hour})
	expectSeqs(t, r, gots, 1, n+1)
}

// Live followers of another process's thread, caught up, miss a notice
// while a follower that catches up from far behind holds readMu: their
// TryLock fails and they wait for "the follower that reads" to wake them,
// but that follower read old frames only (a read-ahead's worth, cut), so
// it publishes nothing new and wakes nobody. If its caller does not call
// Next again, the live followers wait for the next write, or the 8x
// PollInterval safety net.
func TestAFollowerCatchingUpWakesTheCaughtUpOnes(t *testing.T) {
	th, r := writerAndFollower(t, Options{})
	// The live followers start first and follow the writes as they come
	// (never a read-ahead's worth behind).
	gots := followS(t, r, 2, FollowOptions{PollInterval: time.Hour})
	const n = 5000
	for i := range n / 200 {
		appendFlags(t, th, 200)
		if i%2 == 0 {
			time.Sleep(5 * time.Millisecond) // a pace, not a wait
		}
	}
	expectSeqs(t, r, gots, 1, n+1)
	for trial := range 100 {
		// A follower from the start whose client takes one record and
		// then pauses: its one step reads followBatch old records.
		late, err := r.Follow(ictx, "s", FollowOptions{PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		stepped := make(chan struct{})
		go func() {
			late.Next()
			close(stepped)
		}()
		time.Sleep(time.Duration(trial%5) * 500 * time.Microsecond)
		res, err := th.UpdateMetadata(ictx, MetadataUpdate{Flags: map[string]bool{"f": true}})
		if err != nil {
			t.Fatal(err)
		}
		<-stepped
		expectSeqs(t, r, gots, res.LastSeq, res.LastSeq)
		late.Close()
	}
}

// Two followers catching up on a thread longer than a read-ahead, with
// no write coming: a look cut short at a read-ahead's worth counts as a
// notice, so that one of them reads on. (Each stopped after one batch
// until the 8x PollInterval safety net.)
func TestFollowersCatchUpPastABatchWithNoWriteComing(t *testing.T) {
	th, r := writerAndFollower(t, Options{})
	const n = 5000
	appendFlags(t, th, n)
	gots := followS(t, r, 2, FollowOptions{PollInterval: time.Hour})
	expectSeqs(t, r, gots, 1, n+1)
}

// Two followers of another process's thread; its last records and its
// archive come together. The follower that reads them (found = true, so
// no FollowArchived yet) is then caught up and looked >= gen: it never
// steps the file again, and Next does not end with FollowArchived until
// the 8x PollInterval safety net.
func TestEveryFollowerEndsAtTheArchive(t *testing.T) {
	th, r := writerAndFollower(t, Options{})
	wr := th.db
	var fs []*Follower
	var gots []<-chan uint64
	for range 2 {
		f, err := r.Follow(ictx, "s", FollowOptions{PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fs = append(fs, f)
		gots = append(gots, collectSeqs(f))
	}
	for i, got := range gots {
		if s := nextSeq(t, got, "follower"); s != 1 {
			t.Fatalf("follower %d: seq %d, want 1", i, s)
		}
	}
	const n = 5
	for i := range n {
		if _, err := th.UpdateMetadata(ictx, MetadataUpdate{Flags: map[string]bool{"f": i%2 == 0}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := wr.Archive(ictx, "s", "done"); err != nil {
		t.Fatal(err)
	}
	for i, got := range gots {
		want := uint64(2)
		deadline := time.After(30 * time.Second) // far short of the safety net; CI's machines are loaded
	read:
		for {
			select {
			case s, ok := <-got:
				if !ok {
					break read
				}
				if s != want {
					t.Fatalf("follower %d: seq %d, want %d", i, s, want)
				}
				want++
			case <-deadline:
				t.Fatalf("follower %d: Next did not end with FollowArchived within 30 s of the archive (yielded up to seq %d)", i, want-1)
			}
		}
		if want < n+2 || fs[i].End() != FollowArchived || fs[i].Err() != nil {
			t.Fatalf("follower %d: ended after seq %d, end %q, err %v", i, want-1, fs[i].End(), fs[i].Err())
		}
	}
}

// Found by CI (TestFollowersCatchUpPastABatchWithNoWriteComing, once in
// several runs). A caught-up follower owed a look finds the read lock
// taken and waits for its holder to wake it. The holder was a follower
// behind that, once it had the lock, found its frames kept (read by the
// follower that held the lock before it): it took them and unlocked
// without waking anyone, and the caught-up one waited for the safety net.
func TestAFollowerThatOnlyTakesKeptFramesWakesTheWaiting(t *testing.T) {
	th, r := writerAndFollower(t, Options{})
	const n = 10
	appendFlags(t, th, n)
	var fs [2]*Follower
	for i := range fs {
		f, err := r.Follow(ictx, "s", FollowOptions{PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fs[i] = f
	}
	caughtUp, behind := fs[0], fs[1]
	for want := uint64(1); want <= n+1; want++ {
		if !caughtUp.Next() || caughtUp.Record().Seq != want {
			t.Fatalf("caught-up follower: seq %d (err %v), want %d", caughtUp.Record().Seq, caughtUp.Err(), want)
		}
	}
	h := r.hubOf("s")
	kept := h.log.Load()
	if len(kept.list()) != n+1 {
		t.Fatalf("the hub keeps %d frames, want %d", len(kept.list()), n+1)
	}
	// The follower behind finds nothing kept, so it waits for the read
	// lock; as it takes it, the frames are kept again (as if read by the
	// holder before it), a notice comes, and the caught-up follower,
	// owed a look, finds the lock taken.
	h.clear()
	var wake <-chan struct{}
	testHookReadLocked = func(f *Follower) {
		if f != behind {
			return
		}
		testHookReadLocked = nil
		h.log.Store(kept)
		h.gen.Add(1)
		found, w, err := caughtUp.step()
		if found || err != nil || w == nil {
			t.Errorf("caught-up follower with the lock taken: found %v, err %v, wake-up %v", found, err, w)
		}
		wake = w
	}
	defer func() { testHookReadLocked = nil }()
	if !behind.Next() || behind.Record().Seq != 1 {
		t.Fatalf("follower behind: seq %d (err %v), want 1", behind.Record().Seq, behind.Err())
	}
	if wake == nil {
		t.Fatal("the follower behind did not take the read lock")
	}
	select {
	case <-wake:
	default:
		t.Fatal("the follower that took kept frames unlocked without waking the follower owed a look")
	}
	looks := h.looks.Load()
	if found, _, err := caughtUp.step(); found || err != nil {
		t.Fatalf("caught-up follower's look: found %v, err %v", found, err)
	}
	if h.looks.Load() != looks+1 || h.looked.Load() < h.gen.Load() {
		t.Fatalf("the woken follower did not look: looks %d→%d, looked %d of %d notices", looks, h.looks.Load(), h.looked.Load(), h.gen.Load())
	}
}
