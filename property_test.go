package rolloutdb_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/errors"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
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
		mem := vfs.NewMemFS()
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
		var meta struct {
			Name, Status string
			Labels       []string
			Flags        map[string]bool
		}
		n := rapid.IntRange(1, 12).Draw(rt, "turns")
		for i := 0; i < n; i++ {
			switch rapid.IntRange(0, 10).Draw(rt, "op") {
			case 10: // rename, relabel, flag, set the host's status
				var u rolloutdb.MetadataUpdate
				if rapid.Bool().Draw(rt, "rename") {
					name := rapid.SampledFrom([]string{"", "a", "b"}).Draw(rt, "name")
					u.Name, meta.Name = &name, name
				}
				if rapid.Bool().Draw(rt, "status") {
					status := rapid.SampledFrom([]string{"", "todo", "done"}).Draw(rt, "state")
					u.Status, meta.Status = &status, status
				}
				u.AddLabels = rapid.SliceOfN(rapid.SampledFrom([]string{"x", "y", "z"}), 0, 2).Draw(rt, "add")
				u.RemoveLabels = rapid.SliceOfN(rapid.SampledFrom([]string{"x", "y", "z"}), 0, 2).Draw(rt, "remove")
				if rapid.Bool().Draw(rt, "flag") {
					v := rapid.Bool().Draw(rt, "pinned")
					u.Flags = map[string]bool{"pinned": v}
					meta.Flags = map[string]bool{"pinned": v}
				}
				_, err := th.UpdateMetadata(ctx, u)
				if u.Name == nil && u.Status == nil && u.Flags == nil && len(u.AddLabels)+len(u.RemoveLabels) == 0 {
					if !errors.Is(err, rolloutdb.ErrEmptyUpdate) {
						rt.Fatalf("an update naming nothing: %v, want ErrEmptyUpdate", err)
					}
					continue
				}
				if err != nil {
					rt.Fatal(err)
				}
				for _, l := range u.AddLabels {
					if !slices.Contains(meta.Labels, l) {
						meta.Labels = append(meta.Labels, l)
					}
				}
				meta.Labels = slices.DeleteFunc(meta.Labels, func(l string) bool { return slices.Contains(u.RemoveLabels, l) })
				continue
			case 0: // roll back the last turns
				k := rapid.IntRange(1, 3).Draw(rt, "rollback")
				_, err := th.Rollback(ctx, k)
				if k > len(turns) {
					if !errors.Is(err, rolloutdb.ErrRollbackTooFar) {
						rt.Fatalf("a rollback of %d of %d turns: %v, want ErrRollbackTooFar", k, len(turns), err)
					}
					continue
				}
				if err != nil {
					rt.Fatal(err)
				}
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
				if _, err := tu.Add(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: text}); err != nil {
					rt.Fatal(err)
				}
				m.texts = append(m.texts, text)
			}
			if rapid.IntRange(0, 5).Draw(rt, "abort") == 0 {
				if _, err := tu.Cancel(ctx, "stop"); err != nil {
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
		// Metadata, as resume replays it and as the projection lists it.
		m := st.Metadata
		if m.Name != meta.Name || m.Status != meta.Status || len(m.Labels)+len(meta.Labels) > 0 && !slices.Equal(m.Labels, meta.Labels) || len(meta.Flags) > 0 && !maps.Equal(m.Flags, meta.Flags) {
			rt.Fatalf("resumed metadata %+v, want %+v", m, meta)
		}
		info, err := db2.ThreadInfo(ctx, "t1")
		if err != nil {
			rt.Fatal(err)
		}
		if info.Name != meta.Name || info.State != meta.Status || info.Turns != int64(len(turns)) || !slices.Equal(info.Labels, append([]string{}, meta.Labels...)) {
			rt.Fatalf("listed %+v, want %+v and %d turns", info, meta, len(turns))
		}
		for _, l := range meta.Labels {
			p, err := db2.List(ctx, projection.ListOptions{Label: l})
			if err != nil || len(p.Threads) != 1 {
				rt.Fatalf("List by label %q: %+v, %v", l, p.Threads, err)
			}
		}
		if meta.Status != "" {
			p, err := db2.List(ctx, projection.ListOptions{State: meta.Status})
			if err != nil || len(p.Threads) != 1 {
				rt.Fatalf("List by state %q: %+v, %v", meta.Status, p.Threads, err)
			}
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
