package rolloutdb

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/rollout"
)

var ictx = context.Background()

// collectSeqs drains f on a goroutine.
func collectSeqs(f Follower) <-chan uint64 {
	got := make(chan uint64, 1024)
	go func() {
		defer close(got)
		for f.Next() {
			got <- f.Record().Seq
		}
	}()
	return got
}

func nextSeq(t *testing.T, got <-chan uint64, what string) uint64 {
	t.Helper()
	select {
	case s, ok := <-got:
		if !ok {
			t.Fatalf("%s: the follower ended", what)
		}
		return s
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: nothing yielded", what)
	}
	return 0
}

// Two frames whose Waits return out of order (concurrent appenders wait
// for durability outside the thread's lock) are published in write order,
// and the later one's append returns only once both are published.
func TestFramesArePublishedInWriteOrder(t *testing.T) {
	db, err := Open(ictx, t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ictx, ThreadOptions{ID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := db.Follow(ictx, "b", FollowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := collectSeqs(f)
	if s := nextSeq(t, got, "header"); s != 1 {
		t.Fatalf("first seq %d", s)
	}
	rec := func() []rollout.Record {
		r, _ := rollout.NewRecord(rollout.KindMetadataUpdated, "", rollout.MetadataUpdated{})
		return []rollout.Record{r}
	}
	ra, rb := rec(), rec()
	write := func(recs []rollout.Record) (rollout.Pending, uint64) {
		prep, err := th.w.Prepare(recs)
		if err != nil {
			t.Fatal(err)
		}
		defer prep.Release()
		p, ticket, err := th.write(ictx, prep, recs, rollout.AppendOptions{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p, ticket
	}
	pa, ta := write(ra)
	pb, tb := write(rb)
	// The later frame's Wait returns first: its acknowledgement resolves
	// it, publishes nothing past the unresolved earlier frame, and waits.
	acked := make(chan error, 1)
	go func() { _, err := th.acknowledge(pb, tb); acked <- err }()
	for resolved := false; !resolved; runtime.Gosched() {
		th.pub.mu.Lock()
		resolved = th.pub.frames[tb-th.pub.head].state == frameDurable
		if resolved && th.pub.done != ta {
			t.Errorf("published through ticket %d before ticket %d was resolved", th.pub.done-1, ta)
		}
		th.pub.mu.Unlock()
	}
	if _, err := th.acknowledge(pa, ta); err != nil {
		t.Fatal(err)
	}
	if err := <-acked; err != nil {
		t.Fatal(err)
	}
	for _, want := range []uint64{2, 3} {
		if s := nextSeq(t, got, "after the out-of-order acks"); s != want {
			t.Fatalf("seq %d, want %d", s, want)
		}
	}
}
