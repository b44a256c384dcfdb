//go:build unix

package vfs

import (
	"os"
	"syscall"

	"github.com/cockroachdb/errors"
)

// flock takes a BSD lock, which belongs to the open file description: a
// second open of the same file conflicts with it even in the same process,
// which is what "one writer per thread" needs.
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case err == syscall.EINTR:
			continue
		case err == syscall.EWOULDBLOCK:
			return errors.WithHint(errors.Wrapf(ErrLocked, "%s", f.Name()),
				"another process (or another writer in this one) has it open; close it first")
		default:
			return errors.Wrapf(err, "lock %s", f.Name())
		}
	}
}

// oNoFollow refuses to open a symbolic link: a rollout linked to a file
// outside the data directory (planted in a cloned repository, say) is
// never written, truncated or read through the link.
const oNoFollow = syscall.O_NOFOLLOW

// isLinkRefusal tells the error O_NOFOLLOW gives for a link.
func isLinkRefusal(err error) bool { return errors.Is(err, syscall.ELOOP) }
