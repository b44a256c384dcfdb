package fleet_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// closedLoop appends n records to each thread, a goroutine a thread,
// each waiting for its ack before the next, and returns the Log's
// commit rounds and frames over it.
func closedLoop(t *testing.T, l *fleet.Log, ths []*fleet.Thread, n int) (rounds, frames int64) {
	t.Helper()
	m0 := l.Metrics()
	var wg sync.WaitGroup
	for i, th := range ths {
		wg.Go(func() {
			for k := range n {
				if _, err := th.Append(ctx, []rollout.Record{item(t, "", fmt.Sprintf("t%d r%d", i, k))}, rollout.AppendOptions{}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	m1 := l.Metrics()
	return m1.Rounds - m0.Rounds, m1.Frames - m0.Frames
}

// TestRoundWindowGathers checks that appenders that each wait for their
// ack share commit rounds, where without the window they alternate
// between two rounds, and that the window keeps every thread's frames in
// order. The window is long (a second), so that a loaded machine's slow
// appenders still come back within it.
func TestRoundWindowGathers(t *testing.T) {
	dsn := testDSN(t)
	l := openLog(t, dsn, "gather", fleet.Options{RoundWindow: time.Second})
	var ths []*fleet.Thread
	for i := range 8 {
		th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: fmt.Sprint("g", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { th.Close() })
		ths = append(ths, th)
	}
	closedLoop(t, l, ths, 5) // the threads come back: the Log learns to wait
	rounds, frames := closedLoop(t, l, ths, 20)
	if per := float64(frames) / float64(rounds); per < 6 {
		t.Errorf("%d frames in %d rounds (%.1f a round): the window did not gather 8 appenders", frames, rounds, per)
	}
	for i := range ths {
		recs := readAll(t, l, fmt.Sprint("g", i))
		if len(recs) != 1+25 {
			t.Fatalf("thread %d: %d records", i, len(recs))
		}
		for k, r := range recs {
			if r.Seq != uint64(k+1) {
				t.Fatalf("thread %d: record %d has seq %d", i, k, r.Seq)
			}
		}
	}
}

// TestRoundWindowLetsIdleThreadsGo checks that a thread that stops
// appending holds up the next round once at most: after a window passes
// without it, rounds go out at once until threads come back in time
// again.
func TestRoundWindowLetsIdleThreadsGo(t *testing.T) {
	dsn := testDSN(t)
	const window = 2 * time.Second // a round's wait counts against CommitTimeout: give it room
	l := openLog(t, dsn, "idle", fleet.Options{RoundWindow: window, CommitTimeout: 4 * window})
	a, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	closedLoop(t, l, []*fleet.Thread{a, b}, 10) // patient now
	// a stops; b appends alone. Its first append may wait for a (a window
	// at most); the ones after it must not.
	for k := range 6 {
		start := time.Now()
		if _, err := b.Append(ctx, []rollout.Record{item(t, "", fmt.Sprint("b alone ", k))}, rollout.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); k > 0 && d >= window {
			t.Fatalf("append %d of a lone thread took %s: rounds still wait for the idle thread", k, d)
		}
	}
}
