package recovery

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

func TestIdentityChecks(t *testing.T) {
	b := newBuilder(t, fxThread)
	b.turn(nil, false)
	data := b.bytes()
	r := bytes.NewReader(data)
	if _, err := Resume(ctx, r, int64(len(data)), Options{ThreadID: "someone-else"}); !errors.Is(err, ErrThreadMismatch) {
		t.Fatalf("other thread requested: %v", err)
	}
	if _, err := Resume(ctx, r, int64(len(data)), Options{ThreadID: fxThread, WorkspaceID: "ws-other"}); !errors.Is(err, ErrWorkspaceMismatch) {
		t.Fatalf("other workspace: %v", err)
	}
	// A header whose thread id disagrees with the file header.
	o := newBuilder(t, "other")
	o.turn(nil, false)
	odata := o.bytes()
	mixed := append(append([]byte(nil), data[:rollout.FileHeaderSize]...), odata[rollout.FileHeaderSize:]...)
	if _, err := Resume(ctx, bytes.NewReader(mixed), int64(len(mixed)), Options{ThreadID: fxThread}); !errors.Is(err, ErrNoHeader) && !errors.Is(err, ErrThreadMismatch) {
		t.Fatalf("frames of another file: %v", err)
	}
	// A second header with the same identity is a harmless duplicate.
	b = newBuilder(t, fxThread)
	b.turn(nil, false)
	b.frame("dup", b.rec(rollout.KindThreadOpened, "", rollout.ThreadOpened{ThreadID: fxThread, WorkspaceID: fxWorkspace, Source: rollout.Source{Kind: rollout.SourceUser}}))
	data = b.bytes()
	st, err := Resume(ctx, bytes.NewReader(data), int64(len(data)), Options{ThreadID: fxThread})
	if err != nil || len(st.Report.Skipped) != 1 || st.Report.Skipped[0].Reason != ReasonDuplicateHeader {
		t.Fatalf("duplicate header: %v %+v", err, st)
	}
	// A second header with another source is a conflict.
	b = newBuilder(t, fxThread)
	b.frame("dup", b.rec(rollout.KindThreadOpened, "", rollout.ThreadOpened{ThreadID: fxThread, WorkspaceID: fxWorkspace, Source: rollout.Source{Kind: rollout.SourceSubagent, Parent: "p"}}))
	data = b.bytes()
	if _, err := Resume(ctx, bytes.NewReader(data), int64(len(data)), Options{ThreadID: fxThread}); !errors.Is(err, ErrIdentityConflict) {
		t.Fatalf("second header, other source: %v", err)
	}
}

// From a checkpoint's offset, resume reads only what follows it and gives
// the same model history as a full pass; when the checkpoint is not usable
// from there (a later rollback goes past it), it falls back to a full pass.
func TestResumeFromCheckpointOffset(t *testing.T) {
	b := newBuilder(t, fxThread)
	for i := 1; i <= 40; i++ {
		var cp *rollout.Checkpoint
		if i == 30 {
			cp = &rollout.Checkpoint{ID: "cp30"}
		}
		b.turn(cp, false)
	}
	data := b.bytes()
	full, err := Resume(ctx, bytes.NewReader(data), int64(len(data)), Options{ThreadID: fxThread})
	if err != nil {
		t.Fatal(err)
	}
	cp := full.Report.Checkpoint
	if cp == nil || cp.CoveredTurn != "u30" {
		t.Fatalf("checkpoint %+v", cp)
	}
	fast, err := Resume(ctx, bytes.NewReader(data), int64(len(data)), Options{ThreadID: fxThread, CheckpointOffset: cp.Offset})
	if err != nil {
		t.Fatal(err)
	}
	if fast.Report.FromOffset != cp.Offset || fast.Report.Checkpoint == nil || fast.Report.Checkpoint.ID != "cp30" {
		t.Fatalf("fast resume report %+v", fast.Report)
	}
	after := int64(len(data)) - cp.Offset
	if fast.Report.BytesRead > 2*after+8192 || fast.Report.BytesRead >= full.Report.BytesRead/2 {
		t.Fatalf("read %d bytes from the checkpoint (%d after it, %d in all)", fast.Report.BytesRead, after, full.Report.BytesRead)
	}
	if fmt.Sprint(fast.ModelHistory) != fmt.Sprint(full.ModelHistory) || len(fast.Turns) != 10 || fast.Turns[0].ID != "u31" || fast.LastSeq != full.LastSeq {
		t.Fatalf("fast resume differs: %d turns, first %s", len(fast.Turns), fast.Turns[0].ID)
	}

	// A rollback past the checkpoint makes it unusable: full pass.
	b = newBuilder(t, fxThread)
	for i := 1; i <= 6; i++ {
		var cp *rollout.Checkpoint
		if i == 3 || i == 5 {
			cp = &rollout.Checkpoint{ID: fmt.Sprint("cp", i)}
		}
		b.turn(cp, false)
	}
	b.frame("rollback", b.rec(rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: 3}))
	data = b.bytes()
	full, _ = Resume(ctx, bytes.NewReader(data), int64(len(data)), Options{ThreadID: fxThread})
	st, err := Resume(ctx, bytes.NewReader(data), int64(len(data)), Options{ThreadID: fxThread, CheckpointOffset: b.frames["u5/commit"].off})
	if err != nil || st.Report.FromOffset != 0 || st.Report.Checkpoint == nil || st.Report.Checkpoint.CoveredTurn != "u3" || len(st.Turns) != 3 {
		t.Fatalf("fallback: %v %+v", err, st.Report)
	}
	if fmt.Sprint(st.ModelHistory) != fmt.Sprint(full.ModelHistory) {
		t.Fatal("fallback differs from a full resume")
	}
}

