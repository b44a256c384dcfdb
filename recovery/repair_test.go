package recovery

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
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

// fourTurnFile builds a rollout of four completed turns.
func fourTurnFile(t *testing.T) (*builder, []byte) {
	b := newBuilder(t, fxThread)
	for i := 0; i < 4; i++ {
		b.turn(nil, false)
	}
	return b, b.bytes()
}

// dumpDamage logs what the reader makes of data.
func dumpDamage(t *testing.T, data []byte) {
	r, _ := rollout.NewReader(bytes.NewReader(data), int64(len(data)), rollout.ReaderOptions{})
	n := 0
	for r.Next() {
		n++
	}
	for _, d := range r.Damage() {
		t.Logf("damage: off %d len %d seqs %d..%d %s ack %v", d.Offset, d.Length, d.FirstSeq, d.LastSeq, d.Reason, d.AckLost)
	}
	t.Logf("records %d torn %v", n, r.TornTail())
}

// Two adjacent damaged frames, the first's header intact (payload
// flipped), the second zeroed: the repaired file resumes as the damaged
// one did.
// From a review, case 4a.
func TestRepairOfTwoAdjacentDamagedFramesKeepsWhatResumeSees(t *testing.T) {
	b, data := fourTurnFile(t)
	data = flipAt(data, payload(b.frames["u2/start"])+3)
	f := b.frames["u2/reasoning"]
	clear(data[f.off:f.end])
	dumpDamage(t, data)
	before := resumeBytes(t, data, 0)
	path := filepath.Join(t.TempDir(), fxThread+".rollout")
	os.WriteFile(path, data, 0o644)
	rep, err := Repair(ctx, path, fxThread, RepairOptions{})
	if err != nil {
		t.Fatalf("repair: %v", err)
	}
	fixed, _ := os.ReadFile(path)
	after := resumeBytes(t, fixed, 0)
	t.Logf("%+v", rep)
	if summary(before) != summary(after) {
		t.Fatalf("before %s\nafter  %s", summary(before), summary(after))
	}
}

// A rewritten file keeps its frames' durable offsets: a later bit flip in
// its middle is mid-file damage, not a torn tail the next writer cuts with
// every acknowledged record after it.
// From a review, case 4b: after a rewrite every frame said durable=128.
func TestABitFlipInARepairedFileIsNotATornTail(t *testing.T) {
	b, data := fourTurnFile(t)
	f := b.frames["u1/reasoning"]
	clear(data[f.off:f.end]) // mid-file damage -> rewrite
	path := filepath.Join(t.TempDir(), fxThread+".rollout")
	os.WriteFile(path, data, 0o644)
	if rep, err := Repair(ctx, path, fxThread, RepairOptions{}); err != nil || rep.Action != ActionRewrite {
		t.Fatalf("repair: %v %+v", err, rep)
	}
	fixed, _ := os.ReadFile(path)
	// Same bit flip in the original would be mid-file damage (u2's reasoning).
	g := b.frames["u2/reasoning"]
	delta := int64(len(fixed)) - int64(len(data))
	off := g.off + delta + rollout.FrameHeaderSize + 3
	os.WriteFile(path, flipAt(fixed, off), 0o644)
	w, orep, err := rollout.Open(ctx, path, fxThread, rollout.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if orep.TornTail != nil {
		t.Fatalf("one flipped bit in the repaired file cut %d bytes (seqs from %d) as a torn tail; original had %d records",
			orep.TornTail.Length, orep.TornTail.FirstSeq, resumeBytes(t, fixed, 0).LastSeq)
	}
}

// One crafted frame header (valid CRC, right file id) with a forward seq
// jump of two million: Repair refuses it, and leaves the file alone,
// rather than materialise every missing seq as a placeholder in memory
// (the format allows seqs up to 2^62).
// From a review, case 5: Repair wrote the placeholders.
func TestRepairRefusesAForgedSeqJump(t *testing.T) {
	b, data := fourTurnFile(t)
	f := b.frames["u4/commit"]
	h := data[f.off : f.off+48]
	gap := uint64(2_000_000)
	binary.LittleEndian.PutUint64(h[28:], binary.LittleEndian.Uint64(h[28:])+gap)
	binary.LittleEndian.PutUint32(h[4:], crc32.Checksum(h[8:48], crc32.MakeTable(crc32.Castagnoli)))
	path := filepath.Join(t.TempDir(), fxThread+".rollout")
	os.WriteFile(path, data, 0o644)
	rep, err := Repair(ctx, path, fxThread, RepairOptions{})
	if err == nil {
		t.Fatalf("repair wrote %d placeholders for a forged seq jump", rep.SeqsLost)
	}
	if after, _ := os.ReadFile(path); len(after) != len(data) {
		t.Fatalf("a refused repair changed the file: %d -> %d bytes", len(data), len(after))
	}
}
