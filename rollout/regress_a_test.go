package rollout

import (
	"os"
	"testing"

	"github.com/rolloutdb/rolloutdb/vfs"
)

// Two unsynced frames at the end, both torn in their payload but with their
// headers intact (assumptions 1+2). Nothing valid follows either, so both are
// a torn tail. Open must cut them and continue at the first lost seq.
func TestReviewTwoTornFramesAtTail(t *testing.T) {
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
