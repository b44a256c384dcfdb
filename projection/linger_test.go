package projection

import (
	"context"
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
