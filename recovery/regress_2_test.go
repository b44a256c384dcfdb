package recovery

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
)

func rv(t *testing.T, data []byte, off int64) *State {
	t.Helper()
	st, err := Resume(ctx, bytes.NewReader(data), int64(len(data)), Options{ThreadID: fxThread, CheckpointOffset: off})
	if err != nil {
		t.Fatalf("resume (offset %d): %v", off, err)
	}
	return st
}

func compareModes(t *testing.T, data []byte, off int64) {
	t.Helper()
	full, fast := rv(t, data, 0), rv(t, data, off)
	t.Logf("full: from=%d %s", full.Report.FromOffset, summary(full))
	t.Logf("fast: from=%d %s", fast.Report.FromOffset, summary(fast))
	if fmt.Sprint(full.ModelHistory) != fmt.Sprint(fast.ModelHistory) ||
		fmt.Sprint(full.Interrupted) != fmt.Sprint(fast.Interrupted) || full.LastSeq != fast.LastSeq {
		t.Fatalf("CheckpointOffset mode (from %d) differs from full pass:\n full: history %q interrupted %v last %d\n fast: history %q interrupted %v last %d",
			fast.Report.FromOffset, full.ModelHistory, full.Interrupted, full.LastSeq, fast.ModelHistory, fast.Interrupted, fast.LastSeq)
	}
}

// (1a) A mid-turn checkpoint (its own frame) while u3 is open, covering the
// last completed turn u2. u3 straddles the checkpoint frame: the fast pass sees
// only u3's records after the checkpoint (and nothing at all if the crash came
// right after it).
func TestReview_MidTurnCheckpointStraddlingTurn(t *testing.T) {
	b := newBuilder(t, fxThread)
	b.turn(nil, false)
	b.turn(nil, false)
	b.frame("u3/start", b.rec(rollout.KindTurnStarted, "u3", rollout.TurnStarted{}), b.item("u3", rollout.ItemUserMessage, ""))
	b.frame("cp", b.rec(rollout.KindCheckpoint, "u3", rollout.Checkpoint{ID: "mid", CoveredTurn: "u2", Trigger: rollout.TriggerMidTurn,
		ReplacementHistory: [][]byte{[]byte(`{"summary through":"u2"}`)}}))
	// crash: u3 never ends
	data := b.bytes()
	compareModes(t, data, b.frames["cp"].off)
}

// (1b) Mid-turn checkpoint covering the open turn itself, then a crash:
// full pass reports u3 interrupted, the fast pass drops it.
func TestReview_MidTurnCheckpointCoveringOpenTurn(t *testing.T) {
	b := newBuilder(t, fxThread)
	b.turn(nil, false)
	b.frame("u2/start", b.rec(rollout.KindTurnStarted, "u2", rollout.TurnStarted{}), b.item("u2", rollout.ItemUserMessage, ""))
	b.frame("cp", b.rec(rollout.KindCheckpoint, "u2", rollout.Checkpoint{ID: "mid", CoveredTurn: "u2", Trigger: rollout.TriggerMidTurn,
		ReplacementHistory: [][]byte{[]byte(`{"summary through":"u2"}`)}}))
	b.frame("u2/more", b.item("u2", rollout.ItemAgentMessage, ""))
	data := b.bytes()
	compareModes(t, data, b.frames["cp"].off)
}

// (1c) The covered turn's records were all lost to mid-file damage: a full
// pass passes the checkpoint over (covered turn does not survive); the fast
// pass assumes an unseen covered turn survives and uses it.
func TestReview_CheckpointCoveredTurnLost(t *testing.T) {
	b := newBuilder(t, fxThread)
	b.turn(nil, false)
	b.turn(nil, false)
	b.turn(nil, false)
	b.frame("cp", b.rec(rollout.KindCheckpoint, "", rollout.Checkpoint{ID: "man", CoveredTurn: "u3", Trigger: rollout.TriggerManual,
		ReplacementHistory: [][]byte{[]byte(`{"summary through":"u3"}`)}}))
	b.turn(nil, false)
	data := b.bytes()
	clear(data[b.frames["u3/start"].off:b.frames["u3/commit"].end])
	compareModes(t, data, b.frames["cp"].off)
}

// (1d) An identity conflict before the checkpoint frame goes unseen from an
// offset: documented on Options.CheckpointOffset (the offset comes from a
// projection that replayed the prefix); a full pass refuses it.

// (2a) Turn id reused after a rollback: the checkpoint covering the
// rolled-back u2 is applied to the new u2.
func TestReview_TurnIDReusedAfterRollback(t *testing.T) {
	b := newBuilder(t, fxThread)
	b.turn(nil, false)                            // u1
	b.turn(&rollout.Checkpoint{ID: "old"}, false) // u2 with post-turn checkpoint
	b.frame("rollback", b.rec(rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: 1}))
	b.turns = 1
	b.turn(nil, false) // a new u2
	data := b.bytes()
	st := rv(t, data, 0)
	t.Logf("%s", summary(st))
	want := `[{"exact":"u1"} {"exact":"u2"}]`
	if got := fmt.Sprintf("%s", st.ModelHistory); got != want {
		t.Fatalf("model history %s, want %s (checkpoint used: %+v)", got, want, st.Report.Checkpoint)
	}
}

// (2b) Rollback of the open turn, then the host aborts it (e.g. through
// AbortInterrupted): the rolled-back turn comes back as visible.
func TestReview_RolledBackOpenTurnResurrected(t *testing.T) {
	b := newBuilder(t, fxThread)
	b.turn(nil, false)
	b.frame("u2/start", b.rec(rollout.KindTurnStarted, "u2", rollout.TurnStarted{}), b.item("u2", rollout.ItemUserMessage, ""))
	b.frame("rollback", b.rec(rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: 1}))
	b.frame("abort", b.rec(rollout.KindTurnAborted, "u2", rollout.TurnAborted{Reason: "rolled back"}))
	data := b.bytes()
	st := rv(t, data, 0)
	t.Logf("%s", summary(st))
	if len(st.Turns) != 1 {
		t.Fatalf("rolled-back turn u2 is visible again: %s", summary(st))
	}
}

// A post-turn checkpoint in a frame of its own, covering a turn that never
// completed: a full pass passes it over; from its offset the covered turn
// is unseen, so the offset pass must fall back rather than trust it.
func TestPostTurnCheckpointOwnFrameFallsBack(t *testing.T) {
	b := newBuilder(t, fxThread)
	b.turn(nil, false)
	b.frame("u2/start", b.rec(rollout.KindTurnStarted, "u2", rollout.TurnStarted{}))
	b.frame("cp", b.rec(rollout.KindCheckpoint, "", rollout.Checkpoint{ID: "early", CoveredTurn: "u2", Trigger: rollout.TriggerPostTurn,
		ReplacementHistory: [][]byte{[]byte(`{"summary through":"u2"}`)}}))
	b.turns = 2
	b.turn(nil, false)
	data := b.bytes()
	compareModes(t, data, b.frames["cp"].off)
}
