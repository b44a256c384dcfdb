package rolloutdb_test

import (
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
)

// A rollback is refused, and writes nothing, while a turn is open, for
// fewer than one turn, past the first turn, and on a thread archived while
// open; an update naming nothing is refused too.
func TestRollbackAndUpdateRefusals(t *testing.T) {
	db, err := rolloutdb.Open(ctx, t.TempDir(), rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := th.Rollback(ctx, 1); !errors.Is(err, rolloutdb.ErrRollbackTooFar) {
		t.Fatalf("a rollback of a thread with no turns: %v", err)
	}
	turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := th.Rollback(ctx, 1); !errors.Is(err, rolloutdb.ErrTurnInProgress) {
		t.Fatalf("a rollback with a turn open: %v", err)
	}
	if _, err := turn.Commit(ctx, rolloutdb.Commit{}); err != nil {
		t.Fatal(err)
	}
	seq := th.LastSeq()
	for _, n := range []int{0, -1, 2} {
		if _, err := th.Rollback(ctx, n); err == nil {
			t.Fatalf("a rollback of %d of 1 turn was written", n)
		}
	}
	if _, err := th.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{}); !errors.Is(err, rolloutdb.ErrEmptyUpdate) {
		t.Fatalf("an empty update: %v", err)
	}
	if _, err := th.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{AddLabels: []string{""}}); err == nil {
		t.Fatal("an empty label was written")
	}
	if th.LastSeq() != seq {
		t.Fatalf("refused calls wrote records: seq %d, was %d", th.LastSeq(), seq)
	}
	if _, err := db.Archive(ctx, "r", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := th.Rollback(ctx, 1); !errors.Is(err, rolloutdb.ErrThreadArchived) {
		t.Fatalf("a rollback of an archived thread: %v", err)
	}
	// Renaming an archived thread is allowed; List shows it.
	name := "old"
	if _, err := th.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{Name: &name}); err != nil {
		t.Fatal(err)
	}
	info, err := db.ThreadInfo(ctx, "r")
	if err != nil || info.Name != "old" || info.Status != "archived" || info.Turns != 1 {
		t.Fatalf("archived thread after a rename: %+v, %v", info, err)
	}
}
