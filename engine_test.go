package rolloutdb_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The lifecycle asks nothing of the log but the Log interface: with a log
// that has nothing more, archive, restore, fork, resume, delete, retention
// and GC work, and CompressArchived, the local log's own, says
// errors.ErrUnsupported and changes nothing.
func TestTheLifecycleNeedsOnlyTheLogInterface(t *testing.T) {
	db := openReview(t, t.TempDir(), rolloutdb.Options{})
	defer db.Close()
	rolloutdb.BareLogForTest(db)
	tree(t, db)
	newThreadWithTurn(t, db, "x")
	if _, err := db.Archive(ctx, "r", "done"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CompressArchived(ctx, rolloutdb.CompressOptions{}); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("compress through a log that does not compress: %v", err)
	}
	if _, err := db.OpenThread(ctx, "r"); !errors.Is(err, rolloutdb.ErrThreadArchived) {
		t.Fatalf("open of an archived thread: %v", err)
	}
	if _, err := db.Restore(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if got := locations(t, db); got != "x=active d=archived g=active c=active r=active" {
		t.Fatalf("after archive and restore: %s", got)
	}
	fk, err := db.Fork(ctx, "x", rolloutdb.ForkOptions{ID: "y"})
	if err != nil {
		t.Fatal(err)
	}
	fk.Close()
	if _, err := db.Fork(ctx, "x", rolloutdb.ForkOptions{ID: "d"}); !errors.Is(err, rollout.ErrThreadExists) {
		t.Fatalf("fork onto an archived thread's id: %v", err)
	}
	th, st, err := db.Resume(ctx, "y", rolloutdb.ResumeOptions{})
	if err != nil || len(st.Turns) != 1 {
		t.Fatalf("resume of the fork: %v %+v", err, st)
	}
	th.Close()
	if _, err := db.Delete(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ThreadInfo(ctx, "g"); !errors.Is(err, projection.ErrNotFound) {
		t.Fatalf("a deleted subagent: %v", err)
	}
	if ids, err := db.ListThreadIDs(ctx); err != nil || !slices.Equal(ids, []string{"x", "y"}) {
		t.Fatalf("threads left: %v %v", ids, err)
	}
	rep, err := db.GC(ctx, rolloutdb.GCOptions{})
	if err != nil || len(rep.Pending) != 0 || len(rep.Temporary) != 0 {
		t.Fatalf("gc: %+v %v", rep, err)
	}
}
