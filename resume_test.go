package rolloutdb_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
)

func TestResumeAfterCrashAndAbortInterrupted(t *testing.T) {
	dir := t.TempDir()
	db, _ := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	th, _ := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "t1"})
	t1, _ := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "first"})
	t1.Commit(ctx, rolloutdb.Commit{Items: []rollout.Item{{Type: rollout.ItemAgentMessage, Text: "one"}}, ModelHistory: [][]byte{[]byte("m1")},
		Checkpoint: &rollout.Checkpoint{ReplacementHistory: [][]byte{[]byte("summary")}}})
	t2, _ := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "second"})
	t2.Add(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: "thinking"})
	// The host dies here: turn 2 has no end record.
	db.Close()

	db, _ = rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	defer db.Close()
	th, st, err := db.Resume(ctx, "t1", rolloutdb.ResumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Turns) != 2 || len(st.Interrupted) != 1 || st.Interrupted[0] != t2.ID() || st.Report.Checkpoint == nil {
		t.Fatalf("resumed: %d turns, interrupted %v, checkpoint %+v", len(st.Turns), st.Interrupted, st.Report.Checkpoint)
	}
	if string(st.ModelHistory[0]) != "summary" {
		t.Fatalf("model history does not start from the checkpoint: %q", st.ModelHistory)
	}
	if err := th.AbortInterrupted(ctx, t2.ID(), "host restarted"); err != nil {
		t.Fatal(err)
	}
	if err := th.AbortInterrupted(ctx, t2.ID(), "again"); err == nil {
		t.Fatal("aborted twice")
	}
	th.Close()
	_, st, err = db.Resume(ctx, "t1", rolloutdb.ResumeOptions{})
	if err != nil || len(st.Interrupted) != 0 || st.Turns[1].Status != rollout.TurnStatusAborted {
		t.Fatalf("after abort: %v %v", err, st.Interrupted)
	}
}

func TestResumeRefusesAnotherWorkspacesThread(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	dba, _ := rolloutdb.Open(ctx, a, rolloutdb.Options{})
	th, _ := dba.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "moved"})
	th.Close()
	dba.Close()
	dbb, _ := rolloutdb.Open(ctx, b, rolloutdb.Options{})
	defer dbb.Close()
	data, _ := os.ReadFile(filepath.Join(a, ".craft/threads/active/moved.rollout"))
	os.WriteFile(filepath.Join(b, ".craft/threads/active/moved.rollout"), data, 0o644)
	if _, _, err := dbb.Resume(ctx, "moved", rolloutdb.ResumeOptions{}); !errors.Is(err, recovery.ErrWorkspaceMismatch) {
		t.Fatalf("thread copied from another workspace: %v", err)
	}
	// Nothing is held after a refused resume.
	if _, _, err := dbb.Resume(ctx, "moved", rolloutdb.ResumeOptions{}); !errors.Is(err, recovery.ErrWorkspaceMismatch) {
		t.Fatalf("second attempt: %v", err)
	}
}

func TestManualCheckpointIsUsedByResume(t *testing.T) {
	dir := t.TempDir()
	db, _ := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	defer db.Close()
	th, _ := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "t1"})
	var last string
	for i := 0; i < 3; i++ {
		tu, _ := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "q"})
		if _, err := tu.Commit(ctx, rolloutdb.Commit{ModelHistory: [][]byte{[]byte("exact")}}); err != nil {
			t.Fatal(err)
		}
		last = tu.ID()
	}
	if _, err := th.WriteCheckpoint(ctx, rollout.Checkpoint{}); err == nil {
		t.Fatal("a checkpoint without a covered turn and history was written")
	}
	if _, err := th.WriteCheckpoint(ctx, rollout.Checkpoint{CoveredTurn: last, ReplacementHistory: [][]byte{[]byte("summary")}}); err != nil {
		t.Fatal(err)
	}
	th.Close()
	_, st, err := db.Resume(ctx, "t1", rolloutdb.ResumeOptions{})
	if err != nil || st.Report.Checkpoint == nil || st.Report.Checkpoint.Trigger != rollout.TriggerManual || len(st.ModelHistory) != 1 || string(st.ModelHistory[0]) != "summary" {
		t.Fatalf("%v %+v %q", err, st.Report.Checkpoint, st.ModelHistory)
	}
}

// With FromCheckpoint, resume reads from the checkpoint state.db knows and
// ends with the same model history as a full pass.
func TestResumeFromProjectedCheckpoint(t *testing.T) {
	dir := t.TempDir()
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{Sync: rollout.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "cp"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "q"})
		if err != nil {
			t.Fatal(err)
		}
		c := rolloutdb.Commit{ModelHistory: [][]byte{[]byte(fmt.Sprintf("turn %d", i))}}
		if i == 20 {
			c.Checkpoint = &rollout.Checkpoint{ReplacementHistory: [][]byte{[]byte("summary of 0-20")}}
		}
		if _, err := tu.Commit(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	th.Close()
	_, full, err := db.Resume(ctx, "cp", rolloutdb.ResumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err = rolloutdb.Open(ctx, dir, rolloutdb.Options{Sync: rollout.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	th2, fast, err := db.Resume(ctx, "cp", rolloutdb.ResumeOptions{FromCheckpoint: true})
	if err != nil {
		t.Fatal(err)
	}
	defer th2.Close()
	if fast.Report.FromOffset == 0 || fast.Report.BytesRead >= full.Report.BytesRead || len(fast.Turns) != 9 {
		t.Fatalf("not read from the checkpoint: from %d, %d bytes (full %d), %d turns", fast.Report.FromOffset, fast.Report.BytesRead, full.Report.BytesRead, len(fast.Turns))
	}
	if !reflect.DeepEqual(fast.ModelHistory, full.ModelHistory) {
		t.Fatalf("model history differs:\n%q\n%q", fast.ModelHistory, full.ModelHistory)
	}
}

// Resume reports a torn tail that opening the thread cut (before the
// replay read the file), and where its bytes were kept.
func TestResumeReportsTheTornTailItCut(t *testing.T) {
	dir := t.TempDir()
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "torn"})
	if err != nil {
		t.Fatal(err)
	}
	turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "q"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := turn.Commit(ctx, rolloutdb.Commit{Items: []rollout.Item{{Type: rollout.ItemAgentMessage, Text: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	path := th.Path()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// A crash in the middle of writing the commit frame.
	if err := os.Truncate(path, res.End-3); err != nil {
		t.Fatal(err)
	}
	db, err = rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	th, st, err := db.Resume(ctx, "torn", rolloutdb.ResumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep := st.Report
	if !rep.TornTail || rep.TornTailOffset != res.Offset || rep.TornSavedTo == "" {
		t.Fatalf("report: torn %v at %d (want %d), saved to %q", rep.TornTail, rep.TornTailOffset, res.Offset, rep.TornSavedTo)
	}
	if st, err := os.Stat(rep.TornSavedTo); err != nil || st.Size() != res.End-3-res.Offset {
		t.Fatalf("the cut bytes: %v, %v", st, err)
	}
	if th.OpenReport().TornTail == nil || len(st.Interrupted) != 1 {
		t.Fatalf("open report %+v, interrupted %v", th.OpenReport(), st.Interrupted)
	}
}
