package rollout

import (
	"bytes"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// Regression tests for faults found in review (the regress_*_test.go files
// beside this one hold the rest).

// Under SyncInterval a failed fsync must not rewind the writer: records
// already acknowledged under that policy keep their seqs, and the writer
// refuses everything until the thread is reopened.
func TestSyncIntervalFailureStopsTheWriter(t *testing.T) {
	mem := vfs.NewMemFS()
	w0, path := newRollout(t, mem, "/d", "t1", Options{})
	w0.Close()
	var fail atomic.Bool
	ffs := &vfs.FaultFS{FS: mem, Hook: func(op vfs.Op, name string) error {
		if op == vfs.OpSync && fail.Load() {
			return syscall.EIO
		}
		return nil
	}}
	w, _, err := Open(bg, path, "t1", Options{FS: ffs, Sync: SyncInterval(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i := 0; i < 3; i++ {
		res, err := w.Append(bg, []Record{itemRec(t, "a", "acked")}, AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		last = res.LastSeq
	}
	fail.Store(true)
	if err := w.Sync(bg); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("failed sync: %v", err)
	}
	fail.Store(false)
	if _, err := w.Append(bg, []Record{itemRec(t, "b", "new")}, AppendOptions{}); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("append after a failed interval sync: %v", err)
	}
	if err := w.Close(); err == nil {
		t.Fatal("close after a failed sync reported nothing")
	}
	w, _, err = Open(bg, path, "t1", Options{FS: ffs})
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Append(bg, []Record{itemRec(t, "c", "after reopen")}, AppendOptions{})
	if err != nil || res.FirstSeq != last+1 {
		t.Fatalf("after reopen: seq %d (%v), want %d: a seq was reused or skipped", res.FirstSeq, err, last+1)
	}
	w.Close()
}

// The thread_opened frame is synced before the file appears, so its loss
// is never a torn write: Open refuses rather than hand out seq 1 again.
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

// Crafted inputs that once made the reader quadratic read correctly: a
// long run of frames whose seqs skip, and overlapping headers that check
// with payloads that do not.
func TestReaderCraftedInputs(t *testing.T) {
	h := newFileHeader("t1", fixedTime)
	b := h.marshal()
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

	b = h.marshal()
	const size = 1 << 20
	for i := 0; i < size/2/FrameHeaderSize; i++ {
		var fh [FrameHeaderSize]byte
		(&FrameHeader{Count: 1, Length: size / 2, RawLen: size / 2, FileID: h.FileID, Seq: uint64(i + 1), DataCRC: 1}).put(fh[:])
		b = append(b, fh[:]...)
	}
	b = append(b, bytes.Repeat([]byte{1}, size/2)...)
	r, got = readAll(t, b)
	if len(got) != 0 || r.TornTail() == nil || r.TornTail().Offset != FileHeaderSize {
		t.Fatalf("overlapping bad frames: %d records, torn %v, damage %d", len(got), r.TornTail(), len(r.Damage()))
	}
}