// compareModes fails when resuming data from off (CheckpointOffset) gives
// another model history, interrupted turn or last seq than a full pass.
func compareModes(t *testing.T, data []byte, off int64) {
	t.Helper()
	full, fast := resumeBytes(t, data, 0), resumeBytes(t, data, off)
	t.Logf("full: from=%d %s", full.Report.FromOffset, summary(full))
	t.Logf("fast: from=%d %s", fast.Report.FromOffset, summary(fast))
	if fmt.Sprint(full.ModelHistory) != fmt.Sprint(fast.ModelHistory) ||
		fmt.Sprint(full.Interrupted) != fmt.Sprint(fast.Interrupted) || full.LastSeq != fast.LastSeq {
		t.Fatalf("CheckpointOffset mode (from %d) differs from full pass:\n full: history %q interrupted %v last %d\n fast: history %q interrupted %v last %d",
			fast.Report.FromOffset, full.ModelHistory, full.Interrupted, full.LastSeq, fast.ModelHistory, fast.Interrupted, fast.LastSeq)
	}
}

// From the offset of a checkpoint frame (named "cp") that a full pass
// treats specially, resume gives what a full pass gives: it trusts the
// checkpoint only where the full pass would, and falls back otherwise.
// An identity conflict before the checkpoint frame goes unseen from an
// offset, and is no row: that is documented on Options.CheckpointOffset
// (the offset comes from a projection that replayed the prefix); a full
// pass refuses it. (From a review, case 1d.)
func TestCheckpointOffsetResumeEqualsAFullPass(t *testing.T) {
	for _, c := range []struct {
		name   string
		build  func(b *builder)
		damage func(b *builder, data []byte) // nil: none
	}{
		// A mid-turn checkpoint (its own frame) while u3 is open, covering
		// the last completed turn u2. u3 straddles the checkpoint frame:
		// from the offset only u3's records after the checkpoint are seen
		// (and nothing at all if the crash came right after it).
		// From a review, case 1a.
		{"mid-turn checkpoint straddled by the open turn", func(b *builder) {
			b.turn(nil, false)
			b.turn(nil, false)
			b.frame("u3/start", b.rec(rollout.KindTurnStarted, "u3", rollout.TurnStarted{}), b.item("u3", rollout.ItemUserMessage, ""))
			b.frame("cp", b.rec(rollout.KindCheckpoint, "u3", rollout.Checkpoint{ID: "mid", CoveredTurn: "u2", Trigger: rollout.TriggerMidTurn,
				ReplacementHistory: [][]byte{[]byte(`{"summary through":"u2"}`)}}))
			// crash: u3 never ends
		}, nil},
		// A mid-turn checkpoint covering the open turn itself, then a
		// crash: both passes report u2 interrupted.
		// From a review, case 1b: the offset pass dropped u2.
		{"mid-turn checkpoint covering the open turn", func(b *builder) {
			b.turn(nil, false)
			b.frame("u2/start", b.rec(rollout.KindTurnStarted, "u2", rollout.TurnStarted{}), b.item("u2", rollout.ItemUserMessage, ""))
			b.frame("cp", b.rec(rollout.KindCheckpoint, "u2", rollout.Checkpoint{ID: "mid", CoveredTurn: "u2", Trigger: rollout.TriggerMidTurn,
				ReplacementHistory: [][]byte{[]byte(`{"summary through":"u2"}`)}}))
			b.frame("u2/more", b.item("u2", rollout.ItemAgentMessage, ""))
		}, nil},
		// The covered turn's records were all lost to mid-file damage: a
		// full pass passes the checkpoint over (its covered turn does not
		// survive), and so does the offset pass.
		// From a review, case 1c: the offset pass assumed the unseen turn survived.
		{"covered turn lost to damage", func(b *builder) {
			b.turn(nil, false)
			b.turn(nil, false)
			b.turn(nil, false)
			b.frame("cp", b.rec(rollout.KindCheckpoint, "", rollout.Checkpoint{ID: "man", CoveredTurn: "u3", Trigger: rollout.TriggerManual,
				ReplacementHistory: [][]byte{[]byte(`{"summary through":"u3"}`)}}))
			b.turn(nil, false)
		}, func(b *builder, data []byte) {
			clear(data[b.frames["u3/start"].off:b.frames["u3/commit"].end])
		}},
		// A post-turn checkpoint in a frame of its own, covering a turn
		// that never completed: a full pass passes it over; from its
		// offset the covered turn is unseen, so the offset pass must fall
		// back rather than trust it.
		{"post-turn checkpoint of an unfinished turn", func(b *builder) {
			b.turn(nil, false)
			b.frame("u2/start", b.rec(rollout.KindTurnStarted, "u2", rollout.TurnStarted{}))
			b.frame("cp", b.rec(rollout.KindCheckpoint, "", rollout.Checkpoint{ID: "early", CoveredTurn: "u2", Trigger: rollout.TriggerPostTurn,
				ReplacementHistory: [][]byte{[]byte(`{"summary through":"u2"}`)}}))
			b.turns = 2
			b.turn(nil, false)
		}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder(t, fxThread)
			c.build(b)
			data := b.bytes()
			if c.damage != nil {
				c.damage(b, data)
			}
			compareModes(t, data, b.frames["cp"].off)
		})
	}
}

