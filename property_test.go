package rolloutdb_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
	"pgregory.net/rapid"
)

// modelTurn is what the host was told is durable about a turn.
type modelTurn struct {
	id     string
	status string
	texts  []string
	exact  [][]byte
}

// Property: whatever a host does through the facade (turns committed or
// aborted, streamed items, checkpoints, rollbacks), and whatever a power
// cut keeps of what was not yet acknowledged, Resume returns exactly the
// acknowledged conversation: the same turns with the same items and
// statuses, and a model history made of the latest surviving checkpoint and
// the exact histories after it.
func TestResumeEqualsWhatWasAcknowledged(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		mem := rollout.NewMemFS()
		db, err := rolloutdb.Open(ctx, "/ws", rolloutdb.Options{FS: mem})
		if err != nil {
			rt.Fatal(err)
		}
		th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "t1"})
		if err != nil {
			rt.Fatal(err)
		}
		var turns []modelTurn
		type checkpoint struct {
			covered string
			summary []byte
		}
		var cps []checkpoint // in order; the latest surviving one is used
		n := rapid.IntRange(1, 12).Draw(rt, "turns")
		for i := 0; i < n; i++ {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0: // roll back the last turns
				k := rapid.IntRange(1, 3).Draw(rt, "rollback")
				rec, _ := rollout.NewRecord(rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: k})
				if _, err := th.Append(ctx, []rollout.Record{rec}, rollout.AppendOptions{}); err != nil {
					rt.Fatal(err)
				}
				k = min(k, len(turns))
				gone := map[string]bool{}
				for _, dropped := range turns[len(turns)-k:] {
					gone[dropped.id] = true
				}
				kept := cps[:0]
				for _, c := range cps {
					if !gone[c.covered] { // a checkpoint whose covered turn is gone is unusable
						kept = append(kept, c)
					}
				}
				cps = kept
				turns = turns[:len(turns)-k]
				continue
			}
			input := fmt.Sprintf("question %d", i)
			tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: input})
			if err != nil {
				rt.Fatal(err)
			}
			m := modelTurn{id: tu.ID(), texts: []string{input}}
			for j := rapid.IntRange(0, 2).Draw(rt, "streamed"); j > 0; j-- {
				text := fmt.Sprintf("step %d.%d", i, j)
				if err := tu.AppendItem(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: text}); err != nil {
					rt.Fatal(err)
				}
				m.texts = append(m.texts, text)
			}
			if rapid.IntRange(0, 5).Draw(rt, "abort") == 0 {
				if err := tu.Abort(ctx, "stop"); err != nil {
					rt.Fatal(err)
				}
				m.status = rollout.TurnStatusAborted
			} else {
				answer := fmt.Sprintf("answer %d", i)
				c := rolloutdb.Commit{Items: []rollout.Item{{Type: rollout.ItemAgentMessage, Text: answer}}, ModelHistory: [][]byte{[]byte("exact " + answer)}}
				if rapid.IntRange(0, 3).Draw(rt, "checkpoint") == 0 {
					summary := []byte(fmt.Sprintf("summary through %d", i))
					c.Checkpoint = &rollout.Checkpoint{ReplacementHistory: [][]byte{summary}}
					cps = append(cps, checkpoint{tu.ID(), summary})
				}
				if _, err := tu.Commit(ctx, c); err != nil {
					rt.Fatal(err)
				}
				m.status, m.texts, m.exact = rollout.TurnStatusCompleted, append(m.texts, answer), c.ModelHistory
			}
			turns = append(turns, m)
		}
		// A power cut: everything acknowledged was synced; nothing else was
		// written, so whatever the crash keeps, the state must match.
		after := mem.Crash(rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 1)), false)
		db2, err := rolloutdb.Open(ctx, "/ws", rolloutdb.Options{FS: after})
		if err != nil {
			rt.Fatal(err)
		}
		defer db2.Close()
		_, st, err := db2.Resume(ctx, "t1", rolloutdb.ResumeOptions{})
		if err != nil {
			rt.Fatal(err)
		}
		if len(st.Turns) != len(turns) || len(st.Report.Skipped) != 0 || len(st.Interrupted) != 0 {
			rt.Fatalf("%d turns resumed, %d acknowledged; skipped %v interrupted %v", len(st.Turns), len(turns), st.Report.Skipped, st.Interrupted)
		}
		var want [][]byte
		from := 0
		var cp *checkpoint
		if len(cps) > 0 {
			cp = &cps[len(cps)-1]
			want = append(want, cp.summary)
		}
		for i, m := range turns {
			got := st.Turns[i]
			if got.ID != m.id || got.Status != m.status || len(got.Items) != len(m.texts) {
				rt.Fatalf("turn %d: got %s %s %d items, want %s %s %d", i, got.ID, got.Status, len(got.Items), m.id, m.status, len(m.texts))
			}
			for j, it := range got.Items {
				if it.Text != m.texts[j] {
					rt.Fatalf("turn %d item %d: %q, want %q", i, j, it.Text, m.texts[j])
				}
			}
			if cp != nil && m.id == cp.covered {
				from = i + 1
			}
		}
		for _, m := range turns[from:] {
			if m.status == rollout.TurnStatusCompleted {
				want = append(want, m.exact...)
			} else {
				want = append(want, recovery.DefaultHistory(m.id, itemsOf(st, m.id))...)
			}
		}
		if fmt.Sprint(want) != fmt.Sprint(st.ModelHistory) {
			rt.Fatalf("model history\n got  %q\n want %q", st.ModelHistory, want)
		}
	})
}

func itemsOf(st *recovery.State, id string) []rollout.Item {
	for _, t := range st.Turns {
		if t.ID == id {
			return t.Items
		}
	}
	return nil
}
