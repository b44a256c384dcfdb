package compaction

import (
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
)

func TestPolicy(t *testing.T) {
	p := Policy{ContextWindow: 100_000, EveryTurns: 50}
	cases := []struct {
		tokens int64
		turns  int
		due    bool
		why    Reason
	}{
		{10_000, 3, false, ""},
		{79_999, 49, false, ""},
		{80_000, 0, true, DueTokens},
		{1000, 50, true, DueTurns},
	}
	for _, c := range cases {
		due, why := p.Due(c.tokens, c.turns)
		if due != c.due || why != c.why {
			t.Errorf("Due(%d, %d) = %v %q", c.tokens, c.turns, due, why)
		}
	}
	if due, _ := (Policy{}).Due(1<<40, 1<<20); due {
		t.Error("zero policy asked for compaction")
	}
	if due, _ := (Policy{ContextWindow: 100, Threshold: 0.5}).Due(50, 0); !due {
		t.Error("custom threshold ignored")
	}
}

func TestValidate(t *testing.T) {
	ok := rollout.Checkpoint{CoveredTurn: "u1", Trigger: rollout.TriggerManual, ReplacementHistory: [][]byte{[]byte("s")}}
	if err := Validate(&ok); err != nil || ok.ID == "" {
		t.Fatalf("valid checkpoint: %v", err)
	}
	for _, bad := range []rollout.Checkpoint{
		{Trigger: rollout.TriggerManual, ReplacementHistory: [][]byte{nil}},
		{CoveredTurn: "u1", Trigger: "sometimes", ReplacementHistory: [][]byte{nil}},
		{CoveredTurn: "u1", Trigger: rollout.TriggerManual},
	} {
		if err := Validate(&bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestLatest(t *testing.T) {
	cp := func(seq uint64, turn, trigger string) Candidate {
		return Candidate{Seq: seq, Checkpoint: &rollout.Checkpoint{ID: turn, CoveredTurn: turn, Trigger: trigger, ReplacementHistory: [][]byte{[]byte("s")}}}
	}
	surviving := map[string]bool{"u1": true, "u2": true, "u3": false}
	survives := func(c *Candidate) (bool, bool) {
		ended, ok := surviving[c.Checkpoint.CoveredTurn]
		return ok, ended
	}
	cands := []Candidate{
		cp(5, "u1", rollout.TriggerPostTurn),
		cp(9, "u2", rollout.TriggerPostTurn),
		{Seq: 12},                             // undecodable
		cp(14, "u3", rollout.TriggerPostTurn), // covered turn not completed
		cp(20, "u9", rollout.TriggerManual),   // covered turn gone (rolled back)
	}
	got, passed := Latest(cands, survives)
	if got == nil || got.Seq != 9 {
		t.Fatalf("chose %+v", got)
	}
	wantWhy := []string{WhyCoveredGone, WhyNotCompleted, WhyUndecodable}
	if len(passed) != 3 {
		t.Fatalf("passed %+v", passed)
	}
	for i, p := range passed {
		if p.Why != wantWhy[i] {
			t.Errorf("passed[%d] = %s, want %s", i, p.Why, wantWhy[i])
		}
	}
	if got, _ := Latest(nil, survives); got != nil {
		t.Fatal("no candidates, yet a choice")
	}
}
