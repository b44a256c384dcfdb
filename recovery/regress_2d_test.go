package recovery

import (
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// (3) u2's start frame lost to damage; u2's first surviving record is an
// exact-history record whose body does not decode; its commit carries more
// exact history. tieTurn finds no "u2" yet and no open turn, so the
// rejection is dropped and u2 resumes from partial exact history.
func TestReview_RejectedHistoryOfTurnNotYetSeen(t *testing.T) {
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
	st := rv(t, data, 0)
	t.Logf("%s", summary(st))
	for _, tu := range st.Turns {
		if tu.ID == "u2" && tu.HistorySource != HistoryRebuilt {
			t.Fatalf("u2 had an exact-history record rejected but resumes with %s history %q", tu.HistorySource, tu.History)
		}
	}
}