func TestInterruptedAndItemVersions(t *testing.T) {
	b := newBuilder(t, fxThread)
	b.turn(nil, false)
	b.frame("u2/start", b.rec(rollout.KindTurnStarted, "u2", rollout.TurnStarted{}))
	b.frame("u2/progress", b.rec(rollout.KindItemAppended, "u2", rollout.Item{ID: "m", Type: rollout.ItemAgentMessage, Status: rollout.ItemInProgress, Text: "draft"}))
	b.frame("u2/final", b.rec(rollout.KindItemAppended, "u2", rollout.Item{ID: "m", Type: rollout.ItemAgentMessage, Status: rollout.ItemCompleted, Text: "final"}))
	data := b.bytes()
	st, err := Resume(ctx, bytes.NewReader(data), int64(len(data)), Options{ThreadID: fxThread})
	if err != nil {
		t.Fatal(err)
	}
	u2 := st.Turns[1]
	if len(st.Interrupted) != 1 || st.Interrupted[0] != "u2" || u2.Status != rollout.TurnStatusOpen {
		t.Fatalf("interrupted: %v %s", st.Interrupted, u2.Status)
	}
	if len(u2.Items) != 1 || u2.Items[0].Text != "final" || u2.HistorySource != HistoryItems {
		t.Fatalf("item versions: %+v", u2.Items)
	}
}

func TestDefaultHistoryPairsToolCalls(t *testing.T) {
	items := []rollout.Item{
		{Type: rollout.ItemUserMessage, Status: rollout.ItemCompleted, Text: "hi"},
		{Type: rollout.ItemReasoning, Status: rollout.ItemCompleted, Text: "thinking"},
		{Type: rollout.ItemToolCall, Status: rollout.ItemCompleted, CallID: "a", Name: "ls"},
		{Type: rollout.ItemToolCall, Status: rollout.ItemCompleted, CallID: "b", Name: "cat"}, // no result: left out
		{Type: rollout.ItemToolResult, Status: rollout.ItemCompleted, CallID: "a", Text: "x.go"},
		{Type: rollout.ItemAgentMessage, Status: rollout.ItemInProgress, Text: "dra"}, // not completed
		{Type: rollout.ItemAgentMessage, Status: rollout.ItemCompleted, Text: "done"},
	}
	got := DefaultHistory("t", items)
	want := []string{
		`{"role":"user","content":"hi"}`,
		`{"role":"assistant","tool_calls":[{"id":"a","name":"ls","arguments":""}]}`,
		`{"role":"tool","content":"x.go","tool_call_id":"a"}`,
		`{"role":"assistant","content":"done"}`,
	}
	if len(got) != len(want) {
		t.Fatalf("%d messages: %s", len(got), got)
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("message %d: %s, want %s", i, got[i], want[i])
		}
	}
}

