package rollout

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/errors"
)

// Found by the crash harness's fault mode: Create links the new rollout,
// then its directory sync fails (EIO), so Create fails and the name is not
// durable. The host retries: Create says the thread exists, so it opens
// it, and its appends are acknowledged. Open synced the file but not the
// directory, so a power cut then took the whole rollout, acknowledged
// records and all. Open now syncs the directory too.
func TestOpenMakesTheNameOfAFailedCreateDurable(t *testing.T) {
	for seed := uint64(0); seed < 10; seed++ {
		mem := NewMemFS()
		fail := true
		fs := &FaultFS{FS: mem, Hook: func(op Op, name string) error {
			if fail && op == OpSyncDir {
				return syscall.EIO
			}
			return nil
		}}
		if err := mem.MkdirAll("/ws"); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("/ws", "t1"+RolloutExt)
		if _, err := Create(bg, path, opened("t1"), Options{FS: fs}); err == nil {
			t.Fatal("Create succeeded though its directory sync failed")
		}
		fail = false
		if _, err := Create(bg, path, opened("t1"), Options{FS: fs}); !errors.Is(err, ErrThreadExists) {
			t.Fatalf("Create again: %v, want ErrThreadExists", err)
		}
		w, _, err := Open(bg, path, "t1", Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		res, err := w.Append(bg, []Record{itemRec(t, "u1", "acknowledged")}, AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
		cut := mem.Crash(rand.New(rand.NewPCG(seed, 1)), false)
		f, err := cut.Open(path)
		if err != nil {
			t.Fatalf("seed %d: after a power cut the rollout with an acknowledged append is gone: %v", seed, err)
		}
		size, _ := f.Size()
		b := make([]byte, size)
		f.ReadAt(b, 0)
		f.Close()
		if _, recs := readAll(t, b); len(recs) != 2 || recs[1].Seq != res.LastSeq || !strings.Contains(string(recs[1].Body), "acknowledged") {
			t.Fatalf("seed %d: %d records", seed, len(recs))
		}
	}
}
