package projection

import (
	"context"
	"fmt"
	"math/bits"
	"path/filepath"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// Appends to one thread that one sync acknowledged together reach the
// projector in any order. Frames past a gap wait for the frame missing
// instead of sending the thread back to its rollout; a gap that stays
// (holdGap passes, or a Flush waits) is caught up from the rollout, and
// that catch-up does not read a long open turn's items again from their
// rows. Whatever the order, the projection is what a rebuild makes. (The
// deadlines only bound a failure; nothing here is timed.)
func TestFramesEnqueuedOutOfOrder(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s, err := Open(ctx, Options{Path: filepath.Join(t.TempDir(), "state.db"), Root: w.root, WorkspaceID: testWorkspace, Linger: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w.store = s
	w.create("t1", rollout.Source{})
	w.append("t1", rec(t, rollout.KindTurnStarted, "a", rollout.TurnStarted{Model: "m1"}))
	n := 0
	item := func() rollout.Record {
		n++
		return rec(t, rollout.KindItemAppended, "a", rollout.Item{ID: fmt.Sprintf("i%d", n), Type: rollout.ItemToolResult, Text: fmt.Sprintf("output %d", n)})
	}
	for range 300 {
		w.append("t1", item())
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	loads := s.turnLoads.Load()

	// frames appends k frames of one item each without handing them to
	// the projector, and returns their batches.
	frames := func(k int) []Batch {
		w.feed = false
		defer func() { w.feed = true }()
		var bs []Batch
		for range k {
			r := item()
			res := w.append("t1", r)
			r.Seq = res.FirstSeq
			bs = append(bs, Batch{Thread: "t1", Location: LocationActive, Offset: res.Offset, End: res.End, DataCRC: res.DataCRC, Records: []rollout.Record{r}})
		}
		return bs
	}
	held := func() int {
		s.proj.mu.Lock()
		defer s.proj.mu.Unlock()
		if pt := s.proj.held["t1"]; pt != nil {
			return len(pt.batches)
		}
		return 0
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting: %s", what)
			}
		}
	}
	projectedSeq := func() uint64 {
		var seq uint64
		if err := s.r.QueryRow(`SELECT projected_seq FROM threads WHERE id = 't1'`).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		return seq
	}

	// The first of six frames comes last: the others wait for it.
	catchUps := s.catchUps.Load()
	bs := frames(6)
	for _, b := range bs[1:] {
		s.Enqueue(b)
	}
	waitFor("the projector holding five frames past the gap", func() bool { return held() == 5 })
	s.Enqueue(bs[0])
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.catchUps.Load() - catchUps; got != 0 {
		t.Errorf("frames enqueued out of order: %d catch-ups from the rollout, want 0", got)
	}
	if got, want := projectedSeq(), bs[5].Records[0].Seq; got != want {
		t.Fatalf("projected to seq %d, want %d", got, want)
	}

	// A frame that never comes: the frames past it wait holdGap, then
	// the thread is caught up, with no Flush asking for it.
	catchUps = s.catchUps.Load()
	bs = frames(3)
	s.Enqueue(bs[1])
	s.Enqueue(bs[2])
	waitFor("a catch-up once the gap was held long enough", func() bool { return projectedSeq() == bs[2].Records[0].Seq })
	if s.catchUps.Load() == catchUps {
		t.Fatal("the thread went past a gap without a catch-up")
	}
	s.Enqueue(bs[0]) // late, and applied already: skipped

	// A Flush does not wait for a gap to fill: it catches the thread up,
	// here from the middle of a cycle's frames (the projector lingers
	// until the Flush, so that both frames are in its cycle).
	s.proj.mu.Lock()
	s.opts.Linger = time.Hour
	s.proj.mu.Unlock()
	bs = frames(3)
	s.Enqueue(bs[0])
	s.Enqueue(bs[2])
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := projectedSeq(), bs[2].Records[0].Seq; got != want {
		t.Fatalf("after Flush: projected to seq %d, want %d", got, want)
	}
	if held() != 0 {
		t.Fatal("frames still held after a Flush caught their thread up")
	}
	s.Enqueue(bs[1])

	if got := s.turnLoads.Load() - loads; got != 0 {
		t.Errorf("the open turn's items were read from their rows %d times, want 0 (catch-ups take the turn in progress from the applier before them)", got)
	}
	fresh, err := Open(ctx, Options{Root: w.root, WorkspaceID: testWorkspace})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got, want := dump(t, s), dump(t, fresh); got != want {
		t.Fatalf("projection differs from a rebuild:\n%s", dumpDiff(got, want))
	}
}

// A batch of rows of any size is written by one statement per 32 rows and
// one per bit of what remains, every row once.
func TestPow2Chunks(t *testing.T) {
	for n := range 200 {
		var sizes []int
		err := pow2Chunks(n, itemBatch, func(k, size int) error {
			if size != 1<<k || size > itemBatch {
				t.Fatalf("n %d: chunk %d of size %d", n, k, size)
			}
			sizes = append(sizes, size)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		sum := 0
		for _, s := range sizes {
			sum += s
		}
		if want := n/itemBatch + bits.OnesCount(uint(n%itemBatch)); sum != n || len(sizes) != want {
			t.Fatalf("n %d: chunks %v, want %d statements for %d rows", n, sizes, want, n)
		}
	}
}