// A turn id reused after a rollback is a new turn: the checkpoint that
// covered the rolled-back u2 is not applied to the new u2.
// From a review, case 2a.
func TestCheckpointOfARolledBackTurnIsNotUsedForItsReusedID(t *testing.T) {
	b := newBuilder(t, fxThread)
	b.turn(nil, false)                            // u1
	b.turn(&rollout.Checkpoint{ID: "old"}, false) // u2 with post-turn checkpoint
	b.frame("rollback", b.rec(rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: 1}))
	b.turns = 1
	b.turn(nil, false) // a new u2
	data := b.bytes()
	st := resumeBytes(t, data, 0)
	t.Logf("%s", summary(st))
	want := `[{"exact":"u1"} {"exact":"u2"}]`
	if got := fmt.Sprintf("%s", st.ModelHistory); got != want {
		t.Fatalf("model history %s, want %s (checkpoint used: %+v)", got, want, st.Report.Checkpoint)
	}
}

// The open turn rolled back, then aborted by the host (through
// AbortInterrupted, say): it stays rolled back.
// From a review, case 2b: the rolled-back turn came back as visible.
func TestAbortOfARolledBackOpenTurnDoesNotBringItBack(t *testing.T) {
	b := newBuilder(t, fxThread)
	b.turn(nil, false)
	b.frame("u2/start", b.rec(rollout.KindTurnStarted, "u2", rollout.TurnStarted{}), b.item("u2", rollout.ItemUserMessage, ""))
	b.frame("rollback", b.rec(rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: 1}))
	b.frame("abort", b.rec(rollout.KindTurnAborted, "u2", rollout.TurnAborted{Reason: "rolled back"}))
	data := b.bytes()
	st := resumeBytes(t, data, 0)
	t.Logf("%s", summary(st))
	if len(st.Turns) != 1 {
		t.Fatalf("rolled-back turn u2 is visible again: %s", summary(st))
	}
}

// u2's start frame lost to damage; u2's first surviving record is an
// exact-history record whose body does not decode; its commit carries more
// exact history. A turn with a rejected exact-history record resumes with
// rebuilt history, even when the record came before the turn was seen.
// From a review, case 3: tieTurn dropped the rejection (no u2 seen yet).
func TestRejectedHistoryOfATurnNotYetSeenRebuildsItsHistory(t *testing.T) {
	b := newBuilder(t, fxThread)
	b.turn(nil, false)
	b.frame("u2/start", b.rec(rollout.KindTurnStarted, "u2", rollout.TurnStarted{}), b.item("u2", rollout.ItemUserMessage, ""))
	b.frame("u2/hist1", rollout.Record{Kind: rollout.KindModelHistoryAppended, Turn: "u2", Body: []byte{0xc1}})
	b.frame("u2/commit", b.item("u2", rollout.ItemAgentMessage, ""),
		b.rec(rollout.KindModelHistoryAppended, "u2", rollout.ModelHistory{Messages: [][]byte{[]byte(`{"exact":"u2 part 2"}`)}}),
		b.rec(rollout.KindTurnCompleted, "u2", rollout.TurnCompleted{}))
	b.turns = 2
	b.turn(nil, false)
	data := b.bytes()
	f := b.frames["u2/start"]
	clear(data[f.off:f.end])
	st := resumeBytes(t, data, 0)
	t.Logf("%s", summary(st))
	for _, tu := range st.Turns {
		if tu.ID == "u2" && tu.HistorySource != HistoryRebuilt {
			t.Fatalf("u2 had an exact-history record rejected but resumes with %s history %q", tu.HistorySource, tu.History)
		}
	}
}

// FuzzResume: any bytes as a rollout. Resume must not panic or hang, and
// either fails with an identity error or returns a consistent state, the
// same whether or not its reading is pipelined.
func FuzzResume(f *testing.F) {
	paths, _ := globFixtures()
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// The same both ways: records applied on one goroutine, and
		// read ahead on a second.
		st, err := resumeBothWays(t, b, Options{ThreadID: fxThread})
		if cerr := CheckIdentity(ctx, bytes.NewReader(b), int64(len(b)), Options{ThreadID: fxThread}); fmt.Sprint(cerr) != fmt.Sprint(err) {
			t.Fatalf("CheckIdentity says %v, Resume %v", cerr, err)
		}
		if err != nil {
			return
		}
		checkLocated(t, b, Options{ThreadID: fxThread}, st)
		seen := map[string]bool{}
		for _, tu := range st.Turns {
			if seen[tu.ID] {
				t.Fatalf("turn %s twice", tu.ID)
			}
			seen[tu.ID] = true
		}
		for _, id := range st.Report.RebuiltTurns {
			if !seen[id] {
				t.Fatalf("rebuilt turn %s not visible", id)
			}
		}
	})
}
