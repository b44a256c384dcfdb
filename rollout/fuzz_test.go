package rollout

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rolloutdb/rolloutdb/vfs"
)

// seedCorpus adds the fixtures of testdata/corrupt/ (damaged rollouts made
// by the recovery fixtures' generator) and a few files made here.
func seedCorpus(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("..", "testdata", "corrupt", "*.rollout"))
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, compress := range []int{-1, 64} {
		_, data, frames := buildFile(f, 3, 2, compress)
		f.Add(data)
		f.Add(data[:frames[2].off+20])
		f.Add(flip(data, frames[1].payloadOff+1))
	}
}

// FuzzReader: any bytes as a rollout file. The reader must not panic, hang
// or allocate without bound, and what it yields must be consistent:
// ascending seqs and every damage region inside the file.
func FuzzReader(f *testing.F) {
	seedCorpus(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := NewReader(bytes.NewReader(b), int64(len(b)), ReaderOptions{})
		if err != nil {
			return
		}
		var last uint64
		for r.Next() {
			rec := r.Record()
			if rec.Seq <= last {
				t.Fatalf("seq %d after %d", rec.Seq, last)
			}
			last = rec.Seq
			_, _ = rec.DecodeBody() // bodies come from the fuzzer too
		}
		for _, d := range r.Damage() {
			if d.Offset < FileHeaderSize || d.Offset+d.Length > int64(len(b)) {
				t.Fatalf("damage outside the file: %+v", d)
			}
		}
		if r.End() > int64(len(b)) {
			t.Fatalf("end %d past size %d", r.End(), len(b))
		}
	})
}

// FuzzDecodeFrame: any bytes as one frame.
func FuzzDecodeFrame(f *testing.F) {
	_, data, frames := buildFile(f, 2, 3, -1)
	for _, fr := range frames {
		f.Add(data[fr.off:fr.end])
	}
	_, data, frames = buildFile(f, 2, 3, 64)
	f.Add(data[frames[1].off:frames[1].end])
	f.Fuzz(func(t *testing.T, b []byte) {
		h, recs, err := DecodeFrame(b, 0)
		if err != nil {
			return
		}
		if len(recs) != h.Count || h.Length > MaxFrameSize {
			t.Fatalf("decoded %d records for count %d", len(recs), h.Count)
		}
		// A frame that decodes re-encodes to one that decodes the same.
		out, err := encodeFrame(nil, h.FileID, h.Durable, recs, -1)
		if err != nil {
			return // e.g. a kind over the writer's limits
		}
		_, again, err := DecodeFrame(out, h.FileID)
		if err != nil || len(again) != len(recs) {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		for i := range recs {
			if again[i].Kind != recs[i].Kind || !bytes.Equal(again[i].Body, recs[i].Body) || again[i].Seq != recs[i].Seq {
				t.Fatalf("record %d changed on re-encode", i)
			}
		}
	})
}

// FuzzJournalReplay: any bytes as the segment of a dead journal, replayed
// into a rollout. Replay must not panic or fail on what it reads, and the
// rollout must come out readable with its records untouched: an entry is
// written back only where it extends the rollout intact.
func FuzzJournalReplay(f *testing.F) {
	r := newJRig(f, 64<<10)
	w := r.create("a")
	path, _ := ActivePath(jroot, "a")
	base := readFileFS(f, r.mem, path) // the header frame only
	for k := range 3 {
		if err := r.appendText(w, fmt.Sprint("entry ", k)); err != nil {
			f.Fatal(err)
		}
	}
	segName := segmentName(r.j.ID(), 1)
	seg := readFileFS(f, r.mem, journalPath(jroot, segName))
	end := bytes.LastIndex(seg, []byte("entry 2")) + 16
	f.Add(seg[:end])
	f.Add(seg[:end-30])
	f.Add(flip(seg[:end], int64(end-5)))
	f.Fuzz(func(t *testing.T, b []byte) {
		mem := vfs.NewMemFS()
		for _, d := range []string{filepath.Join(jroot, ActiveDir), filepath.Join(jroot, JournalDir)} {
			if err := mem.MkdirAll(d); err != nil {
				t.Fatal(err)
			}
		}
		writeFile(t, mem, path, base)
		writeFile(t, mem, journalPath(jroot, segName), b)
		if _, err := RecoverJournals(bg, mem, jroot); err != nil {
			t.Fatalf("replay of damaged input failed: %v", err)
		}
		got := readFileFS(t, mem, path)
		if !bytes.HasPrefix(got, base) {
			t.Fatal("replay changed the rollout's records")
		}
		rd, err := NewReader(bytes.NewReader(got), int64(len(got)), ReaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for rd.Next() {
		}
		if len(rd.Damage()) > 0 {
			t.Fatalf("replay left damage: %v", rd.Damage())
		}
	})
}

func readFileFS(t testing.TB, fsys vfs.FS, path string) []byte {
	t.Helper()
	f, err := fsys.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, _ := f.Size()
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, fsys vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fsys.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
}
