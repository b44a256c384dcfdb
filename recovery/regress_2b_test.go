package recovery

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
)

func sixTurnFile(t *testing.T) (*builder, []byte) {
	b := newBuilder(t, fxThread)
	for i := 0; i < 4; i++ {
		b.turn(nil, false)
	}
	return b, b.bytes()
}

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

// (4a) Two adjacent damaged frames: the first's header survives (payload
// flipped), the second is zeroed.
func TestReview_RepairTwoAdjacentDamagedFrames(t *testing.T) {
	b, data := sixTurnFile(t)
	data = flipAt(data, payload(b.frames["u2/start"])+3)
	f := b.frames["u2/reasoning"]
	clear(data[f.off:f.end])
	dumpDamage(t, data)
	before := rv(t, data, 0)
	path := filepath.Join(t.TempDir(), fxThread+".rollout")
	os.WriteFile(path, data, 0o644)
	rep, err := Repair(ctx, path, fxThread, RepairOptions{})
	if err != nil {
		t.Fatalf("repair: %v", err)
	}
	fixed, _ := os.ReadFile(path)
	after := rv(t, fixed, 0)
	t.Logf("%+v", rep)
	if summary(before) != summary(after) {
		t.Fatalf("before %s\nafter  %s", summary(before), summary(after))
	}
}

// (4b) After a rewrite every frame says durable=128: a later bit flip in the
// middle of the repaired file reads as a torn tail, and the next writer cuts
// every acknowledged record after it.
func TestReview_RepairedFileLosesDurability(t *testing.T) {
	b, data := sixTurnFile(t)
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
			orep.TornTail.Length, orep.TornTail.FirstSeq, rv(t, fixed, 0).LastSeq)
	}
}
