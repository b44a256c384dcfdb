package rollout

import (
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
