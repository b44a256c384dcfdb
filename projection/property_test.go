package projection

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
	"pgregory.net/rapid"
)

// TestProjectionEqualsRebuild: after any mix of turns (committed, aborted,
// left open, with items replaced in place and artifact references),
// rollbacks, checkpoints, metadata updates, archive and restore, with the
// projector hearing some appends and not others (another process wrote
// them) and reads at random moments, the projection equals one rebuilt from
// scratch, and its visible turns and items are the ones a resume sees.
func TestProjectionEqualsRebuild(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		w := newWorkspace(t)
		w.t = rt
		s := w.open("")
		w.store = s
		ids := []string{"p0", "p1", "p2"}
		for _, id := range ids {
			w.create(id, rollout.Source{})
		}
		turnNo := 0
		lastTurn := map[string]string{}
		ops := rapid.IntRange(1, 40).Draw(rt, "ops")
		for range ops {
			id := rapid.SampledFrom(ids).Draw(rt, "thread")
			w.feed = rapid.Float64Range(0, 1).Draw(rt, "heard") < 0.8
			switch op := rapid.IntRange(0, 9).Draw(rt, "op"); op {
			case 0, 1, 2, 3:
				turnNo++
				tid := fmt.Sprintf("u%d", turnNo)
				if rapid.Float64Range(0, 1).Draw(rt, "reuse") < 0.1 && lastTurn[id] != "" {
					tid = lastTurn[id] // a new turn reusing an id (after a rollback, or not)
				}
				lastTurn[id] = tid
				w.append(id, rec(rt, rollout.KindTurnStarted, tid, rollout.TurnStarted{Model: "m"}),
					rec(rt, rollout.KindItemAppended, tid, rollout.Item{ID: tid + "-u", Type: rollout.ItemUserMessage, Text: fmt.Sprintf("ask %d", turnNo)}))
				w.append(id, rec(rt, rollout.KindItemAppended, tid, rollout.Item{ID: tid + "-a", Type: rollout.ItemAgentMessage, Status: rollout.ItemInProgress, Text: "partial"}))
				switch rapid.IntRange(0, 3).Draw(rt, "end") {
				case 0, 1:
					recs := []rollout.Record{
						rec(rt, rollout.KindItemAppended, tid, rollout.Item{ID: tid + "-a", Type: rollout.ItemAgentMessage, Status: rollout.ItemCompleted, Text: fmt.Sprintf("reply %d", turnNo)}),
						rec(rt, rollout.KindItemAppended, tid, rollout.Item{ID: tid + "-r", Type: rollout.ItemToolResult, Text: "big",
							Ref: &rollout.ArtifactRef{Path: "tool-results/" + id + "/" + tid, Size: 99, SHA256: "ab"}}),
						rec(rt, rollout.KindModelHistoryAppended, tid, rollout.ModelHistory{Messages: [][]byte{[]byte("m")}}),
					}
					if rapid.Bool().Draw(rt, "post-turn checkpoint") {
						recs = append(recs, rec(rt, rollout.KindCheckpoint, tid, rollout.Checkpoint{ID: "c" + tid, CoveredTurn: tid, Trigger: rollout.TriggerPostTurn, ReplacementHistory: [][]byte{[]byte("summary")}}))
					}
					recs = append(recs, rec(rt, rollout.KindTurnCompleted, tid, rollout.TurnCompleted{Status: rollout.TurnStatusCompleted, Usage: rollout.Usage{TotalTokens: int64(turnNo)}}))
					w.append(id, recs...)
				case 2:
					w.append(id, rec(rt, rollout.KindTurnAborted, tid, rollout.TurnAborted{Reason: "user"}))
				case 3:
					// Left open: interrupted, or still running. A post-turn
					// checkpoint of a turn that never ended is not usable.
					if rapid.Bool().Draw(rt, "early checkpoint") {
						w.append(id, rec(rt, rollout.KindCheckpoint, tid, rollout.Checkpoint{ID: "e" + tid, CoveredTurn: tid, Trigger: rollout.TriggerPostTurn, ReplacementHistory: [][]byte{[]byte("s")}}))
					}
				}
			case 4:
				w.append(id, rec(rt, rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: rapid.IntRange(0, 3).Draw(rt, "n")}))
			case 5:
				if tid := lastTurn[id]; tid != "" {
					var repl [][]byte // empty: an invalid checkpoint, passed over
					if rapid.Bool().Draw(rt, "valid") {
						repl = [][]byte{[]byte("summary")}
					}
					w.append(id, rec(rt, rollout.KindCheckpoint, "", rollout.Checkpoint{ID: "m" + tid, CoveredTurn: tid, Trigger: rollout.TriggerManual, ReplacementHistory: repl}))
				}
			case 6:
				name := rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "name")
				u := rollout.MetadataUpdated{Name: &name, Flags: map[string]bool{"pinned": rapid.Bool().Draw(rt, "pinned")}}
				if rapid.Bool().Draw(rt, "labels") {
					u.Labels = rapid.SliceOfDistinct(rapid.SampledFrom([]string{"x", "y", "z"}), func(s string) string { return s }).Draw(rt, "labels")
				}
				w.append(id, rec(rt, rollout.KindMetadataUpdated, "", u))
			case 7:
				if w.loc[id] == LocationActive {
					w.append(id, rec(rt, rollout.KindArchived, "", rollout.Lifecycle{}))
					w.move(id, LocationArchived)
				} else {
					w.move(id, LocationActive)
					w.append(id, rec(rt, rollout.KindRestored, "", rollout.Lifecycle{}))
				}
			case 8, 9:
				var err error
				switch rapid.IntRange(0, 2).Draw(rt, "read") {
				case 0:
					_, err = s.List(ctx, ListOptions{Scope: ScopeAll, Limit: 2})
				case 1:
					_, err = s.Thread(ctx, id)
				case 2:
					_, err = s.Turns(ctx, id, 1, 100)
				}
				if err != nil {
					rt.Fatal(err)
				}
			}
		}
		if err := s.Refresh(ctx); err != nil {
			rt.Fatal(err)
		}
		fresh := w.open("")
		if got, want := dump(rt, s), dump(rt, fresh); got != want {
			rt.Fatalf("projection differs from a rebuild (+ projected, - rebuilt):\n%s", dumpDiff(got, want))
		}
		for _, id := range ids {
			st, err := recovery.ResumeFile(ctx, nil, w.path(id), recovery.Options{ThreadID: id, WorkspaceID: testWorkspace})
			if err != nil {
				rt.Fatal(err)
			}
			turns, err := s.Turns(ctx, id, 1, 1000)
			if err != nil {
				rt.Fatal(err)
			}
			if len(turns) != len(st.Turns) {
				rt.Fatalf("%s: %d turns projected, resume sees %d", id, len(turns), len(st.Turns))
			}
			var want ThreadInfo
			for i, rt2 := range st.Turns {
				if turns[i].ID != rt2.ID || turns[i].Ordinal != int64(i+1) || turns[i].Status != rt2.Status || !reflect.DeepEqual(turns[i].Items, rt2.Items) {
					rt.Fatalf("%s turn %d: projected %+v, resume %+v", id, i+1, turns[i], rt2)
				}
				want.Turns++
				want.Items += int64(len(rt2.Items))
				want.Usage.TotalTokens += rt2.Usage.TotalTokens
				want.OpenTurn = ""
				if rt2.Status == rollout.TurnStatusOpen {
					want.OpenTurn = rt2.ID
				}
				if want.Preview == "" && len(rt2.Items) > 0 && rt2.Items[0].Type == rollout.ItemUserMessage {
					want.Preview = rt2.Items[0].Text
				}
			}
			if cp := st.Report.Checkpoint; cp != nil {
				want.CheckpointOffset = cp.Offset
			}
			info, err := s.Thread(ctx, id)
			if err != nil {
				rt.Fatal(err)
			}
			got := ThreadInfo{Turns: info.Turns, Items: info.Items, OpenTurn: info.OpenTurn, Preview: info.Preview, CheckpointOffset: info.CheckpointOffset}
			got.Usage.TotalTokens = info.Usage.TotalTokens
			if !reflect.DeepEqual(got, want) {
				var sb strings.Builder
				for _, t := range st.Turns {
					fmt.Fprintf(&sb, "resume %s %s %d\n", t.ID, t.Status, t.Usage.TotalTokens)
				}
				for _, t := range turns {
					fmt.Fprintf(&sb, "projected %d %s %s %d\n", t.Ordinal, t.ID, t.Status, t.Usage.TotalTokens)
				}
				rt.Fatalf("%s: projected %+v, resume says %+v\n%s", id, got, want, sb.String())
			}
			if info.Name != st.Metadata.Name || !reflect.DeepEqual(info.Labels, nonNil(st.Metadata.Labels)) {
				rt.Fatalf("%s metadata: projected %+v, resume %+v", id, info, st.Metadata)
			}
		}
	})
}
