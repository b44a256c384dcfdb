package projection

import (
	"context"
	"fmt"
	"math/bits"
	"path/filepath"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// gapFixture is a store fed by hand: frames are appended to rollouts and
// enqueued when, and in the order, a test says.
type gapFixture struct {
	t *testing.T
	w *workspace
	s *Store
	n int
}

// newGapFixture opens a store (no linger) with threads each holding an
// open turn of items items, applied.
func newGapFixture(t *testing.T, items int, threads ...string) *gapFixture {
	ctx := context.Background()
	w := newWorkspace(t)
	s, err := Open(ctx, Options{Path: filepath.Join(t.TempDir(), "state.db"), Root: w.root, WorkspaceID: testWorkspace, Linger: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	w.store = s
	g := &gapFixture{t: t, w: w, s: s}
	for _, id := range threads {
		w.create(id, rollout.Source{})
		w.append(id, rec(t, rollout.KindTurnStarted, "a", rollout.TurnStarted{Model: "m1"}))
		for range items {
			w.append(id, g.item())
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g *gapFixture) item() rollout.Record {
	g.n++
	return rec(g.t, rollout.KindItemAppended, "a", rollout.Item{ID: fmt.Sprintf("i%d", g.n), Type: rollout.ItemToolResult, Text: fmt.Sprintf("output %d", g.n)})
}

// frames appends k frames of one item each to id without enqueuing them.
func (g *gapFixture) frames(id string, k int) []Batch {
	g.w.feed = false
	defer func() { g.w.feed = true }()
	var bs []Batch
	for range k {
		recs := []rollout.Record{g.item()}
		res := g.w.append(id, recs...) // sets the records' Seq and Time, as written
		bs = append(bs, Batch{Thread: id, Location: LocationActive, Offset: res.Offset, End: res.End, DataCRC: res.DataCRC, Records: recs})
	}
	return bs
}

func (g *gapFixture) projectedSeq(id string) uint64 {
	var seq uint64
	if err := g.s.r.QueryRow(`SELECT projected_seq FROM threads WHERE id = ?`, id).Scan(&seq); err != nil {
		g.t.Fatal(err)
	}
	return seq
}

// A frame that does not follow the last one applied (one another writer
// wrote, which only the rollout has) sends its thread to the rollout in
// the cycle that finds it: no frame waits for another. The catch-up takes
// the open turn from the applier instead of reading its items from their
// rows, a frame that comes late is passed over, frames in order cost no
// catch-up, and the projection is what a rebuild makes.
func TestFramePastAGapIsCaughtUpFromTheRollout(t *testing.T) {
	ctx := context.Background()
	g := newGapFixture(t, 300, "t1")
	s := g.s
	loads := s.turnLoads.Load()
	flush := func() {
		t.Helper()
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}

	catchUps := s.catchUps.Load()
	bs := g.frames("t1", 3)
	s.Enqueue(bs[0])
	s.Enqueue(bs[2]) // bs[1] is not published by this store
	flush()
	if got, want := g.projectedSeq("t1"), bs[2].Records[0].Seq; got != want {
		t.Fatalf("projected to seq %d, want %d", got, want)
	}
	if s.catchUps.Load() == catchUps {
		t.Fatal("the thread went past a gap without a catch-up")
	}
	s.Enqueue(bs[1]) // late, and applied already: passed over
	flush()
	if got, want := g.projectedSeq("t1"), bs[2].Records[0].Seq; got != want {
		t.Fatalf("after a late frame: projected to seq %d, want %d", got, want)
	}

	catchUps = s.catchUps.Load()
	for _, b := range g.frames("t1", 3) {
		s.Enqueue(b)
	}
	flush()
	if got := s.catchUps.Load() - catchUps; got != 0 {
		t.Errorf("frames enqueued in order: %d catch-ups from the rollout, want 0", got)
	}
	if got := s.turnLoads.Load() - loads; got != 0 {
		t.Errorf("the open turn's items were read from their rows %d times, want 0 (catch-ups take the turn in progress from the applier before them)", got)
	}
	fresh, err := Open(ctx, Options{Root: g.w.root, WorkspaceID: testWorkspace})
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
