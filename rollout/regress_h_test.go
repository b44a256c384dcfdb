package rollout

import (
	"bytes"
	stderrors "errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// Found by the crash harness's fault mode: Create links the new rollout,
// then its directory sync fails (EIO), so Create fails and the name is not
// durable. The host retries: Create says the thread exists, so it opens
// it, and its appends are acknowledged. Open synced the file but not the
// directory, so a power cut then took the whole rollout, acknowledged
// records and all. Open now syncs the directory too.
func TestOpenMakesTheNameOfAFailedCreateDurable(t *testing.T) {
	for seed := uint64(0); seed < 10; seed++ {
		mem := vfs.NewMemFS()
		fail := true
		fs := &vfs.FaultFS{FS: mem, Hook: func(op vfs.Op, name string) error {
			if fail && op == vfs.OpSyncDir {
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

// A rollout that is a symbolic link (to a file outside the data
// directory, planted in a cloned repository, say) is never opened through
// the link: neither to write (Open would cut and append to the target)
// nor to read.
func TestSymlinkedRolloutIsRefused(t *testing.T) {
	dir := t.TempDir()
	w, target := newRollout(t, vfs.OS, filepath.Join(dir, "elsewhere"), "t1", Options{})
	w.Close()
	link := filepath.Join(dir, "t1"+RolloutExt)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	before := mustRead(t, target)
	if _, _, err := Open(bg, link, "t1", Options{}); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("Open through a link: %v", err)
	}
	if _, err := vfs.OS.Open(link); err == nil {
		t.Fatal("read through a link")
	}
	if !bytes.Equal(before, mustRead(t, target)) {
		t.Fatal("the link's target changed")
	}
}

// Found by the crash harness: ErrNotDurable was an errors.Mark, which only
// cockroachdb's errors.Is sees. A host using the standard library's
// errors.Is did not recognise a failed fsync. Both see it now, and the
// cause.
func TestNotDurableMatchesTheStandardErrorsIs(t *testing.T) {
	mem := vfs.NewMemFS()
	fail := false
	fs := &vfs.FaultFS{FS: mem, Hook: func(op vfs.Op, _ string) error {
		if fail && op == vfs.OpSync {
			return syscall.EIO
		}
		return nil
	}}
	if err := mem.MkdirAll("/ws"); err != nil {
		t.Fatal(err)
	}
	w, err := Create(bg, "/ws/t1.rollout", opened("t1"), Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fail = true
	_, err = w.Append(bg, []Record{itemRec(t, "u", "x")}, AppendOptions{})
	if !errors.Is(err, ErrNotDurable) || !stderrors.Is(err, ErrNotDurable) || !stderrors.Is(err, syscall.EIO) {
		t.Fatalf("append with a failing fsync: %v: cockroachdb Is %v, standard Is %v, cause %v", err,
			errors.Is(err, ErrNotDurable), stderrors.Is(err, ErrNotDurable), stderrors.Is(err, syscall.EIO))
	}
}
