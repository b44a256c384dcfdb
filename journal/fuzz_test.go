package journal

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// FuzzJournalReplay: any bytes as the segment of a dead journal, replayed
// into a rollout. Replay must not panic or fail on what it reads, and the
// rollout must come out readable with its records untouched: an entry is
// written back only where it extends the rollout intact.
func FuzzJournalReplay(f *testing.F) {
	r := newJRig(f, 64<<10)
	w := r.create("a")
	path, _ := rollout.ActivePath(jroot, "a")
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
		for _, d := range []string{filepath.Join(jroot, rollout.ActiveDir), filepath.Join(jroot, Dir)} {
			if err := mem.MkdirAll(d); err != nil {
				t.Fatal(err)
			}
		}
		writeFile(t, mem, path, base)
		writeFile(t, mem, journalPath(jroot, segName), b)
		if _, err := Recover(bg, mem, jroot); err != nil {
			t.Fatalf("replay of damaged input failed: %v", err)
		}
		got := readFileFS(t, mem, path)
		if !bytes.HasPrefix(got, base) {
			t.Fatal("replay changed the rollout's records")
		}
		rd, err := rollout.NewReader(bytes.NewReader(got), int64(len(got)), rollout.ReaderOptions{})
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
