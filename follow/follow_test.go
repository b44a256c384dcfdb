package follow

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// Followers of a thread this DB writes take the frames its Publisher
// publishes: one from the start, one from the middle, one from now, and
// one that falls further behind than the stream keeps (it reads the
// rollout); all end once the thread is archived, having seen every
// record once, in order.
func TestFollowersTakeThePublishedFrames(t *testing.T) {
	root := newRoot(t, vfs.OS)
	h := newHub(t, root, vfs.OS, false)
	w := create(t, vfs.OS, root, "p", rollout.SyncNever)
	p := h.Publisher("p", w.Header().FileID, w.End(), w.LastSeq())
	appendN(t, w, p, 10)
	all := drain(t, h, "p", Options{})
	mid := drain(t, h, "p", Options{AfterSeq: 5})
	now := drain(t, h, "p", Options{AfterSeq: 11})
	all.expect(t, "from the start", 1, 11)
	mid.expect(t, "from the middle", 6, 11)
	const n = 3 * keepRecords
	appendN(t, w, p, n)
	late := drain(t, h, "p", Options{})
	all.expect(t, "from the start", 12, n+11)
	mid.expect(t, "from the middle", 12, n+11)
	now.expect(t, "from now", 12, n+11)
	late.expect(t, "behind", 1, n+11)

	// Archived: the record is published, the file moves, the writer
	// closes.
	rec, _ := rollout.NewRecord(rollout.KindArchived, "", rollout.Lifecycle{})
	res, err := w.Append(ctx, []rollout.Record{rec}, rollout.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Publish(Frame{FileID: w.Header().FileID, Offset: res.Offset, End: res.End, DataCRC: res.DataCRC, Records: []rollout.Record{rec}})
	from, _ := rollout.ActivePath(root, "p")
	to, _ := rollout.ArchivedPath(root, "p")
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
	h.Moved("p")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p.Close()
	for _, d := range []*drained{all, mid, now, late} {
		got := d.end(t, "archived")
		if len(got) != 1 || got[0].Kind != rollout.KindArchived || d.f.Err() != nil || d.f.End() != Archived {
			t.Fatalf("after the archive: %d records, err %v, end %q", len(got), d.f.Err(), d.f.End())
		}
	}
}

// A follower of a thread another process writes yields a frame only once
// it is durable. Here the writer never syncs (SyncNever), so no frame
// records another durable: every record yielded must survive a power cut
// that keeps nothing unsynced but what the followers' syncs made durable.
// So while the writer streams, past a damaged frame header, and in a
// rollout written again under the same thread id (deleted and created
// again), whose frames the old file's syncs must not be taken to cover.
func TestFollowersYieldOnlyDurableFrames(t *testing.T) {
	for _, tc := range []struct {
		name string
		// run writes thread "d" and follows it; it returns what was
		// yielded of the rollout at its path when it returns.
		run func(t *testing.T, mfs *vfs.MemFS, root string, h *Hub) []rollout.Record
	}{
		{"streaming", func(t *testing.T, mfs *vfs.MemFS, root string, h *Hub) []rollout.Record {
			w := create(t, mfs, root, "d", rollout.SyncNever)
			d := drain(t, h, "d", Options{PollInterval: time.Millisecond})
			got := d.expect(t, "the header", 1, 1)
			for d.last.Load() < 100 {
				appendOne(t, w, nil)
			}
			return append(got, d.expect(t, "streaming", 2, d.last.Load())...)
		}},
		{"past damage", func(t *testing.T, mfs *vfs.MemFS, root string, h *Hub) []rollout.Record {
			// Frames each synced, one damaged since; then a writer that
			// does not sync appends more (the first of them records the
			// file durable past the damage: it is damage, not a torn
			// tail).
			w := create(t, mfs, root, "d", rollout.SyncAlways)
			var offs []int64
			for range 20 {
				offs = append(offs, appendOne(t, w, nil).Offset)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			path, _ := rollout.ActivePath(root, "d")
			f, err := mfs.OpenRW(path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{0, 0, 0, 0}, offs[7]+4); err != nil { // seq 9's header
				t.Fatal(err)
			}
			_ = f.Close()
			w, _, err = rollout.Open(ctx, path, "d", rollout.Options{FS: mfs, Sync: rollout.SyncNever})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = w.Close() })
			last := appendN(t, w, nil, 20).LastSeq
			d := drain(t, h, "d", Options{PollInterval: time.Millisecond})
			got := append(d.expect(t, "before the damage", 1, 8), d.expect(t, "after it", 10, last)...)
			if len(d.f.Damage()) != 1 {
				t.Fatalf("damage %v, want the one frame", d.f.Damage())
			}
			return got
		}},
		{"created again", func(t *testing.T, mfs *vfs.MemFS, root string, h *Hub) []rollout.Record {
			w := create(t, mfs, root, "d", rollout.SyncNever)
			last := appendN(t, w, nil, 30).LastSeq
			first := drain(t, h, "d", Options{PollInterval: time.Millisecond})
			first.expect(t, "the first rollout", 1, last)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			path, _ := rollout.ActivePath(root, "d")
			if err := mfs.Remove(path); err != nil {
				t.Fatal(err)
			}
			w2 := create(t, mfs, root, "d", rollout.SyncNever)
			appendN(t, w2, nil, 3)
			again := drain(t, h, "d", Options{PollInterval: time.Millisecond})
			got := again.expect(t, "the new rollout", 1, 4)
			first.end(t, "the first follower")
			if !errors.Is(first.f.Err(), ErrRolloutReplaced) && !errors.Is(first.f.Err(), ErrThreadDeleted) {
				t.Fatalf("the first follower ended with %v", first.f.Err())
			}
			return got
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(3) {
				mfs := vfs.NewMemFS()
				root := newRoot(t, mfs)
				h := newHub(t, root, mfs, false)
				yielded := tc.run(t, mfs, root, h)
				kept := mfs.Crash(rand.New(rand.NewPCG(seed, 1)), false)
				path, _ := rollout.ActivePath(root, "d")
				src, size, closeSrc, err := rollout.OpenRead(kept, path)
				if err != nil {
					t.Fatal(err)
				}
				r, err := rollout.NewReader(src, size, rollout.ReaderOptions{})
				if err != nil {
					t.Fatal(err)
				}
				survived := map[uint64]rollout.Record{}
				for r.Next() {
					survived[r.Record().Seq] = r.Record()
				}
				closeSrc()
				for _, rec := range yielded {
					if s, ok := survived[rec.Seq]; !ok || s.Kind != rec.Kind || !bytes.Equal(s.Body, rec.Body) || !s.Time.Equal(rec.Time) {
						t.Fatalf("seed %d: seq %d was yielded, and a power cut lost it", seed, rec.Seq)
					}
				}
			}
		})
	}
}

