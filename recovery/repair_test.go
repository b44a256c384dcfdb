package recovery

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// summary is what a user sees of a resumed thread.
func summary(st *State) string {
	var b strings.Builder
	for _, t := range st.Turns {
		fmt.Fprintf(&b, "%s:%s:%d:%s ", t.ID, t.Status, len(t.Items), t.HistorySource)
	}
	fmt.Fprintf(&b, "| interrupted %v rebuilt %v", st.Interrupted, st.Report.RebuiltTurns)
	if c := st.Report.Checkpoint; c != nil {
		fmt.Fprintf(&b, " checkpoint %s", c.CoveredTurn)
	}
	fmt.Fprintf(&b, " | history %q", st.ModelHistory)
	return b.String()
}

// Every fixture that resumes resumes the same after repair, and the
// repaired file reads back clean, gapless, and takes appends.
func TestRepairKeepsWhatResumeSees(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join(fixtureDir, "rec-*.rollout"))
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".rollout")
		t.Run(name, func(t *testing.T) {
			data, _ := os.ReadFile(p)
			before, err := Resume(ctx, bytes.NewReader(data), int64(len(data)), Options{ThreadID: fxThread})
			path := filepath.Join(t.TempDir(), fxThread+".rollout")
			os.WriteFile(path, data, 0o644)
			if err != nil {
				if _, rerr := Repair(ctx, path, fxThread, RepairOptions{}); rerr == nil && !errors.Is(err, ErrIdentityConflict) {
					t.Fatalf("repair of a rollout that cannot resume (%v) succeeded", err)
				}
				return
			}
			dry, err := Repair(ctx, path, fxThread, RepairOptions{DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, data) {
				t.Fatal("dry run changed the file")
			}
			rep, err := Repair(ctx, path, fxThread, RepairOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Action != dry.Action || rep.SeqsLost != dry.SeqsLost || rep.RecordsKept != dry.RecordsKept {
				t.Fatalf("dry run said %+v, repair did %+v", dry, rep)
			}
			switch {
			case len(before.Report.Skipped) > 0 && hasDamage(before):
				if rep.Action != ActionRewrite || rep.OriginalSavedTo == "" {
					t.Fatalf("damage not rewritten: %+v", rep)
				}
				if orig, _ := os.ReadFile(rep.OriginalSavedTo); !bytes.Equal(orig, data) {
					t.Fatal("original not kept")
				}
			case before.Report.TornTail:
				if rep.Action != ActionTruncate || rep.TornSavedTo == "" {
					t.Fatalf("torn tail not cut: %+v", rep)
				}
			default:
				if rep.Action != ActionNone {
					t.Fatalf("clean rollout repaired: %+v", rep)
				}
			}
			fixed, _ := os.ReadFile(path)
			r, _ := rollout.NewReader(bytes.NewReader(fixed), int64(len(fixed)), rollout.ReaderOptions{})
			n := uint64(0)
			for r.Next() {
				n++
				if r.Record().Seq != n {
					t.Fatalf("seq gap after repair at %d", n)
				}
			}
			if len(r.Damage()) > 0 || r.TornTail() != nil {
				t.Fatalf("damage remains: %v %v", r.Damage(), r.TornTail())
			}
			after, err := Resume(ctx, bytes.NewReader(fixed), int64(len(fixed)), Options{ThreadID: fxThread})
			if err != nil {
				t.Fatal(err)
			}
			if summary(after) != summary(before) {
				t.Fatalf("resume changed by repair:\n before %s\n after  %s", summary(before), summary(after))
			}
			w, _, err := rollout.Open(ctx, path, fxThread, rollout.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res, err := w.Append(ctx, []rollout.Record{{Kind: rollout.KindArchived, Body: []byte{0x80}}}, rollout.AppendOptions{}); err != nil || res.FirstSeq != n+1 {
				t.Fatalf("append after repair: %v %+v", err, res)
			}
			w.Close()
		})
	}
}

func hasDamage(st *State) bool {
	for _, s := range st.Report.Skipped {
		if s.Length > 0 {
			return true
		}
	}
	return false
}

func TestRepairRefusesALiveWriter(t *testing.T) {
	b := newBuilder(t, fxThread)
	b.turn(nil, false)
	b.bytes()
	w, _, err := rollout.Open(ctx, b.path, fxThread, rollout.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, dry := range []bool{true, false} {
		if _, err := Repair(ctx, b.path, fxThread, RepairOptions{DryRun: dry}); !errors.Is(err, rollout.ErrThreadLocked) {
			t.Fatalf("repair beside a live writer (dry run %v): %v", dry, err)
		}
	}
}
