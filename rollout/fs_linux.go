//go:build linux

package rollout

import (
	"os"
	"syscall"
)

// fdatasync flushes data and the size, not the timestamps: what an appender
// needs, at a lower cost than fsync.
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}