// Followers of a thread another process writes, where that writer syncs
// every append (each frame records the one before durable), do not sync
// its file while it streams: its last frame only, once it stops, by one
// of them for all; and after that pause, again not while it streams. A
// sync by a follower is a flush of the writer's file.
func TestFollowersDoNotSyncAStreamingWriter(t *testing.T) {
	root := newRoot(t, vfs.OS)
	counter := &syncCounter{FS: vfs.OS}
	h := newHub(t, root, counter, true)
	w := create(t, vfs.OS, root, "s", rollout.SyncAlways)
	a := drain(t, h, "s", Options{PollInterval: time.Hour})
	b := drain(t, h, "s", Options{PollInterval: time.Hour})
	a.expect(t, "a", 1, 1)
	b.expect(t, "b", 1, 1)
	const n = 200
	first := counter.syncs.Load() // the header's
	for burst := range 2 {
		from := w.LastSeq() + 1
		last := appendN(t, w, nil, n).LastSeq
		a.expect(t, "a", from, last)
		b.expect(t, "b", from, last)
		// The last frame is yielded once synced: the pause, paid once. A
		// pause of the writer's disk longer than tailWait may cost one
		// more.
		if syncs := counter.syncs.Load() - first; syncs < int64(burst+1) || syncs > int64(burst+1)+n/20 {
			t.Fatalf("after %d bursts of %d frames, the followers synced the file %d times; want one a burst, and at most %d more", burst+1, n, syncs, n/20)
		}
	}
}

// A follower of a thread another process writes without syncing
// (SyncNever: no frame records another durable) keeps up while the writer
// streams without a pause: the first frame not known durable waits
// tailWait, not for the file to stop growing.
func TestFollowerKeepsUpWithAnUnsyncedStreamingWriter(t *testing.T) {
	root := newRoot(t, vfs.OS)
	h := newHub(t, root, vfs.OS, true)
	w := create(t, vfs.OS, root, "s", rollout.SyncNever)
	d := drain(t, h, "s", Options{PollInterval: time.Hour})
	d.expect(t, "the header", 1, 1)
	target := w.LastSeq() + 200
	deadline := time.Now().Add(30 * time.Second)
	for d.last.Load() < target {
		appendOne(t, w, nil)
		if time.Now().After(deadline) {
			t.Fatalf("while the writer streamed to seq %d, the follower yielded up to seq %d", w.LastSeq(), d.last.Load())
		}
	}
}

