package projection

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// The projector lingers over a small batch for more appends, but a read
// (Flush) and Close never wait for it: with a linger of an hour, both
// return at once with everything applied. (The deadlines only bound a
// failure; nothing here is timed.)
func TestLingerNeverDelaysAReadOrClose(t *testing.T) {
	w := newWorkspace(t)
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(context.Background(), Options{Path: path, Root: w.root, WorkspaceID: testWorkspace, Linger: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	w.store = s
	w.create("t1", rollout.Source{})
	w.turn("t1", "a", "hello")
	done := make(chan error, 1)
	go func() { done <- s.Flush(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Flush waited for the projector's linger")
	}
	// Applied by the projector, not by a read's catch-up: the row is
	// there without a read.
	var n, after int
	if err := s.r.QueryRow("SELECT projected_seq FROM threads WHERE id = 't1'").Scan(&n); err != nil || n < 3 {
		t.Fatalf("after Flush: projected to seq %d, %v", n, err)
	}
	w.turn("t1", "b", "again")
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close waited for the projector's linger")
	}
	w.store = nil
	s = w.open(path)
	if err := s.r.QueryRow("SELECT projected_seq FROM threads WHERE id = 't1'").Scan(&after); err != nil || after <= n {
		t.Fatalf("after Close: projected to seq %d, was %d, %v (the lingering batch was not applied)", after, n, err)
	}
}

// List skips comparing the thread directories with the rows while neither
// changed; a change to either, by this process or another, is seen by the
// next List all the same.
func TestListSeesChangesDespiteTheReconcileShortcut(t *testing.T) {
	w := newWorkspace(t)
	path := filepath.Join(t.TempDir(), "state.db")
	s := w.open(path)
	w.store = s
	for _, id := range []string{"a", "b", "c"} {
		w.create(id, rollout.Source{})
		w.turn(id, "t", "hello "+id)
	}
	ids := func() map[string]string { t.Helper(); return statuses(t, s) }
	if got := ids(); len(got) != 3 {
		t.Fatalf("listed %v", got)
	}
	ids() // matched: the shortcut is armed
	// Another process drops a row (its state.db is this one).
	other, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Exec(`DELETE FROM threads WHERE id = 'b'`); err != nil {
		t.Fatal(err)
	}
	if got := ids(); len(got) != 3 {
		t.Fatalf("a row dropped elsewhere was not brought back: %v", got)
	}
	// Another process says a rollout is elsewhere than it is.
	if _, err := other.Exec(`UPDATE threads SET location = 'archived', rollout_path = 'threads/archived/c.rollout' WHERE id = 'c'`); err != nil {
		t.Fatal(err)
	}
	if got := ids(); got["c"] != LocationActive {
		t.Fatalf("a row moved elsewhere was not put back: %v", got)
	}
	// A rollout appears that no row knows (another host made it).
	w.store = nil
	w.create("d", rollout.Source{})
	w.turn("d", "t", "hello d")
	w.store = s
	if got := ids(); len(got) != 4 {
		t.Fatalf("a new rollout was not listed: %v", got)
	}
}

// Enqueue waits while the projector holds MaxLag records unapplied
// (backpressure), so that a read never waits for more than that; it goes
// on once the projector catches up, and Close releases it. (The deadlines
// only bound a failure.)
func TestEnqueueWaitsWhileTheProjectorIsMaxLagBehind(t *testing.T) {
	w := newWorkspace(t)
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(context.Background(), Options{Path: path, Root: w.root, WorkspaceID: testWorkspace, MaxLag: 4, Linger: -1})
	if err != nil {
		t.Fatal(err)
	}
	w.store = s
	w.create("t1", rollout.Source{}) // 1 record
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The projector cannot apply: its writer connection is held.
	s.wmu.Lock()
	w.turn("t1", "a", "hello") // 8 records in 3 frames: the lag passes 4
	stalls := func() uint64 {
		s.proj.mu.Lock()
		defer s.proj.mu.Unlock()
		return s.proj.stalls
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.turn("t1", "b", "again")
	}()
	deadline := time.Now().Add(30 * time.Second)
	for stalls() == 0 {
		if time.Now().After(deadline) {
			s.wmu.Unlock()
			t.Fatal("no Enqueue waited with the projector 8 records behind and MaxLag 4")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-done:
		s.wmu.Unlock()
		t.Fatal("the appends went on while the projector was MaxLag behind")
	default:
	}
	s.wmu.Unlock()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Enqueue still waits after the projector caught up")
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.r.QueryRow("SELECT turn_count FROM threads WHERE id = 't1'").Scan(&n); err != nil || n != 2 {
		t.Fatalf("turns projected: %d, %v; want 2", n, err)
	}

	// Close releases an Enqueue that waits, and nothing acknowledged is
	// lost: the next open catches up from the rollout.
	s.wmu.Lock()
	w.turn("t1", "c", "third")
	done = make(chan struct{})
	go func() {
		defer close(done)
		w.turn("t1", "d", "fourth")
	}()
	for stalls() < 2 {
		time.Sleep(time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	s.wmu.Unlock()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	<-done
	w.store = nil
	s = w.open(path)
	p, err := s.List(context.Background(), ListOptions{})
	if err != nil || len(p.Threads) != 1 || p.Threads[0].Turns != 4 {
		t.Fatalf("after reopen: %+v, %v; want t1 with 4 turns", p.Threads, err)
	}
}
