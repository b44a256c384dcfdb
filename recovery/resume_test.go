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
