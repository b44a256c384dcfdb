package rolloutdb_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

func openReview(t *testing.T, dir string, o rolloutdb.Options) *rolloutdb.DB {
	t.Helper()
	o.Sync = rollout.SyncNever
	db, err := rolloutdb.Open(ctx, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func newThreadWithTurn(t *testing.T, db *rolloutdb.DB, id string, items ...rollout.Item) {
	t.Helper()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "hello " + id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Commit(ctx, rolloutdb.Commit{Items: items}); err != nil {
		t.Fatal(err)
	}
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
}

// Deleting a source thread removes tool-results/<src>/ wholesale, though a
// fork (a surviving thread) references those files.
func TestRegressDeleteRemovesArtifactsAForkReferences(t *testing.T) {
	dir := t.TempDir()
	db := openReview(t, dir, rolloutdb.Options{Artifacts: artifacts.Options{SpillAbove: 100}})
	defer db.Close()
	big := strings.Repeat("tool output line\n", 50)
	newThreadWithTurn(t, db, "src", rollout.Item{Type: rollout.ItemToolResult, CallID: "c1", Text: big})
	fk, err := db.Fork(ctx, "src", rolloutdb.ForkOptions{ID: "fk", AtTurn: 1})
	if err != nil {
		t.Fatal(err)
	}
	fk.Close()
	if _, err := db.Delete(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	turns, err := db.Turns(ctx, "fk", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range turns[0].Items {
		if it.Ref == nil {
			continue
		}
		if _, err := db.Artifacts().Read(artifacts.Ref{Path: it.Ref.Path, Size: it.Ref.Size, SHA256: it.Ref.SHA256}); err != nil {
			t.Fatalf("fork's referenced artifact removed by the source's delete: %v", err)
		}
		return
	}
	t.Fatal("fork has no reference")
}

// A Delete that fails after the rename (here: the directory sync fails)
// leaves the thread gone from listings, but its business rows stay, and
// running Delete again cannot finish it (the thread is not found).
func TestRegressDeleteInterruptedAfterRenameLeavesBusinessRows(t *testing.T) {
	dir := t.TempDir()
	renamed := false
	fs := &vfs.FaultFS{FS: vfs.OS, Hook: func(op vfs.Op, name string) error {
		if op == vfs.OpRename && strings.Contains(name, ".deleted-") {
			renamed = true
			return nil
		}
		if renamed && op == vfs.OpSyncDir {
			renamed = false
			return errors.New("EIO")
		}
		return nil
	}}
	open := func() *rolloutdb.DB {
		return openReview(t, dir, rolloutdb.Options{FS: fs, StatePath: filepath.Join(dir, "state.db")})
	}
	db := open()
	newThreadWithTurn(t, db, "x")
	if _, err := rolloutdb.StateForTest(db).AddGoal(ctx, "x", "goal of x"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Delete(ctx, "x"); err == nil {
		t.Fatal("the fault was not hit")
	}
	db.Close()
	db = open()
	defer db.Close()
	_, err := db.Delete(ctx, "x") // finish it
	if _, ierr := db.ThreadInfo(ctx, "x"); !errors.Is(ierr, projection.ErrNotFound) {
		t.Fatalf("x still there: %v (delete again: %v)", ierr, err)
	}
	if g, _ := rolloutdb.StateForTest(db).Goals(ctx, "x"); len(g) != 0 {
		t.Fatalf("deleted thread x keeps its business rows after reopen and a second delete (%v): %+v", err, g)
	}
}

// The cleanup queue lives in state.db, derived state; an entry naming
// anything inside the data directory (here the active threads directory)
// is removed wholesale, rollouts included.
func TestRegressCleanupQueueRemovesRollouts(t *testing.T) {
	dir := t.TempDir()
	db := openReview(t, dir, rolloutdb.Options{})
	defer db.Close()
	newThreadWithTurn(t, db, "keep")
	if err := rolloutdb.StateForTest(db).EnqueueCleanup(ctx, "tampered", "threads/active"); err != nil {
		t.Fatal(err)
	}
	_, _ = db.RunCleanup(ctx)
	if _, err := os.Stat(filepath.Join(db.DataDir(), "threads/active/keep.rollout")); err != nil {
		t.Fatalf("a cleanup-queue entry removed a live rollout: %v", err)
	}
}

// removeAll follows a symbolic link to a directory: a thread's artifact
// directory that is a link leads Delete to empty a directory outside the
// data directory.
func TestRegressDeleteFollowsSymlinkOutOfDataDir(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	precious := filepath.Join(outside, "precious.txt")
	if err := os.WriteFile(precious, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	db := openReview(t, dir, rolloutdb.Options{})
	defer db.Close()
	newThreadWithTurn(t, db, "x")
	if err := os.MkdirAll(filepath.Join(db.DataDir(), "tool-results"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(db.DataDir(), "tool-results", "x")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Delete(ctx, "x"); err != nil {
		t.Logf("delete: %v", err)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Fatalf("delete removed a file outside the data directory: %v", err)
	}
}

// Fork to the id of an archived thread: a second, different rollout of
// that id appears in threads/active (CreateThread refuses this case).
func TestRegressForkOntoArchivedID(t *testing.T) {
	dir := t.TempDir()
	db := openReview(t, dir, rolloutdb.Options{})
	defer db.Close()
	newThreadWithTurn(t, db, "src")
	newThreadWithTurn(t, db, "old")
	if _, err := db.Archive(ctx, "old", ""); err != nil {
		t.Fatal(err)
	}
	fk, err := db.Fork(ctx, "src", rolloutdb.ForkOptions{ID: "old"})
	if err == nil {
		fk.Close()
		t.Fatalf("fork onto the id of archived thread old was accepted; now: %s", locations(t, db))
	}
}

// CreateThread refuses the id of an archived thread, but not of a
// compressed (cold) archived one: two different rollouts of one id.
func TestRegressCreateThreadOverColdArchivedID(t *testing.T) {
	dir := t.TempDir()
	db := openReview(t, dir, rolloutdb.Options{})
	defer db.Close()
	newThreadWithTurn(t, db, "old")
	if _, err := db.Archive(ctx, "old", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CompressArchived(ctx, rolloutdb.CompressOptions{}); err != nil {
		t.Fatal(err)
	}
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "old"})
	if err == nil {
		th.Close()
		t.Fatalf("a new thread was created over cold archived thread old; now: %s", locations(t, db))
	}
}

// One unreadable compressed rollout (a torn copy, a bad disk block) in
// threads/archived: the workspace should still open and list the other
// threads, with the bad one flagged (as for a plain rollout with a bad
// header), not fail everything.
func TestRegressCorruptColdRolloutBreaksListing(t *testing.T) {
	dir := t.TempDir()
	db := openReview(t, dir, rolloutdb.Options{})
	newThreadWithTurn(t, db, "good")
	root := db.DataDir()
	db.Close()
	if err := os.WriteFile(filepath.Join(root, "threads/archived/bad.rollout.zst"), []byte("not zstd at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{Sync: rollout.SyncNever})
	if err != nil {
		t.Fatalf("open with one corrupt cold rollout: %v", err)
	}
	defer db.Close()
	if _, err := db.ThreadInfo(ctx, "good"); err != nil {
		t.Fatalf("a healthy thread is unreachable because of another thread's corrupt cold rollout: %v", err)
	}
	if _, err := db.List(ctx, projection.ListOptions{Scope: projection.ScopeAll}); err != nil {
		t.Fatalf("listing fails because of one corrupt cold rollout: %v", err)
	}
}

// A large tool output whose call id is not a plain file name (providers
// use ids like "functions.bash:0") cannot be committed at all: the spill
// refuses the name and the whole commit fails.
func TestRegressSpillRefusesCommitForUnusualCallID(t *testing.T) {
	dir := t.TempDir()
	db := openReview(t, dir, rolloutdb.Options{Artifacts: artifacts.Options{SpillAbove: 100}})
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "run it"})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("tool output line\n", 50)
	if _, err := tu.Commit(ctx, rolloutdb.Commit{Items: []rollout.Item{{Type: rollout.ItemToolResult, CallID: "functions.bash:0", Text: big}}}); err != nil {
		t.Fatalf("commit of a turn with a large tool output: %v", err)
	}
}

// Delete of a tree, one of whose threads another process holds: the
// delete is refused (ErrThreadLocked), but only after the leaves before it
// were deleted for good.
func TestRegressRefusedTreeDeleteDeletesPartOfTheTree(t *testing.T) {
	dir := t.TempDir()
	db := openReview(t, dir, rolloutdb.Options{})
	defer db.Close()
	tree(t, db)
	path, _ := rollout.ActivePath(db.DataDir(), "c")
	w, _, err := rollout.Open(ctx, path, "c", rollout.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, err = db.Delete(ctx, "r")
	if !errors.Is(err, rollout.ErrThreadLocked) {
		t.Fatalf("delete of a tree with a locked thread: %v", err)
	}
	if got := locations(t, db); !strings.Contains(got, "g=active") || !strings.Contains(got, "d=active") {
		t.Fatalf("a refused delete deleted part of the tree: %s", got)
	}
}

// OpenThread of a compressed archived thread says it is missing rather
// than archived.
func TestRegressOpenColdThreadIsNotReportedArchived(t *testing.T) {
	dir := t.TempDir()
	db := openReview(t, dir, rolloutdb.Options{})
	defer db.Close()
	newThreadWithTurn(t, db, "old")
	if _, err := db.Archive(ctx, "old", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CompressArchived(ctx, rolloutdb.CompressOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.OpenThread(ctx, "old"); !errors.Is(err, rolloutdb.ErrThreadArchived) {
		t.Fatalf("open of a cold archived thread: %v", err)
	}
}
