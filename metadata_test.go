package rolloutdb_test

import (
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/rollout"
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

// The ids the library makes reach the host: the input message's, an added
// item's, a commit's items' and checkpoint's; and Add, Commit and Cancel
// each say which seqs they wrote. Resume sees the same ids at those seqs.
func TestWritesReturnTheIDsTheyMade(t *testing.T) {
	db, err := rolloutdb.Open(ctx, t.TempDir(), rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "ids"})
	if err != nil {
		t.Fatal(err)
	}
	turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "q"})
	if err != nil {
		t.Fatal(err)
	}
	added, err := turn.Add(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: "think"})
	if err != nil || added.ID == "" || added.FirstSeq != 4 || added.LastSeq != 4 {
		t.Fatalf("Add: %+v, %v (want an id at seq 4)", added, err)
	}
	c := rolloutdb.Commit{Items: []rollout.Item{{Type: rollout.ItemAgentMessage, Text: "a"}}, Checkpoint: &rollout.Checkpoint{ReplacementHistory: [][]byte{[]byte("s")}}}
	res, err := turn.Commit(ctx, c)
	if err != nil || c.Items[0].ID == "" || c.Checkpoint.ID == "" || res.FirstSeq != 5 {
		t.Fatalf("Commit: %+v, items %+v, checkpoint %q, %v", res, c.Items, c.Checkpoint.ID, err)
	}
	second, err := th.StartTurn(ctx, rolloutdb.TurnOptions{})
	if err != nil || second.InputID() != "" {
		t.Fatalf("a turn without input: %q, %v", second.InputID(), err)
	}
	cancelled, err := second.Cancel(ctx, "stop")
	if err != nil || cancelled.LastSeq != th.LastSeq() {
		t.Fatalf("Cancel: %+v, %v; last seq %d", cancelled, err, th.LastSeq())
	}
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
	_, st, err := db.Resume(ctx, "ids", rolloutdb.ResumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	items := st.Turns[0].Items
	if len(items) != 3 || items[0].ID != turn.InputID() || items[1].ID != added.ID || items[2].ID != c.Items[0].ID {
		t.Fatalf("resumed items %+v; input %q, added %q, committed %q", items, turn.InputID(), added.ID, c.Items[0].ID)
	}
	if st.Report.Checkpoint == nil || st.Report.Checkpoint.ID != c.Checkpoint.ID || st.Turns[1].Status != rollout.TurnStatusAborted {
		t.Fatalf("checkpoint %+v (want %q), second turn %s", st.Report.Checkpoint, c.Checkpoint.ID, st.Turns[1].Status)
	}
}
