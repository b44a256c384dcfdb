package rolloutdb

import (
	"testing"
	"time"

	"github.com/cockroachdb/errors"
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
	th, _, fs := twoFollowers(t, 0)
	wr := th.db
	gots := []<-chan uint64{collectSeqs(fs[0]), collectSeqs(fs[1])}
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
	const n = 10
	_, r, fs := twoFollowers(t, n)
	caughtUp, behind := fs[0], fs[1]
	nextSeqs(t, caughtUp, 1, n+1)
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
	onReadLock(t, behind, func() {
		h.log.Store(kept)
		h.gen.Add(1)
		found, w, err := caughtUp.step()
		if found || err != nil || w == nil {
			t.Errorf("caught-up follower with the lock taken: found %v, err %v, wake-up %v", found, err, w)
		}
		wake = w
	})
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

// Found by a review of 4e25a11 (the four below); each failed every time
// before its fix.

// A follower closed by its client (from another goroutine) while it holds
// the read lock: its look reads the new frame, but Close lowered the
// follower count first, so it keeps nothing for the others. It recorded
// the look all the same and woke nobody; a caught-up follower that found
// the lock taken waited for the safety net, and, woken, would have found
// the look made.
func TestAFollowerClosedWhileReadingLeavesTheLookToTheOthers(t *testing.T) {
	const n = 10
	th, r, fs := twoFollowers(t, n)
	waiting, closing := fs[0], fs[1]
	nextSeqs(t, waiting, 1, n+1) // it reads the file
	nextSeqs(t, closing, 1, n+1) // it takes what the first kept
	h := r.hubOf("s")
	looked := h.looked.Load()
	res, err := th.UpdateMetadata(ictx, MetadataUpdate{Flags: map[string]bool{"g": true}})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); h.gen.Load() <= looked; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the directory watch did not tell the hub of the write")
		}
	}
	// A look syncs the tail at once (no frame vouches for it, and none
	// has for longer than tailMaxWait) instead of arming a retry, whose
	// wake-up would hide the one the closing follower owes.
	time.Sleep(2 * tailMaxWait)
	var wake <-chan struct{}
	onReadLock(t, closing, func() {
		found, w, err := waiting.step() // owed a look: finds the lock taken
		if found || err != nil || w == nil {
			t.Errorf("caught-up follower with the lock taken: found %v, err %v, wake-up %v", found, err, w)
		}
		wake = w
		closing.Close()
	})
	closing.Next()
	if wake == nil {
		t.Fatal("the closing follower did not take the read lock")
	}
	select {
	case <-wake:
	case <-time.After(30 * time.Second):
		t.Fatal("the closed follower's look woke nobody")
	}
	got := collectSeqs(waiting)
	if s := nextSeq(t, got, "the follower left"); s != res.LastSeq {
		t.Fatalf("the follower left: seq %d, want %d", s, res.LastSeq)
	}
}

// Followers caught up with what one of them kept, when a frame is damaged
// among new ones: the look reads up to the damage and stopped there as if
// at the end, so the others, caught up and with the look made, never
// looked past it (to sync and read the durable frames after it) until a
// write came.
func TestCaughtUpFollowersReadPastNewDamage(t *testing.T) {
	th, r := writerAndFollower(t, Options{})
	appendFlags(t, th, 5)
	gots := followS(t, r, 2, FollowOptions{PollInterval: time.Hour})
	expectSeqs(t, r, gots, 1, 6)
	h := r.hubOf("s")
	for deadline := time.Now().Add(30 * time.Second); h.looks.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second follower never looked at the file")
		}
	}
	// No follower reads the next frames before one of them is damaged.
	h.readMu.Lock()
	var offs []int64
	var res rollout.AppendResult
	for range 4 {
		var err error
		if res, err = th.UpdateMetadata(ictx, MetadataUpdate{Flags: map[string]bool{"y": true}}); err != nil {
			h.readMu.Unlock()
			t.Fatal(err)
		}
		offs = append(offs, res.Offset)
	}
	damageHeader(t, th.Path(), offs[1]) // seq 8
	time.Sleep(3 * tailWait)            // the notices come; the tail is quiet
	h.unlockRead(false)
	for i, got := range gots {
		for s := uint64(0); s < res.LastSeq; {
			s = nextSeq(t, got, "a follower past the damage")
			if s == 8 {
				t.Fatalf("follower %d yielded the damaged frame", i)
			}
		}
	}
}

