package rolloutdb_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// tree makes root r with subagent c (open edge), grandchild g (open edge
// from c) and subagent d whose edge is closed, each with a turn and a
// spilled tool result.
func tree(t *testing.T, db *rolloutdb.DB) {
	t.Helper()
	for _, n := range []struct{ id, parent string }{{"r", ""}, {"c", "r"}, {"g", "c"}, {"d", "r"}} {
		src := rollout.Source{}
		if n.parent != "" {
			src = rollout.Source{Kind: rollout.SourceSubagent, Parent: n.parent, Root: "r"}
		}
		th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: n.id, Source: src})
		if err != nil {
			t.Fatal(err)
		}
		tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "work for " + n.id})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tu.Commit(ctx, rolloutdb.Commit{}); err != nil {
			t.Fatal(err)
		}
		if err := th.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := rolloutdb.StateForTest(db).AddGoal(ctx, n.id, "goal of "+n.id); err != nil {
			t.Fatal(err)
		}
	}
	if err := rolloutdb.StateForTest(db).CloseEdge(ctx, "r", "d"); err != nil {
		t.Fatal(err)
	}
}

func locations(t *testing.T, db *rolloutdb.DB) string {
	t.Helper()
	page, err := db.List(ctx, projection.ListOptions{Scope: projection.ScopeAll, Sort: projection.SortCreated})
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, th := range page.Threads {
		parts = append(parts, th.ID+"="+th.Status)
	}
	return strings.Join(parts, " ")
}

