package rollout

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/vfs"
)

var bg = context.Background()

func opened(id string) ThreadOpened {
	return ThreadOpened{ThreadID: id, WorkspaceID: "ws-1", Source: Source{Kind: SourceUser}}
}

// itemRec builds an item record of a given text.
func itemRec(t testing.TB, turn, text string) Record {
	t.Helper()
	r, err := NewRecord(KindItemAppended, turn, Item{ID: NewID(), Type: ItemAgentMessage, Status: ItemCompleted, Text: text})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// newRollout creates a rollout at dir/<id>.rollout.
func newRollout(t testing.TB, fsys vfs.FS, dir, id string, opts Options) (*Writer, string) {
	t.Helper()
	if err := fsys.MkdirAll(dir); err != nil {
		t.Fatal(err)
	}
	opts.FS = fsys
	path := filepath.Join(dir, id+RolloutExt)
	w, err := Create(bg, path, opened(id), opts)
	if err != nil {
		t.Fatal(err)
	}
	return w, path
}

// frameInfo is a frame's place in a file.
type frameInfo struct {
	off, end    int64
	first, last uint64
	payloadOff  int64
}

// buildFile writes a rollout of nFrames frames after the header frame, each
// with perFrame records, to a real temp file, and returns its bytes and
// frame layout (frame 0 is the header record's frame).
func buildFile(t testing.TB, nFrames, perFrame int, compressAbove int) (path string, data []byte, frames []frameInfo) {
	t.Helper()
	// SyncAlways, so each frame records the one before it as durable:
	// damage to any frame but the last is then acknowledged data lost
	// (mid-file damage), not a torn write.
	return buildFileSync(t, nFrames, perFrame, compressAbove, SyncAlways)
}

// buildFileSync is buildFile written under the given sync policy.
func buildFileSync(t testing.TB, nFrames, perFrame int, compressAbove int, sync SyncPolicy) (path string, data []byte, frames []frameInfo) {
	t.Helper()
	dir := t.TempDir()
	w, path := newRollout(t, vfs.OS, dir, "t1", Options{Sync: sync, CompressAbove: compressAbove})
	frames = append(frames, frameInfo{off: FileHeaderSize, end: w.End(), first: 1, last: 1, payloadOff: FileHeaderSize + FrameHeaderSize})
	for i := 0; i < nFrames; i++ {
		recs := make([]Record, perFrame)
		for j := range recs {
			recs[j] = itemRec(t, fmt.Sprintf("turn-%d", i), fmt.Sprintf("frame %d record %d %s", i, j, bytes.Repeat([]byte("x"), 20)))
		}
		res, err := w.Append(bg, recs, AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, frameInfo{off: res.Offset, end: res.End, first: res.FirstSeq, last: res.LastSeq, payloadOff: res.Offset + FrameHeaderSize})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, data, frames
}

// readAll reads every surviving record of the bytes b.
func readAll(t testing.TB, b []byte) (*Reader, []Record) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(b), int64(len(b)), ReaderOptions{Path: "mem"})
	if err != nil {
		t.Fatal(err)
	}
	var recs []Record
	for r.Next() {
		recs = append(recs, r.Record())
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return r, recs
}

func seqs(recs []Record) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.Seq
	}
	return out
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func without(all []uint64, drop ...uint64) []uint64 {
	m := map[uint64]bool{}
	for _, d := range drop {
		m[d] = true
	}
	var out []uint64
	for _, s := range all {
		if !m[s] {
			out = append(out, s)
		}
	}
	return out
}

var fixedTime = time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func asCorruption(err error, target **CorruptionError) bool {
	return err != nil && errorsAs(err, target)
}
