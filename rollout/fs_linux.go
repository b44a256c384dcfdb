//go:build linux

package rollout

import (
	"os"
	"syscall"
	"time"
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

// dirStamp is a directory's version token (device, inode, modification
// and change times) and the later of its two times.
func dirStamp(fi os.FileInfo) ([4]int64, time.Time) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return [4]int64{fi.ModTime().UnixNano()}, fi.ModTime()
	}
	m, c := time.Unix(st.Mtim.Unix()), time.Unix(st.Ctim.Unix())
	latest := m
	if c.After(m) {
		latest = c
	}
	return [4]int64{int64(st.Dev), int64(st.Ino), m.UnixNano(), c.UnixNano()}, latest
}
