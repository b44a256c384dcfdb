package rollout

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"slices"
	"testing"
)

// spoilPayload rewrites the frame at off so that its payload no longer
// decodes while its header and payload checksums still check: what a
// writer bug, never a crash, would leave.
func spoilPayload(t *testing.T, data []byte, off int64) {
	t.Helper()
	h, reason := ParseFrameHeader(data[off:])
	if reason != "" || h.Flags&flagZstd != 0 {
		t.Fatalf("frame at %d: %q, flags %d", off, reason, h.Flags)
	}
	p := data[off+FrameHeaderSize : off+FrameHeaderSize+int64(h.Length)]
	p[0] = 0xc1 // never used in msgpack: the first envelope does not decode
	h.DataCRC = crc32.Checksum(p, castagnoli)
	h.Put(data[off:])
	if _, _, err := DecodeFrame(data[off:], 0); err == nil {
		t.Fatal("the spoiled frame decodes")
	}
	if binary.LittleEndian.Uint32(data[off+44:]) != h.DataCRC {
		t.Fatal("checksum not rewritten")
	}
}

// Open scans for the end with checksums only, but what it cuts as a torn
// tail is what a scan decoding every frame would cut: a last frame that
// checks and does not decode is cut and saved; one further back is left
// in place (mid-file damage, which readers skip and report), and appends
// continue after the last frame. The file is written with SyncAlways
// (every frame vouched for by the next) and with SyncNever (none is).
func TestOpenScanCutsWhatAFullScanCuts(t *testing.T) {
	t.Run("synced", func(t *testing.T) { testOpenScan(t, SyncAlways) })
	t.Run("unsynced", func(t *testing.T) { testOpenScan(t, SyncNever) })
}

func testOpenScan(t *testing.T, sync SyncPolicy) {
	_, data, frames := buildFileSync(t, 6, 2, -1, sync)
	for _, tc := range []struct {
		name    string
		frame   int
		wantEnd int64
	}{
		{"last frame", 6, frames[6].off},
		{"mid-file frame", 3, int64(len(data))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte{}, data...)
			spoilPayload(t, b, frames[tc.frame].off)
			// A full read of the spoiled file ends where Open will: the
			// frame is not taken for a torn write, vouched for or not.
			r0, _ := readAll(t, b)
			if r0.End() != tc.wantEnd || (r0.TornTail() != nil) != (tc.frame == 6) {
				t.Fatalf("a full read ends at %d (torn %v), want %d", r0.End(), r0.TornTail(), tc.wantEnd)
			}
			if d := r0.Damage(); tc.frame == 3 && (len(d) != 1 || d[0].AckLost != (sync == SyncAlways)) {
				t.Fatalf("a full read reports %v", d)
			}
			path := t.TempDir() + "/t" + RolloutExt
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			w, rep, err := Open(bg, path, "", Options{})
			if err != nil {
				t.Fatal(err)
			}
			if w.End() != tc.wantEnd {
				t.Fatalf("end %d, want %d (report %+v)", w.End(), tc.wantEnd, rep)
			}
			if (rep.TornTail != nil) != (tc.frame == 6) {
				t.Fatalf("torn tail %v", rep.TornTail)
			}
			res, err := w.Append(bg, []Record{itemRec(t, "u", "after")}, AppendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			w.Close()
			r, recs := readAll(t, mustRead(t, path))
			if got := recs[len(recs)-1]; got.Seq != res.FirstSeq {
				t.Fatalf("last record seq %d, appended %d", got.Seq, res.FirstSeq)
			}
			if tc.frame == 3 {
				// Every record but the spoiled frame's two, in order, and
				// the frame reported, acknowledged or not as the file says.
				want := without(seqRange(1, res.FirstSeq), frames[3].first, frames[3].last)
				if got := seqs(recs); !slices.Equal(got, want) {
					t.Fatalf("seqs %v, want %v", got, want)
				}
				if d := r.Damage(); len(d) != 1 || d[0].Reason != ReasonDecode || !d[0].AckLost {
					t.Fatalf("damage %v, want the spoiled frame (vouched for since Open synced it)", d)
				}
			}
			if tc.frame == 6 && (len(r.Damage()) != 0 || r.TornTail() != nil) {
				t.Fatalf("after the cut: damage %v, torn %v", r.Damage(), r.TornTail())
			}
		})
	}
}
