//go:build !linux

package vfs

import (
	"os"
	"time"
)

// fdatasync falls back to fsync (on darwin Go's Sync is F_FULLFSYNC).
func fdatasync(f *os.File) error { return f.Sync() }

// dirStamp is a directory's version token: its modification time and
// size, which is what is portable (Linux adds the inode and change time).
func dirStamp(fi os.FileInfo) ([4]int64, time.Time) {
	return [4]int64{fi.ModTime().UnixNano(), fi.Size()}, fi.ModTime()
}

// racyWindowOf is RacyWindow: what a file system's timestamps are is not
// looked up here.
func racyWindowOf(string, [4]int64) time.Duration { return RacyWindow }
