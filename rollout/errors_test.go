package rollout

import (
	stderrors "errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/vfs"
)

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// An error from the file system names its path once, and keeps its cause.
func TestErrorsNameTheirPathOnce(t *testing.T) {
	path := "/ws/threads/active/t1.rollout"
	err := writeError(path, &fs.PathError{Op: "write", Path: path, Err: syscall.ENOSPC})
	if got := err.Error(); strings.Count(got, path) != 1 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("%q (ENOSPC: %v)", got, errors.Is(err, syscall.ENOSPC))
	}
	err = withPath(&fs.PathError{Op: "open", Path: path, Err: syscall.ENOENT}, "open %s", path)
	if strings.Count(err.Error(), path) != 1 || !vfs.IsNotExist(err) {
		t.Fatalf("%q", err)
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
