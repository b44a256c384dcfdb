package rollout

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
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
