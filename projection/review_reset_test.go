package projection

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// A reset that committed, followed in the same cycle by a catch-up that
// fails part-way: run() re-queues the reset, which drops again what the
// catch-up had already indexed (those threads are no longer dirty).
func TestReviewRequeuedResetDropsCaughtUpThreads(t *testing.T) { reviewCatchUpFailure(t, true) }

// Without a reset: the threads of the failed catch-up's batch after the
// failing one are no longer dirty, and never caught up.
func TestReviewCatchUpFailureLosesTheRestOfItsBatch(t *testing.T) { reviewCatchUpFailure(t, false) }

func reviewCatchUpFailure(t *testing.T, reset bool) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open(filepath.Join(w.root, "state.db"))
	w.store = s
	for i := 1; i <= 4; i++ {
		id := fmt.Sprint("t", i)
		w.create(id, rollout.Source{})
		w.turn(id, "a", fmt.Sprint("word", i))
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.idx.flush(ctx); err != nil {
		t.Fatal(err)
	}
	tids, err := queryInts(ctx, s.r, `SELECT tid FROM threads ORDER BY tid`)
	if err != nil {
		t.Fatal(err)
	}
	x := s.idx
	var gen string
	if err := x.w.QueryRow(`SELECT value FROM meta WHERE key = 'generation'`).Scan(&gen); err != nil {
		t.Fatal(err)
	}
	// The third thread's catch-up fails once (a write error).
	if _, err := x.w.Exec(fmt.Sprintf(`CREATE TRIGGER fail BEFORE INSERT ON indexed WHEN NEW.tid = %d BEGIN SELECT RAISE(ABORT, 'injected'); END`, tids[2])); err != nil {
		t.Fatal(err)
	}
	// A rebuild whose operations overflowed the queue: a reset, and every
	// thread to catch up, in one cycle.
	x.mu.Lock()
	c0 := x.cycles
	if reset {
		x.queue = append(x.queue, indexOp{kind: opReset, text: gen})
		x.enqueued++
	} else {
		// Each thread's words dropped from the index's view: mark 0
		// makes its catch-up redo it; the rows are put again.
		for _, tid := range tids {
			x.queue = append(x.queue, indexOp{kind: opDropThread, tid: tid})
		}
		x.enqueued++
	}
	for _, tid := range tids {
		x.dirty[tid] = true
	}
	x.cond.Broadcast()
	for x.cycles == c0 {
		x.cond.Wait()
	}
	cycleErr := x.lastError
	x.mu.Unlock()
	t.Logf("cycle error: %v", cycleErr)
	if _, err := x.w.Exec(`DROP TRIGGER fail`); err != nil {
		t.Fatal(err)
	}
	_ = x.flush(ctx) // may report the failed cycle
	if err := x.flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		if got := searchItems(t, s, fmt.Sprint("word", i), false); len(got) != 3 {
			t.Errorf("word%d: %v", i, got)
		}
	}
}