// Followers of another process's thread longer than a read, with no
// write coming (no notice, and polling hourly): each reads on to the end,
// whether the frames record one another durable (SyncAlways) or not
// (SyncNever: the tailer syncs, a batch at a time).
func TestFollowersCatchUpWithNoWriteComing(t *testing.T) {
	for _, sync := range []rollout.SyncPolicy{rollout.SyncAlways, rollout.SyncNever} {
		root := newRoot(t, vfs.OS)
		h := newHub(t, root, vfs.OS, true)
		w := create(t, vfs.OS, root, "s", sync)
		n := 3 * followBatch
		if sync == rollout.SyncAlways {
			n = followBatch + 100 // each one an fsync
		}
		last := appendN(t, w, nil, n).LastSeq
		a := drain(t, h, "s", Options{PollInterval: time.Hour})
		b := drain(t, h, "s", Options{PollInterval: time.Hour})
		a.expect(t, "a", 1, last)
		b.expect(t, "b", 1, last)
	}
}

// A follower that catches up from the start, and whose client then stops
// reading, does not hold up the followers that are caught up: each record
// the writer appends next reaches them.
func TestAFollowerCatchingUpDoesNotHoldUpCaughtUpOnes(t *testing.T) {
	root := newRoot(t, vfs.OS)
	h := newHub(t, root, vfs.OS, true)
	w := create(t, vfs.OS, root, "s", rollout.SyncNever)
	live := []*drained{drain(t, h, "s", Options{PollInterval: time.Hour}), drain(t, h, "s", Options{PollInterval: time.Hour})}
	last := appendN(t, w, nil, 3*followBatch).LastSeq
	for _, d := range live {
		d.expect(t, "live", 1, last)
	}
	for range 20 {
		late, err := h.Follow(ctx, "s", Options{PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if !late.Next() { // one step: a batch of old frames
			t.Fatal(late.Err())
		}
		seq := appendOne(t, w, nil).LastSeq
		for _, d := range live {
			d.expect(t, "live", seq, seq)
		}
		_ = late.Close()
	}
}

// A follower closed by its client, from another goroutine, while others
// follow the same thread, leaves them following.
func TestClosingAFollowerLeavesTheOthersFollowing(t *testing.T) {
	root := newRoot(t, vfs.OS)
	h := newHub(t, root, vfs.OS, true)
	w := create(t, vfs.OS, root, "s", rollout.SyncAlways)
	stay := drain(t, h, "s", Options{PollInterval: time.Hour})
	stay.expect(t, "staying", 1, 1)
	for i := range 20 {
		leave := drain(t, h, "s", Options{PollInterval: time.Hour})
		seq := appendOne(t, w, nil).LastSeq
		if i%2 == 1 {
			leave.expect(t, "leaving", 1, seq)
		}
		_ = leave.f.Close() // while it may be reading
		stay.expect(t, "staying", seq, seq)
	}
}

// Frames that come with a damaged one among them, to followers caught up:
// the damaged frame is skipped and reported, and every durable frame after
// it is yielded, with no write coming after.
func TestCaughtUpFollowersReadPastNewDamage(t *testing.T) {
	root := newRoot(t, vfs.OS)
	h := newHub(t, root, vfs.OS, true)
	w := create(t, vfs.OS, root, "s", rollout.SyncAlways)
	appendN(t, w, nil, 5)
	gots := []*drained{drain(t, h, "s", Options{PollInterval: time.Hour}), drain(t, h, "s", Options{PollInterval: time.Hour})}
	for _, d := range gots {
		d.expect(t, "before", 1, 6)
	}
	// The next four frames, written beside the rollout (a copy of it, so
	// they are of its file), then put in place at once with the second
	// one's header damaged.
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	path, _ := rollout.ActivePath(root, "s")
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	side := filepath.Join(t.TempDir(), "s.rollout")
	if err := os.WriteFile(side, old, 0o644); err != nil {
		t.Fatal(err)
	}
	sw, _, err := rollout.Open(ctx, side, "s", rollout.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var res []rollout.AppendResult
	for range 4 {
		res = append(res, appendOne(t, sw, nil))
	}
	_ = sw.Close()
	b, err := os.ReadFile(side)
	if err != nil {
		t.Fatal(err)
	}
	tail := b[len(old):]
	copy(tail[res[1].Offset-int64(len(old))+4:], []byte{0, 0, 0, 0})
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(tail); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	for i, d := range gots {
		for _, want := range []uint64{7, 9, 10} {
			d.expect(t, "past the damage", want, want)
		}
		if dm := d.f.Damage(); len(dm) != 1 || dm[0].Offset != res[1].Offset {
			t.Fatalf("follower %d: damage %v, want one region at %d", i, dm, res[1].Offset)
		}
	}
}

// A stream lives while it is used: a Hub that wrote many threads keeps
// nothing of those neither open nor followed, and the frames it keeps
// for followers stay bounded however long the thread.
func TestStreamsLiveWhileUsed(t *testing.T) {
	root := newRoot(t, vfs.OS)
	h := newHub(t, root, vfs.OS, false)
	streams := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.streams)
	}
	for i := range 50 {
		p := h.Publisher("t"+string(rune('a'+i%26))+string(rune('a'+i/26)), 1, rollout.FileHeaderSize, 0)
		p.Close()
		p.Close() // given back once
	}
	if n := streams(); n != 0 {
		t.Fatalf("%d streams kept for threads neither open nor followed", n)
	}
	w := create(t, vfs.OS, root, "k", rollout.SyncNever)
	p := h.Publisher("k", w.Header().FileID, w.End(), w.LastSeq())
	f, err := h.Follow(ctx, "k", Options{})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, w, p, 3*keepRecords)
	if s := h.lookup("k"); s == nil || s.held > keepRecords || len(s.frames) == 0 {
		t.Fatalf("the stream keeps %+v", s)
	}
	p.Close()
	if n := streams(); n != 1 {
		t.Fatalf("%d streams while a follower follows, want 1", n)
	}
	_ = f.Close()
	if n := streams(); n != 0 {
		t.Fatalf("%d streams after the follower and the writer closed", n)
	}
}

