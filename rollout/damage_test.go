package rollout

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// reopenAppendReadBack writes damaged bytes to a file, opens a writer on it
// (which cuts a torn tail), appends one record, and checks that everything
// reads back: the survivors, then the new record with the next seq.
func reopenAppendReadBack(t *testing.T, damaged []byte, survivors []uint64) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "t1.rollout")
	if err := os.WriteFile(path, damaged, 0o644); err != nil {
		t.Fatal(err)
	}
	w, rep, err := Open(bg, path, "t1", Options{})
	if err != nil {
		t.Fatalf("open after damage: %v", err)
	}
	if rep.TornTail != nil {
		saved := mustRead(t, rep.TornSavedTo)
		if !bytes.Equal(saved, damaged[rep.TornTail.Offset:]) {
			t.Fatalf("torn tail copy differs from the cut bytes")
		}
	}
	res, err := w.Append(bg, []Record{itemRec(t, "after", "after damage")}, AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next := survivors[len(survivors)-1] + 1
	if res.FirstSeq != next {
		t.Fatalf("append after damage got seq %d, want %d", res.FirstSeq, next)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, got := readAll(t, mustRead(t, path))
	want := append(append([]uint64{}, survivors...), next)
	if !equalSeqs(seqs(got), want) {
		t.Fatalf("after reopen+append: seqs %v, want %v", seqs(got), want)
	}
	if r.TornTail() != nil {
		t.Fatalf("torn tail remains after writer open: %v", r.TornTail())
	}
	if got[len(got)-1].Turn != "after" {
		t.Fatalf("last record is %+v", got[len(got)-1])
	}
}

func equalSeqs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTornLastFrameAtEveryOffset(t *testing.T) {
	for _, compress := range []int{-1, 64} {
		_, data, frames := buildFile(t, 4, 3, compress)
		last := frames[len(frames)-1]
		all := seqRange(1, last.last)
		survivors := seqRange(1, last.first-1)
		for cut := last.off; cut < last.end; cut++ {
			r, got := readAll(t, data[:cut])
			if !equalSeqs(seqs(got), survivors) {
				t.Fatalf("cut at %d: seqs %v, want %v", cut, seqs(got), survivors)
			}
			if len(r.Damage()) != 0 {
				t.Fatalf("cut at %d: torn tail reported as mid-file damage: %v", cut, r.Damage())
			}
			if cut == last.off {
				if r.TornTail() != nil {
					t.Fatalf("cut at a frame boundary is a clean end, got %v", r.TornTail())
				}
				continue
			}
			tt := r.TornTail()
			if tt == nil || tt.Offset != last.off || tt.Length != cut-last.off || tt.FirstSeq != last.first || !tt.Tail {
				t.Fatalf("cut at %d: torn tail %+v, want offset %d length %d seq %d", cut, tt, last.off, cut-last.off, last.first)
			}
			if r.End() != last.off || r.LastSeq() != last.first-1 {
				t.Fatalf("cut at %d: end %d last seq %d", cut, r.End(), r.LastSeq())
			}
			if cut%7 == 0 || cut == last.off+1 || cut == last.end-1 {
				reopenAppendReadBack(t, data[:cut], survivors)
			}
		}
		_, got := readAll(t, data)
		if !equalSeqs(seqs(got), all) {
			t.Fatalf("undamaged: %v", seqs(got))
		}
	}
}

// Two unsynced frames at the end, both torn in their payload but with their
// headers intact (assumptions 1+2). Nothing valid follows either, so both are
// a torn tail: Open cuts them and continues at the first lost seq.
// From a review.
func TestTwoTornFramesAtTheTailAreATornTail(t *testing.T) {
	path, data, frames := buildFile(t, 5, 1, -1)
	n := len(frames)
	a, b := frames[n-2], frames[n-1] // last two frames
	data[a.payloadOff+3] ^= 0xff
	data[b.payloadOff+3] ^= 0xff
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r, _ := readAll(t, data)
	t.Logf("reader: End=%d LastSeq=%d torn=%v damage=%v", r.End(), r.LastSeq(), r.TornTail(), r.Damage())

	w, rep, err := Open(bg, path, "", Options{FS: vfs.OS})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("open: torn=%v damage=%v", rep.TornTail, rep.Damage)
	res, err := w.Append(bg, []Record{itemRec(t, "x", "after")}, AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Logf("append after open: seq %d at %d (first lost frame was seq %d at %d)", res.FirstSeq, res.Offset, a.first, a.off)
	r2, recs := readAll(t, mustRead(t, path))
	t.Logf("reread seqs=%v damage=%v", seqs(recs), r2.Damage())
	if len(rep.Damage) != 0 {
		t.Errorf("Open reported mid-file damage %v for what is a torn tail", rep.Damage)
	}
	if res.FirstSeq != a.first {
		t.Errorf("next seq %d, want %d: seqs skipped", res.FirstSeq, a.first)
	}
	if len(r2.Damage()) != 0 {
		t.Errorf("file written by the writer now has damage: %v", r2.Damage())
	}
}

// Unsynced frames 4 and 5; a crash tears 4 and keeps 5. No frame vouches
// that 4 was ever durable, so it and everything after it is a torn tail:
// Open cuts it all (keeping a copy), and the rollout stays a gapless
// prefix. (Keeping 5 would leave a hole, and a later frame's durable offset
// would then make the old torn write look like acknowledged data lost.)
func TestTornWriteBeforeAnIntactFrameIsATornTail(t *testing.T) {
	dir := t.TempDir()
	w, path := newRollout(t, vfs.OS, dir, "t1", Options{Sync: SyncNever, CompressAbove: -1})
	var res []AppendResult
	for i := 0; i < 5; i++ {
		r, err := w.Append(bg, []Record{itemRec(t, "u", "unsynced")}, AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, r)
	}
	w.Close()
	data := mustRead(t, path)
	data[res[3].Offset+FrameHeaderSize+3] ^= 0xff
	os.WriteFile(path, data, 0o644)
	r, got := readAll(t, data)
	if tt := r.TornTail(); tt == nil || tt.Offset != res[3].Offset || len(r.Damage()) != 0 || len(got) != 4 {
		t.Fatalf("torn %v damage %v records %d", r.TornTail(), r.Damage(), len(got))
	}
	w, rep, err := Open(bg, path, "t1", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if saved := mustRead(t, rep.TornSavedTo); !bytes.Equal(saved, data[res[3].Offset:]) || filepath.Dir(rep.TornSavedTo) != dir {
		t.Fatal("the cut bytes were not kept beside the rollout")
	}
	next, err := w.Append(bg, []Record{itemRec(t, "v", "after")}, AppendOptions{})
	if err != nil || next.FirstSeq != res[3].FirstSeq {
		t.Fatalf("append after the cut: seq %d (%v), want %d", next.FirstSeq, err, res[3].FirstSeq)
	}
	w.Close()
	r, got = readAll(t, mustRead(t, path))
	if len(r.Damage()) != 0 || r.TornTail() != nil || len(got) != 5 {
		t.Fatalf("after reopen: %d records, damage %v", len(got), r.Damage())
	}
}

// flip returns a copy of b with one bit flipped at off.
func flip(b []byte, off int64) []byte {
	c := append([]byte(nil), b...)
	c[off] ^= 0x10
	return c
}

// resealHeader recomputes a frame header's checksum after an edit, as an
// adversary (not a random fault) could.
func resealHeader(b []byte, off int64) {
	h := b[off : off+FrameHeaderSize]
	binary.LittleEndian.PutUint32(h[4:], crc32.Checksum(h[8:], castagnoli))
}

func TestMidFileDamage(t *testing.T) {
	_, data, frames := buildFile(t, 6, 3, -1)
	mid := frames[3]
	lastSeq := frames[len(frames)-1].last
	all := seqRange(1, lastSeq)
	lost := seqRange(mid.first, mid.last)
	survivors := without(all, lost...)
	frameLen := mid.end - mid.off

	type tc struct {
		name   string
		damage func() []byte
		reason Reason
		length int64
	}
	cases := []tc{
		{"magic", func() []byte { return flip(data, mid.off) }, ReasonBadMagic, frameLen},
		{"header crc", func() []byte { return flip(data, mid.off+4) }, ReasonHeaderChecksum, frameLen},
		{"flags", func() []byte { return flip(data, mid.off+8) }, ReasonHeaderChecksum, frameLen},
		{"count", func() []byte { return flip(data, mid.off+10) }, ReasonHeaderChecksum, frameLen},
		{"length", func() []byte { return flip(data, mid.off+12) }, ReasonHeaderChecksum, frameLen},
		{"rawlen", func() []byte { return flip(data, mid.off+16) }, ReasonHeaderChecksum, frameLen},
		{"file id", func() []byte { return flip(data, mid.off+20) }, ReasonHeaderChecksum, frameLen},
		{"seq", func() []byte { return flip(data, mid.off+28) }, ReasonHeaderChecksum, frameLen},
		{"durable", func() []byte { return flip(data, mid.off+36) }, ReasonHeaderChecksum, frameLen},
		{"data crc", func() []byte { return flip(data, mid.off+44) }, ReasonHeaderChecksum, frameLen},
		{"payload", func() []byte { return flip(data, mid.payloadOff+17) }, ReasonPayloadCRC, frameLen},
		{"payload last byte", func() []byte { return flip(data, mid.end-1) }, ReasonPayloadCRC, frameLen},
		{"zeros", func() []byte {
			c := append([]byte(nil), data...)
			clear(c[mid.off:mid.end])
			return c
		}, ReasonZeros, frameLen},
		{"length too large, resealed", func() []byte {
			c := append([]byte(nil), data...)
			binary.LittleEndian.PutUint32(c[mid.off+12:], MaxFrameSize+1)
			resealHeader(c, mid.off)
			return c
		}, ReasonBadLength, frameLen},
		{"length past next frame, resealed", func() []byte {
			c := append([]byte(nil), data...)
			binary.LittleEndian.PutUint32(c[mid.off+12:], uint32(mid.end-mid.payloadOff+30))
			binary.LittleEndian.PutUint32(c[mid.off+16:], uint32(mid.end-mid.payloadOff+30))
			resealHeader(c, mid.off)
			return c
		}, ReasonPayloadCRC, frameLen},
		{"frame of another file", func() []byte {
			c := append([]byte(nil), data...)
			c[mid.off+20] ^= 1
			resealHeader(c, mid.off)
			return c
		}, ReasonFileID, frameLen},
		{"seq going backwards", func() []byte {
			c := append([]byte(nil), data...)
			binary.LittleEndian.PutUint64(c[mid.off+28:], 2)
			resealHeader(c, mid.off)
			return c
		}, ReasonSeq, frameLen},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			damaged := c.damage()
			r, got := readAll(t, damaged)
			if !equalSeqs(seqs(got), survivors) {
				t.Fatalf("seqs %v, want %v", seqs(got), survivors)
			}
			if r.TornTail() != nil {
				t.Fatalf("mid-file damage reported as torn tail: %v", r.TornTail())
			}
			d := r.Damage()
			if len(d) != 1 {
				t.Fatalf("damage %v, want one region", d)
			}
			if d[0].Offset != mid.off || d[0].Length != c.length || d[0].Reason != c.reason ||
				d[0].FirstSeq != mid.first || d[0].LastSeq != mid.last || d[0].Tail || !d[0].AckLost {
				t.Fatalf("damage %+v, want offset %d length %d reason %s seqs %d..%d", d[0], mid.off, c.length, c.reason, mid.first, mid.last)
			}
			reopenAppendReadBack(t, damaged, survivors)
		})
	}
}

func TestDamageInFirstFrameAndHeader(t *testing.T) {
	_, data, frames := buildFile(t, 3, 2, -1)
	// The header record's frame damaged: everything else survives, seq 1 is
	// reported lost (recovery refuses such a rollout; the reader just says).
	r, got := readAll(t, flip(data, frames[0].payloadOff+3))
	if !equalSeqs(seqs(got), seqRange(2, frames[len(frames)-1].last)) || len(r.Damage()) != 1 || r.Damage()[0].FirstSeq != 1 {
		t.Fatalf("seqs %v damage %v", seqs(got), r.Damage())
	}
	// A damaged file header: nothing can be trusted.
	_, err := NewReader(bytes.NewReader(flip(data, 40)), int64(len(data)), ReaderOptions{Path: "x"})
	var ce *CorruptionError
	if !asCorruption(err, &ce) || ce.Reason != ReasonBadFileHeader {
		t.Fatalf("damaged file header: %v", err)
	}
	// Only the file header: a valid, empty rollout.
	r, got = readAll(t, data[:FileHeaderSize])
	if len(got) != 0 || r.TornTail() != nil || len(r.Damage()) != 0 {
		t.Fatal("file header alone should read as empty")
	}
	// Shorter than a file header.
	if _, err := NewReader(bytes.NewReader(data[:50]), 50, ReaderOptions{}); !asCorruption(err, &ce) {
		t.Fatalf("short file: %v", err)
	}
}

// The thread_opened frame is synced before the file appears, so its loss
// is never a torn write: Open refuses rather than hand out seq 1 again.
// From a review.
func TestOpenRefusesALostHeaderFrame(t *testing.T) {
	w, path := newRollout(t, vfs.OS, t.TempDir(), "t1", Options{})
	w.Close()
	b := mustRead(t, path)
	b[FileHeaderSize+FrameHeaderSize+5] ^= 0xff
	os.WriteFile(path, b, 0o644)
	if _, _, err := Open(bg, path, "t1", Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open with the header frame damaged: %v", err)
	}
	if after := mustRead(t, path); !bytes.Equal(after, b) {
		t.Fatal("the refused open changed the file")
	}
	os.WriteFile(path, b[:FileHeaderSize], 0o644)
	if _, _, err := Open(bg, path, "t1", Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open of a file header alone: %v", err)
	}
}

func TestTwoDamagedRegionsAndZeroTail(t *testing.T) {
	_, data, frames := buildFile(t, 8, 2, -1)
	c := flip(flip(data, frames[2].payloadOff+1), frames[6].off+30)
	c = append(c, make([]byte, 4096)...) // an extended, never written tail
	r, got := readAll(t, c)
	all := seqRange(1, frames[len(frames)-1].last)
	want := without(all, append(seqRange(frames[2].first, frames[2].last), seqRange(frames[6].first, frames[6].last)...)...)
	if !equalSeqs(seqs(got), want) || len(r.Damage()) != 2 || r.ZeroTail() != 4096 || r.TornTail() != nil {
		t.Fatalf("seqs %v damage %v zero tail %d torn %v", seqs(got), r.Damage(), r.ZeroTail(), r.TornTail())
	}
	reopenAppendReadBack(t, c, want)
}

func TestDamageBelowDurableOffsetIsAckLost(t *testing.T) {
	dir := t.TempDir()
	w, path := newRollout(t, vfs.OS, dir, "t1", Options{Sync: SyncAlways})
	var offs []AppendResult
	for i := 0; i < 4; i++ {
		res, err := w.Append(bg, []Record{itemRec(t, "u", "durable record")}, AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, res)
	}
	w.Close()
	data := mustRead(t, path)
	r, _ := readAll(t, flip(data, offs[1].Offset+FrameHeaderSize+2))
	if d := r.Damage(); len(d) != 1 || !d[0].AckLost {
		t.Fatalf("damage below a later frame's durable offset must be AckLost: %+v", d)
	}
}

// A payload that carries frame-looking bytes (a copy of an earlier frame of
// this file, and a frame of another file with a high seq) is never taken for
// a frame, even when the reader scans through it after damage.
func TestFrameLookingBytesInPayload(t *testing.T) {
	_, other, otherFrames := buildFile(t, 1, 1, -1)
	dir := t.TempDir()
	w, path := newRollout(t, vfs.OS, dir, "t1", Options{Sync: SyncAlways, CompressAbove: -1})
	res1, err := w.Append(bg, []Record{itemRec(t, "u", "first")}, AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Sync(bg)
	self := mustRead(t, path)[res1.Offset:res1.End]
	foreign := append([]byte(nil), other[otherFrames[1].off:otherFrames[1].end]...)
	binary.LittleEndian.PutUint64(foreign[28:], 1000)
	resealHeader(foreign, 0)
	embed := Record{Kind: KindModelHistoryAppended, Turn: "u"}
	embed.Body, _ = EncodeBody(ModelHistory{Messages: [][]byte{self, foreign}})
	res2, err := w.Append(bg, []Record{embed}, AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(bg, []Record{itemRec(t, "u", "third")}, AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	data := mustRead(t, path)

	_, got := readAll(t, data)
	if !equalSeqs(seqs(got), []uint64{1, 2, 3, 4}) {
		t.Fatalf("clean read: %v", seqs(got))
	}
	for _, off := range []int64{res2.Offset, res2.Offset + 4, res2.Offset + FrameHeaderSize + 3} {
		r, got := readAll(t, flip(data, off))
		if !equalSeqs(seqs(got), []uint64{1, 2, 4}) || len(r.Damage()) != 1 || r.Damage()[0].Length != res2.End-res2.Offset {
			t.Fatalf("flip at %d: seqs %v damage %+v", off, seqs(got), r.Damage())
		}
	}
}

// Crafted inputs that once made the reader quadratic read correctly: a
// long run of frames whose seqs skip, and overlapping headers that check
// with payloads that do not.
// From a review.
func TestReaderCraftedInputs(t *testing.T) {
	h := NewFileHeader("t1", fixedTime)
	b := h.Marshal()
	var err error
	const n = 20000
	for i := 0; i < n; i++ {
		rec := Record{Seq: uint64(2*i + 1), Kind: KindTurnAborted, Time: fixedTime, Body: []byte{0x80}}
		if b, err = encodeFrame(b, h.FileID, FileHeaderSize, []Record{rec}, -1); err != nil {
			t.Fatal(err)
		}
	}
	r, got := readAll(t, b)
	if len(got) != n || len(r.Damage()) != n-1 {
		t.Fatalf("skipping seqs: %d records, %d gaps", len(got), len(r.Damage()))
	}

	b = h.Marshal()
	const size = 1 << 20
	for i := 0; i < size/2/FrameHeaderSize; i++ {
		var fh [FrameHeaderSize]byte
		(&FrameHeader{Count: 1, Length: size / 2, RawLen: size / 2, FileID: h.FileID, Seq: uint64(i + 1), DataCRC: 1}).Put(fh[:])
		b = append(b, fh[:]...)
	}
	b = append(b, bytes.Repeat([]byte{1}, size/2)...)
	r, got = readAll(t, b)
	if len(got) != 0 || r.TornTail() == nil || r.TornTail().Offset != FileHeaderSize {
		t.Fatalf("overlapping bad frames: %d records, torn %v, damage %d", len(got), r.TornTail(), len(r.Damage()))
	}
}

func TestStartOffset(t *testing.T) {
	_, data, frames := buildFile(t, 5, 2, -1)
	r, err := NewReader(bytes.NewReader(data), int64(len(data)), ReaderOptions{StartOffset: frames[3].off})
	if err != nil {
		t.Fatal(err)
	}
	var got []Record
	for r.Next() {
		got = append(got, r.Record())
	}
	if !equalSeqs(seqs(got), seqRange(frames[3].first, frames[len(frames)-1].last)) || len(r.Damage()) != 0 {
		t.Fatalf("from frame 3: %v %v", seqs(got), r.Damage())
	}
	// An offset that is not a frame boundary resynchronises forward.
	r, _ = NewReader(bytes.NewReader(data), int64(len(data)), ReaderOptions{StartOffset: frames[3].off + 5})
	got = got[:0]
	for r.Next() {
		got = append(got, r.Record())
	}
	if len(got) == 0 || got[0].Seq != frames[4].first || len(r.Damage()) != 1 {
		t.Fatalf("from inside frame 3: %v %v", seqs(got), r.Damage())
	}
}
