package rollout

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/rolloutdb/rolloutdb/vfs"
)

// Open from an anchor reads only the tail, and must end exactly where a
// full read does: same end, same last seq, the same torn tail cut, the
// same bytes left. The cases: a sound file; a stale anchor (not the frame
// at its offset); and a crash that tore an unsynced frame before the
// anchor, where the anchor frame survived (then everything from the torn
// frame is a torn tail, and a reader starting at the anchor would miss it:
// Open starts at the durable point the anchor recorded instead).
func TestOpenFromAnAnchorEqualsAFullOpen(t *testing.T) {
	type built struct {
		data   []byte
		anchor Anchor
	}
	build := func(t *testing.T, tear bool) built {
		dir := t.TempDir()
		// Three synced frames, then (reopened without fsync) three more:
		// those record the end of the third as their durable point.
		w, path := newRollout(t, vfs.OS, dir, "t1", Options{CompressAbove: -1})
		for i := 0; i < 3; i++ {
			if _, err := w.Append(bg, []Record{itemRec(t, "u", "synced")}, AppendOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		w.Close()
		w, _, err := Open(bg, path, "t1", Options{Sync: SyncNever, CompressAbove: -1})
		if err != nil {
			t.Fatal(err)
		}
		var res []AppendResult
		for i := 0; i < 3; i++ {
			r, err := w.Append(bg, []Record{itemRec(t, "u", "unsynced")}, AppendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			res = append(res, r)
		}
		w.Close()
		data := mustRead(t, path)
		if tear {
			data[res[1].Offset+FrameHeaderSize+2] ^= 0xff // the fifth frame torn, the sixth intact
		}
		last := res[2]
		return built{data, Anchor{Offset: last.Offset, Seq: last.FirstSeq, DataCRC: last.DataCRC}}
	}
	open := func(t *testing.T, data []byte, from Anchor) (end int64, last uint64, torn *CorruptionError, after []byte) {
		path := filepath.Join(t.TempDir(), "t1"+RolloutExt)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		w, rep, err := Open(bg, path, "t1", Options{From: from})
		if err != nil {
			t.Fatal(err)
		}
		end, last = w.End(), w.LastSeq()
		w.Close()
		return end, last, rep.TornTail, mustRead(t, path)
	}
	for _, tc := range []struct {
		name  string
		tear  bool
		stale bool
	}{{"sound", false, false}, {"stale anchor", false, true}, {"torn before the anchor", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			b := build(t, tc.tear)
			a := b.anchor
			if tc.stale {
				a.DataCRC ^= 1
			}
			e1, l1, t1, d1 := open(t, b.data, Anchor{})
			e2, l2, t2, d2 := open(t, b.data, a)
			if e1 != e2 || l1 != l2 || (t1 == nil) != (t2 == nil) || !bytes.Equal(d1, d2) {
				t.Fatalf("full open: end %d, last seq %d, torn %v; from the anchor: end %d, last seq %d, torn %v", e1, l1, t1, e2, l2, t2)
			}
			if tc.tear && (t1 == nil || l1 != 5) {
				t.Fatalf("the torn frame was not cut: last seq %d, torn %v", l1, t1)
			}
		})
	}
	// And from a sound anchor, Open reads the tail only.
	b := build(t, false)
	if d := durableBefore(bytes.NewReader(b.data), int64(len(b.data)), b.anchor); d <= FileHeaderSize || d >= b.anchor.Offset {
		t.Fatalf("durable point %d for an anchor at %d", d, b.anchor.Offset)
	}
}

// BenchmarkOpenLongThread: opening a 50,000-frame rollout (written with
// SyncAlways, so each frame records a recent durable point) for appending,
// from the start and from an anchor at its last frame.
func BenchmarkOpenLongThread(b *testing.B) {
	mem := vfs.NewMemFS()
	w, path := newRollout(b, mem, "/ws", "t1", Options{})
	var last AppendResult
	for i := 0; i < 50000; i++ {
		r, err := w.Append(bg, []Record{itemRec(b, "u", "a record of some length, as agents write them, to make the file long")}, AppendOptions{})
		if err != nil {
			b.Fatal(err)
		}
		last = r
	}
	w.Close()
	for _, bc := range []struct {
		name string
		from Anchor
	}{{"from-start", Anchor{}}, {"from-anchor", Anchor{Offset: last.Offset, Seq: last.FirstSeq, DataCRC: last.DataCRC}}} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				w, _, err := Open(bg, path, "t1", Options{FS: mem, From: bc.from})
				if err != nil {
					b.Fatal(err)
				}
				w.Close()
			}
		})
	}
}
