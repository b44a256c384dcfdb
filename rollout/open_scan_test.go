package rollout

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"testing"
)

// spoilPayload rewrites the frame at off so that its payload no longer
// decodes while its header and payload checksums still check: what a
// writer bug, never a crash, would leave.
func spoilPayload(t *testing.T, data []byte, off int64) {
	t.Helper()
	h, reason := parseFrameHeader(data[off:])
	if reason != "" || h.Flags&flagZstd != 0 {
		t.Fatalf("frame at %d: %q, flags %d", off, reason, h.Flags)
	}
	p := data[off+FrameHeaderSize : off+FrameHeaderSize+int64(h.Length)]
	p[0] = 0xc1 // never used in msgpack: the first envelope does not decode
	h.DataCRC = crc32.Checksum(p, castagnoli)
	h.put(data[off:])
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
// continue after the last frame.
func TestOpenScanCutsWhatAFullScanCuts(t *testing.T) {
	_, data, frames := buildFile(t, 6, 2, -1)
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
			if tc.frame == 3 && len(r.Damage()) != 1 {
				t.Fatalf("damage %v, want the spoiled frame", r.Damage())
			}
			if tc.frame == 6 && (len(r.Damage()) != 0 || r.TornTail() != nil) {
				t.Fatalf("after the cut: damage %v, torn %v", r.Damage(), r.TornTail())
			}
		})
	}
}
