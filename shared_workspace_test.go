package rolloutdb_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// A workspace is opened by a host and, beside it, by rolloutctl: what Open
// does to finish a crashed host's work must not undo a live host's work.
// Another process's writer is a second open file description holding the
// BSD lock, which conflicts in this process exactly as across processes.

// holdLock takes a rollout's writer lock as another process would.
func holdLock(t *testing.T, path string) vfs.File {
	t.Helper()
	f, err := vfs.OS.OpenRW(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Lock(); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestOpenLeavesALiveHostsTerminalsRunning(t *testing.T) {
	dir := t.TempDir()
	db := openReview(t, dir, rolloutdb.Options{})
	newThreadWithTurn(t, db, "live")
	newThreadWithTurn(t, db, "gone")
	for _, th := range []string{"live", "gone"} {
		if _, err := db.Artifacts().StartTerminal(th, "term", "make watch"); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	path, _ := rollout.ActivePath(filepath.Join(dir, ".craft"), "live")
	held := holdLock(t, path)
	defer held.Close()

	db = openReview(t, dir, rolloutdb.Options{})
	defer db.Close()
	status := func(th string) string {
		ts, err := db.Artifacts().Terminals(th)
		if err != nil || len(ts) != 1 {
			t.Fatalf("terminals of %s: %+v %v", th, ts, err)
		}
		return ts[0].Status
	}
	if s := status("live"); s != artifacts.TerminalRunning {
		t.Fatalf("the terminal of a thread a live host holds was marked %s", s)
	}
	if s := status("gone"); s != artifacts.TerminalLost {
		t.Fatalf("the terminal of a thread no host holds is %s, want lost", s)
	}
}

// While another process compresses an archived rollout, the plain and the
// compressed copy both exist for a moment; an Open then must not take the
// compressed one for a crash's leftover and remove it (the other process
// is about to remove the plain one).
func TestOpenLeavesAConversionInFlightAlone(t *testing.T) {
	dir := t.TempDir()
	db := openReview(t, dir, rolloutdb.Options{})
	newThreadWithTurn(t, db, "x")
	if _, err := db.Archive(ctx, "x", "done"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	root := filepath.Join(dir, ".craft")
	plain, _ := rollout.ArchivedPath(root, "x")
	cold, _ := rollout.ColdPath(root, "x")
	b, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	z, err := rollout.CompressRollout(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cold, z, 0o644); err != nil {
		t.Fatal(err)
	}
	held := holdLock(t, plain) // the converting process
	db = openReview(t, dir, rolloutdb.Options{})
	db.Close()
	if _, err := os.Stat(cold); err != nil {
		t.Fatalf("Open removed the copy a live conversion made: %v", err)
	}
	held.Close()
	// With no one at work, it is a crash's leftover: the plain one stays.
	db = openReview(t, dir, rolloutdb.Options{})
	defer db.Close()
	if _, err := os.Stat(cold); !os.IsNotExist(err) {
		t.Fatalf("leftover compressed copy kept: %v", err)
	}
	if _, err := db.ThreadInfo(ctx, "x"); err != nil {
		t.Fatal(err)
	}
}

// A delete in another process queues its cleanup before it renames the
// rollout away; an Open in between must not drop the entries as the
// leftovers of a failed delete (the deleted thread's files would stay
// forever).
func TestOpenKeepsAnotherProcesssFreshDeleteQueued(t *testing.T) {
	dir := t.TempDir()
	db := openReview(t, dir, rolloutdb.Options{})
	newThreadWithTurn(t, db, "x")
	// The other process, just before its rename.
	if err := rolloutdb.StateForTest(db).EnqueueCleanup(ctx, "thread x deleted", "threads/active/x.rollout.deleted-1", "tool-results/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RunCleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if q, _ := rolloutdb.StateForTest(db).PendingCleanup(ctx); len(q) != 2 {
		t.Fatalf("a delete in flight lost its queue entries: %+v", q)
	}
	db.Close()
}
