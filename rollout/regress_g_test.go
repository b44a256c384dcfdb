package rollout

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/rolloutdb/rolloutdb/vfs"
)

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