func TestArchiveRestoreDeleteATree(t *testing.T) {
	dir := t.TempDir()
	var hooked []string
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{Sync: rollout.SyncNever,
		TerminalHook: func(_ context.Context, id string) error { hooked = append(hooked, id); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tree(t, db)
	arts := artifacts.New(db.DataDir(), artifacts.Options{SpillAbove: 10})
	for _, id := range []string{"r", "g"} {
		if _, err := arts.SpillToolResult(id, "call", []byte(strings.Repeat("output ", 10))); err != nil {
			t.Fatal(err)
		}
	}

	// A subagent follows its root.
	for _, op := range []func(string) error{
		func(id string) error { _, err := db.Archive(ctx, id, "done"); return err },
		func(id string) error { _, err := db.Delete(ctx, id); return err },
	} {
		if err := op("c"); !errors.Is(err, rolloutdb.ErrSubagent) {
			t.Fatalf("operation on a subagent alone: %v", err)
		}
	}

	// A host holds r open with a turn running: archive does not cancel it.
	r, err := db.OpenThread(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	running, err := r.StartTurn(ctx, rolloutdb.TurnOptions{Input: "still running"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := db.Archive(ctx, "r", "done")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rep.Threads) != "[r c d g]" || fmt.Sprint(hooked) != "[r c d g]" {
		t.Fatalf("archived %v, hook asked for %v", rep.Threads, hooked)
	}
	if got := locations(t, db); got != "d=archived g=archived c=archived r=archived" {
		t.Fatalf("after archive: %s", got)
	}
	if _, err := r.StartTurn(ctx, rolloutdb.TurnOptions{}); !errors.Is(err, rolloutdb.ErrThreadArchived) {
		t.Fatalf("new turn on an archived thread: %v", err)
	}
	if _, err := running.Commit(ctx, rolloutdb.Commit{}); err != nil {
		t.Fatalf("the running turn could not commit: %v", err)
	}
	r.Close()
	if _, err := db.OpenThread(ctx, "c"); !errors.Is(err, rolloutdb.ErrThreadArchived) {
		t.Fatalf("open of an archived thread: %v", err)
	}
	info, err := db.ThreadInfo(ctx, "r")
	if err != nil || info.Turns != 2 || info.Status != projection.LocationArchived {
		t.Fatalf("r after archive: %+v %v", info, err)
	}

	// Restore follows open edges only: d's edge is closed.
	rep, err = db.Restore(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rep.Threads) != "[r c g]" {
		t.Fatalf("restored %v", rep.Threads)
	}
	if got := locations(t, db); got != "d=archived g=active c=active r=active" {
		t.Fatalf("after restore: %s", got)
	}
	if _, err := db.Restore(ctx, "r"); !errors.Is(err, rolloutdb.ErrNotArchived) {
		t.Fatalf("restore of an active thread: %v", err)
	}

	// Delete takes the whole tree, closed edges too, with rows, business
	// state and artifacts.
	rep, err = db.Delete(ctx, "r")
	if err != nil || len(rep.Pending) != 0 {
		t.Fatalf("delete: %+v %v", rep, err)
	}
	if fmt.Sprint(rep.Threads) != "[r c d g]" {
		t.Fatalf("deleted %v", rep.Threads)
	}
	if got := locations(t, db); got != "" {
		t.Fatalf("after delete: %s", got)
	}
	for _, id := range []string{"r", "c", "g", "d"} {
		if g, _ := rolloutdb.StateForTest(db).Goals(ctx, id); len(g) != 0 {
			t.Fatalf("goals of %s survived", id)
		}
		if _, err := db.ThreadInfo(ctx, id); !errors.Is(err, projection.ErrNotFound) {
			t.Fatalf("%s still found: %v", id, err)
		}
	}
	for _, sub := range []string{"threads/active", "threads/archived", "tool-results"} {
		names, _ := os.ReadDir(filepath.Join(db.DataDir(), sub))
		if len(names) != 0 {
			t.Fatalf("%s still holds %v", sub, names)
		}
	}
}

// Delete of a tree, one of whose threads another process holds, is refused
// (ErrThreadLocked) before any of the tree is deleted.
// From a review: the leaves before the held thread were deleted for good.
func TestARefusedTreeDeleteDeletesNothing(t *testing.T) {
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

// A file that cannot be removed stays in the cleanup queue and is removed
// by a later run once the cause is gone.
func TestFailedArtifactDeleteIsRetried(t *testing.T) {
	dir := t.TempDir()
	fail := true
	fs := &vfs.FaultFS{FS: vfs.OS, Hook: func(op vfs.Op, name string) error {
		if fail && op == vfs.OpRemove && strings.Contains(name, "tool-results") {
			return errors.New("EIO")
		}
		return nil
	}}
	open := func() *rolloutdb.DB {
		db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{FS: fs, Sync: rollout.SyncNever, StatePath: filepath.Join(dir, "state.db")})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	db := open()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	th.Close()
	res, err := artifacts.New(db.DataDir(), artifacts.Options{SpillAbove: 1}).SpillToolResult("x", "c", []byte("big output"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := db.Delete(ctx, "x")
	if err != nil || len(rep.Pending) != 1 || rep.Pending[0] != "tool-results/x" {
		t.Fatalf("delete with a failing disk: %+v %v", rep, err)
	}
	if _, err := db.ThreadInfo(ctx, "x"); !errors.Is(err, projection.ErrNotFound) {
		t.Fatalf("thread still there: %v", err)
	}
	db.Close()
	fail = false
	db = open() // the queue is retried at open
	defer db.Close()
	if q, _ := rolloutdb.StateForTest(db).PendingCleanup(ctx); len(q) != 0 {
		t.Fatalf("queue after retry: %+v", q)
	}
	if _, err := os.Stat(filepath.Join(db.DataDir(), filepath.FromSlash(res.Ref.Path))); !os.IsNotExist(err) {
		t.Fatalf("artifact survived: %v", err)
	}
}

// The cleanup queue lives in state.db, derived state: an entry naming
// something inside the data directory that is not an artifact (here the
// active threads directory) does not remove the rollouts in it.
// From a review: such an entry was removed wholesale, rollouts included.
func TestCleanupQueueNeverRemovesRollouts(t *testing.T) {
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

func TestForkSpillGCAndRetention(t *testing.T) {
	dir := t.TempDir()
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{Sync: rollout.SyncNever, Artifacts: artifacts.Options{SpillAbove: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "src"})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("a long line of tool output\n", 200)
	for i := range 4 {
		tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: fmt.Sprintf("question %d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tu.Commit(ctx, rolloutdb.Commit{Items: []rollout.Item{
			{Type: rollout.ItemToolResult, CallID: fmt.Sprintf("call-%d", i), Text: big},
			{Type: rollout.ItemAgentMessage, Text: fmt.Sprintf("answer %d", i)},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	th.Close()

	// The large tool output was spilled: the item keeps a preview and a
	// reference that reads back.
	turns, err := db.Turns(ctx, "src", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	res := turns[0].Items[1]
	if res.Ref == nil || len(res.Text) >= len(big) || !strings.Contains(res.Text, "omitted") {
		t.Fatalf("tool result not spilled: ref %+v, %d bytes kept", res.Ref, len(res.Text))
	}
	if b, err := db.Artifacts().Read(artifacts.Ref{Path: res.Ref.Path, Size: res.Ref.Size, SHA256: res.Ref.SHA256}); err != nil || string(b) != big {
		t.Fatalf("spilled output reads back: %v", err)
	}

	// Fork at turn 2: the new thread has the first two turns, and says
	// where it came from.
	fk, err := db.Fork(ctx, "src", rolloutdb.ForkOptions{ID: "fork", AtTurn: 2})
	if err != nil {
		t.Fatal(err)
	}
	fk.Close()
	info, err := db.ThreadInfo(ctx, "fork")
	if err != nil || info.Turns != 2 || info.ForkedFrom != "src" || info.ForkedTurn != turnsID(t, db, "src", 2) {
		t.Fatalf("fork: %+v %v", info, err)
	}
	a, _ := db.Turns(ctx, "src", 1, 2)
	b, _ := db.Turns(ctx, "fork", 1, 2)
	if !reflect.DeepEqual(a[1].Items, b[1].Items) || len(b[1].Items) != 3 {
		t.Fatalf("forked turn 2 differs:\n%+v\n%+v", a[1].Items, b[1].Items)
	}
	if _, err := db.Fork(ctx, "src", rolloutdb.ForkOptions{AtTurn: 9}); err == nil {
		t.Fatal("fork past the last turn")
	}

	// GC: a stray file goes, the referenced ones stay (the fork references
	// the source's outputs too).
	stray := filepath.Join(db.DataDir(), "tool-results", "src", "stray.out")
	if err := os.WriteFile(stray, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	gc, err := db.GC(ctx, rolloutdb.GCOptions{Grace: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(gc.Artifacts.Removed) != 1 || gc.Artifacts.Removed[0].Path != "tool-results/src/stray.out" || len(gc.Artifacts.Kept) != 4 {
		t.Fatalf("gc: %+v", gc.Artifacts)
	}

	// Retention: opt-in, with a dry run; only archived threads go.
	if _, err := db.Archive(ctx, "src", "old"); err != nil {
		t.Fatal(err)
	}
	dry, err := db.Retention(ctx, rolloutdb.RetentionOptions{OlderThan: time.Nanosecond, DryRun: true})
	if err != nil || fmt.Sprint(dry.Threads) != "[src]" {
		t.Fatalf("retention dry run: %+v %v", dry, err)
	}
	if _, err := db.ThreadInfo(ctx, "src"); err != nil {
		t.Fatalf("dry run deleted: %v", err)
	}
	if rep, err := db.Retention(ctx, rolloutdb.RetentionOptions{OlderThan: time.Nanosecond}); err != nil || fmt.Sprint(rep.Threads) != "[src]" {
		t.Fatalf("retention: %+v %v", rep, err)
	}
	if got := locations(t, db); got != "fork=active" {
		t.Fatalf("after retention: %s", got)
	}
}

// Deleting a source thread keeps the files of tool-results/<src>/ that a
// fork (a surviving thread) references.
// From a review: Delete removed tool-results/<src>/ wholesale.
func TestDeleteKeepsArtifactsAForkReferences(t *testing.T) {
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

// A large tool output whose call id is not a plain file name (providers
// use ids like "functions.bash:0") is spilled and committed.
// From a review: the spill refused the name and the whole commit failed.
func TestSpillAcceptsAnUnusualCallID(t *testing.T) {
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

// Fork to the id of an archived thread is refused, as CreateThread
// refuses it: there are never two different rollouts of one id.
// From a review: a second rollout of that id appeared in threads/active.
func TestForkRefusesTheIDOfAnArchivedThread(t *testing.T) {
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

func turnsID(t *testing.T, db *rolloutdb.DB, id string, n int64) string {
	t.Helper()
	turns, err := db.Turns(ctx, id, n, n)
	if err != nil || len(turns) != 1 {
		t.Fatalf("turn %d of %s: %v", n, id, err)
	}
	return turns[0].ID
}

// An archived rollout compressed cold reads the same: listing, paged
// history, search, fork; restore decompresses it first.
func TestColdArchivedRollouts(t *testing.T) {
	dir := t.TempDir()
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{Sync: rollout.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "old"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		tu, _ := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: fmt.Sprintf("question %d about the capybara", i)})
		if _, err := tu.Commit(ctx, rolloutdb.Commit{Items: []rollout.Item{{Type: rollout.ItemAgentMessage, Text: strings.Repeat("an answer ", 50)}}}); err != nil {
			t.Fatal(err)
		}
	}
	th.Close()
	before, _ := db.Turns(ctx, "old", 1, 30)
	if _, err := db.Archive(ctx, "old", ""); err != nil {
		t.Fatal(err)
	}
	plain, _ := os.Stat(filepath.Join(db.DataDir(), "threads/archived/old.rollout"))
	done, err := db.CompressArchived(ctx, rolloutdb.CompressOptions{})
	if err != nil || fmt.Sprint(done) != "[old]" {
		t.Fatalf("compress: %v %v", done, err)
	}
	cold, err := os.Stat(filepath.Join(db.DataDir(), "threads/archived/old.rollout.zst"))
	if err != nil || cold.Size()*4 > plain.Size() {
		t.Fatalf("compressed to %v of %d bytes: %v", cold, plain.Size(), err)
	}
	if _, err := os.Stat(filepath.Join(db.DataDir(), "threads/archived/old.rollout")); !os.IsNotExist(err) {
		t.Fatalf("original kept: %v", err)
	}
	info, err := db.ThreadInfo(ctx, "old")
	if err != nil || info.Status != projection.LocationArchived || info.Turns != 30 || !strings.HasSuffix(info.RolloutPath, ".zst") {
		t.Fatalf("cold thread: %+v %v", info, err)
	}
	if _, err := db.Rebuild(ctx, projection.RebuildOptions{Restart: true}); err != nil {
		t.Fatal(err)
	}
	after, err := db.Turns(ctx, "old", 1, 30)
	if err != nil || !reflect.DeepEqual(before, after) {
		t.Fatalf("paged history from the cold rollout differs: %v", err)
	}
	if hits, err := db.Search(ctx, "capybara", projection.SearchOptions{IncludeArchived: true, Limit: 100}); err != nil || len(hits) != 30 {
		t.Fatalf("search: %d hits, %v", len(hits), err)
	}
	fk, err := db.Fork(ctx, "old", rolloutdb.ForkOptions{ID: "young", AtTurn: 10})
	if err != nil {
		t.Fatal(err)
	}
	fk.Close()
	if _, err := db.Restore(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	restored, err := db.Turns(ctx, "old", 1, 30)
	if err != nil || !reflect.DeepEqual(before, restored) {
		t.Fatalf("restored history differs: %v", err)
	}
	if got := locations(t, db); got != "young=active old=active" {
		t.Fatalf("after restore: %s", got)
	}
}

// CreateThread refuses the id of a compressed (cold) archived thread, as
// it refuses a plain archived one's.
// From a review: it made a second, different rollout of that id.
func TestCreateThreadRefusesTheIDOfAColdArchivedThread(t *testing.T) {
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

// OpenThread of a compressed archived thread says it is archived
// (ErrThreadArchived).
// From a review: it said the thread was missing.
func TestOpenThreadOfAColdArchivedThreadSaysArchived(t *testing.T) {
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

// One unreadable compressed rollout (a torn copy, a bad disk block) in
// threads/archived: the workspace still opens, and reaches and lists the
// other threads.
// From a review: one such file failed the open, or every listing.
func TestACorruptColdRolloutDoesNotBreakListing(t *testing.T) {
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

// A delete whose rename fails changes nothing: the thread stays, and so
// do its artifacts, although they were queued for removal first.
func TestFailedDeleteKeepsTheThreadAndItsArtifacts(t *testing.T) {
	dir := t.TempDir()
	failRename := true // the rename to .deleted- fails
	fs := &vfs.FaultFS{FS: vfs.OS, Hook: func(op vfs.Op, name string) error {
		if failRename && op == vfs.OpRename && strings.Contains(name, "x.rollout.deleted-") {
			return errors.New("EIO")
		}
		return nil
	}}
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{FS: fs, Sync: rollout.SyncNever, StatePath: filepath.Join(dir, "state.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	th.Close()
	res, err := artifacts.New(db.DataDir(), artifacts.Options{SpillAbove: 1}).SpillToolResult("x", "c", []byte("big output"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Delete(ctx, "x"); err == nil {
		t.Fatal("delete with a failing rename succeeded")
	}
	if _, err := db.RunCleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ThreadInfo(ctx, "x"); err != nil {
		t.Fatalf("thread lost: %v", err)
	}
	if _, err := db.Artifacts().Read(*res.Ref); err != nil {
		t.Fatalf("artifact of a live thread removed: %v", err)
	}
	if q, _ := rolloutdb.StateForTest(db).PendingCleanup(ctx); len(q) != 0 {
		t.Fatalf("queue: %+v", q)
	}
}

// A Delete that fails after the rename (here: the directory sync fails)
// is finished by the next Delete after a reopen: the thread is gone, and
// so are its business rows.
// From a review: the business rows stayed, and a second Delete could not find the thread.
func TestDeleteInterruptedAfterItsRenameIsFinishedByTheNext(t *testing.T) {
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

// A thread's artifact directory that is a symbolic link does not lead
// Delete to remove anything outside the data directory.
// From a review: removeAll followed the link and emptied a directory outside.
func TestDeleteDoesNotFollowASymlinkOutOfTheDataDir(t *testing.T) {
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

// GC removes the temporary files a crash left among the rollouts (a
// rollout being created, forked or compressed) once they are older than
// the grace period, and nothing else there.
// From a review: nothing swept them.
func TestGCSweepsTemporaryRolloutFiles(t *testing.T) {
	mem := vfs.NewMemFS()
	var mu sync.Mutex
	now := time.Now().Add(-2 * time.Hour)
	mem.SetClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	db, err := rolloutdb.Open(ctx, "/ws", rolloutdb.Options{FS: mem, Sync: rollout.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	newThreadWithTurn(t, db, "kept")
	old := []string{"/ws/.craft/threads/active/.tmp-a-1", "/ws/.craft/threads/active/b.rollout.tmp-x", "/ws/.craft/threads/archived/c.rollout.zst.tmp-y"}
	for _, p := range old {
		if err := vfs.WriteFileAtomic(mem, p, []byte("left by a crash")); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	now = time.Now()
	mu.Unlock()
	young := "/ws/.craft/threads/active/.tmp-d-2"
	if err := vfs.WriteFileAtomic(mem, young, []byte("being written")); err != nil {
		t.Fatal(err)
	}
	rep, err := db.GC(ctx, rolloutdb.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Temporary) != len(old) {
		t.Fatalf("removed %v, want the 3 old temporary files", rep.Temporary)
	}
	for _, p := range old {
		if _, err := mem.Lstat(p); !vfs.IsNotExist(err) {
			t.Fatalf("%s kept: %v", p, err)
		}
	}
	if _, err := mem.Lstat(young); err != nil {
		t.Fatalf("a young temporary file was removed: %v", err)
	}
	if _, err := db.OpenThread(ctx, "kept"); err != nil {
		t.Fatalf("the thread beside them: %v", err)
	}
}