// A follower's sync of the rollout outlived the rollout: another process
// deletes the thread and creates it again, and a follower that looks at
// the new file before the hub is told (the directory watch's round comes
// later; with no watch, never) took the old file's sync for the new one's
// frames, which nothing had made durable (SyncNever, no later frame).
func TestASyncOfAReplacedRolloutDoesNotVouchForTheNewOne(t *testing.T) {
	th, r := writerAndFollower(t, Options{Sync: rollout.SyncNever})
	for _, db := range []*DB{th.db, r} {
		db.private.newDirNotifier = func([]string) (dirNotifier, error) { return nil, errors.New("no notification here") }
	}
	wdb := th.db
	appendFlags(t, th, 300)
	first, err := r.Follow(ictx, "s", FollowOptions{PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	nextSeqs(t, first, 1, 301)
	h := r.hubOf("s")
	if h.syncs.Load() == 0 {
		t.Fatal("the follower yielded a tail no frame vouched for without syncing it")
	}
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := wdb.Delete(ictx, "s"); err != nil {
		t.Fatal(err)
	}
	th2, err := wdb.CreateThread(ictx, ThreadOptions{ID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer th2.Close()
	appendFlags(t, th2, 3)
	syncs := h.syncs.Load()
	again, err := r.Follow(ictx, "s", FollowOptions{PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	nextSeqs(t, again, 1, 4) // the new rollout's
	if h.syncs.Load() == syncs {
		t.Fatal("the new rollout's frames were yielded on the old rollout's sync")
	}
}

// A look that began before the directory watch told the hub of a move (a
// delete, a repair's new file) read the old file; what it kept after the
// move cleared the hub would be taken by a new follower, which has read no
// file yet, as the thread's records. Frames of a file opened before a move
// are not kept.
func TestFramesReadBeforeAMoveAreNotKept(t *testing.T) {
	h := &hub{}
	h.follow(2)
	fr := hubFrame{recs: []rollout.Record{{Seq: 1}}, off: rollout.FileHeaderSize, end: rollout.FileHeaderSize + 64, fileID: 7}
	opened := h.moved() // the reader opens the file
	h.moves.Add(1)      // pokeHub: the move is counted, then what is kept is cleared
	h.clear()
	if n := h.published([]hubFrame{fr}, opened); n != 0 || len(h.log.Load().list()) != 0 {
		t.Fatalf("frames read before the move: %d kept", n)
	}
	if n := h.published([]hubFrame{fr}, h.moved()); n != 1 {
		t.Fatalf("frames read after the move: %d kept, want 1", n)
	}
}

// twoFollowers writes n records to a thread "s" and follows it with two
// followers in another DB (polling hourly: no safety net hides a follower
// left waiting), which the test drives itself.
func twoFollowers(t *testing.T, n int) (*Thread, *DB, [2]*Follower) {
	t.Helper()
	th, r := writerAndFollower(t, Options{})
	appendFlags(t, th, n)
	var fs [2]*Follower
	for i := range fs {
		f, err := r.Follow(ictx, "s", FollowOptions{PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		fs[i] = f
	}
	return th, r, fs
}

// nextSeqs checks that f's Next yields seqs first..last, in order.
func nextSeqs(t *testing.T, f *Follower, first, last uint64) {
	t.Helper()
	for want := first; want <= last; want++ {
		if !f.Next() || f.Record().Seq != want {
			t.Fatalf("seq %d (err %v), want %d", f.Record().Seq, f.Err(), want)
		}
	}
}

// onReadLock runs hook once, as f takes its hub's read lock (in f's Next,
// before it reads). The hook is unset by the goroutine that runs it,
// before followers that may take the lock later are started.
func onReadLock(t *testing.T, f *Follower, hook func()) {
	f.db.private.readLocked = func(g *Follower) {
		if g == f {
			f.db.private.readLocked = nil
			hook()
		}
	}
}
