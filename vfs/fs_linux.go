//go:build linux

package vfs

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

// Local file systems whose directory timestamps come from this machine's
// clock at nanosecond resolution when their format allows it (statfs
// magic numbers). Anything else (a network or FUSE file system, FAT)
// keeps RacyWindow.
var fineFS = map[int64]bool{
	0xEF53:     true, // ext2, ext3, ext4
	0x58465342: true, // xfs
	0x9123683E: true, // btrfs
	0x01021994: true, // tmpfs
	0xF2F52010: true, // f2fs
	0x794C7630: true, // overlayfs
	0x2FC12FC1: true, // zfs
	0xCA451A4E: true, // bcachefs
}

// racyWindowOf is dir's racy window: FineRacyWindow on a local file system
// of fineFS whose stamps (tok's modification and change times) show a
// resolution finer than a millisecond, RacyWindow otherwise. (ext4 with
// 128-byte inodes keeps whole seconds: its stamps end in zeros.)
//
// The file system is asked at every version (a statfs, beside the stat):
// a cache by device number would outlive a mount, and anonymous device
// numbers (tmpfs, overlayfs, NFS, FUSE) are reused by the next.
func racyWindowOf(dir string, tok [4]int64) time.Duration {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return RacyWindow
	}
	return fineWindow(fineFS[int64(st.Type)], tok[2], tok[3])
}

// fineWindow decides from what a file system is and the stamps it gave
// (unix nanoseconds).
func fineWindow(fine bool, mtime, ctime int64) time.Duration {
	const ms = int64(time.Millisecond)
	if fine && (mtime%ms != 0 || ctime%ms != 0) {
		return FineRacyWindow
	}
	return RacyWindow
}