// Close releases the rollout a follower had open and, with the last
// follower of another process's thread, the directory watch.
func TestCloseReleasesTheRolloutAndTheWatch(t *testing.T) {
	root := newRoot(t, vfs.OS)
	h := newHub(t, root, vfs.OS, true)
	w := create(t, vfs.OS, root, "a", rollout.SyncAlways)
	path := filepath.Join(root, rollout.ActiveDir, "a"+rollout.RolloutExt)
	watches := openFDs("anon_inode:inotify")
	for range 5 {
		d := drain(t, h, "a", Options{})
		d.expect(t, "a", w.LastSeq(), w.LastSeq()) // the tailer runs once it read what is durable
		_ = d.f.Close()
	}
	eventually(t, "the rollout and the watch are closed", func() bool {
		return openFDs(path) == 0 && openFDs("anon_inode:inotify") == watches
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dirs != nil {
		t.Fatal("the directory watch outlived its users")
	}
}

// When notifications are lost (the kernel's queue overflowed), watchers
// are told to read the list again (an event of no thread) and followers
// look where their rollouts are, and follow on.
func TestOverflowTellsWatchersAndFollowers(t *testing.T) {
	root := newRoot(t, vfs.OS)
	h := newHub(t, root, vfs.OS, true)
	w := create(t, vfs.OS, root, "s", rollout.SyncAlways)
	watch, err := h.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	d := drain(t, h, "s", Options{PollInterval: time.Hour})
	d.expect(t, "before", 1, 1)
	gen := func() uint64 {
		s := h.lookup("s")
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.gen
	}
	before := gen()
	h.overflowed()
	if !watch.Next() {
		t.Fatal(watch.Err())
	}
	if ev := watch.Event(); ev != (Event{Kind: EventsMissed}) {
		t.Fatalf("after an overflow the watcher was told %+v", ev)
	}
	if gen() == before {
		t.Fatal("the followers were not told to look where their rollouts are")
	}
	appendOne(t, w, nil)
	d.expect(t, "after", 2, 2)
}

// Writes to many files are not merged by the kernel: the directory watch
// takes them all in a round, however many, and a thread created after
// 12,000 interleaved writes to two others (below the kernel's queue of
// 16,384 events) is told to a watcher promptly. (One event per 500 µs
// took 13 s to come to it, and past the queue's size the creation was
// lost. Under the race detector the test's own writes can outrun any
// reader of the queue, so it stays below it.)
func TestWatchKeepsUpWithWritesToManyFiles(t *testing.T) {
	root := newRoot(t, vfs.OS)
	h := newHub(t, root, vfs.OS, true)
	w, err := h.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	created := make(chan struct{})
	go func() {
		for w.Next() {
			if ev := w.Event(); ev.Thread == "c" && ev.Kind == EventCreated {
				close(created)
				return
			}
		}
	}()
	active := filepath.Join(root, rollout.ActiveDir)
	var fs [2]*os.File
	for i, name := range []string{"a", "b"} {
		if fs[i], err = os.Create(filepath.Join(active, name+rollout.RolloutExt)); err != nil {
			t.Fatal(err)
		}
		defer fs[i].Close()
	}
	for i := range 12000 {
		if _, err := fs[i%2].Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(active, "c"+rollout.RolloutExt), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-created:
	case <-time.After(10 * time.Second):
		t.Fatal("a thread created after 12,000 writes to two others was not told to the watcher within 10 s")
	}
}
