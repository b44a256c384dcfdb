//go:build !unix

package vfs

import (
	"os"

	"github.com/cockroachdb/errors"
)

// flock is not implemented off unix: without it "one writer per thread"
// cannot be promised, so opening a writer fails rather than risk two.
func flock(f *os.File) error {
	return errors.Newf("rollout: file locking is not supported on this platform (%s)", f.Name())
}

const oNoFollow = 0

func isLinkRefusal(error) bool { return false }
