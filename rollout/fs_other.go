//go:build !linux

package rollout

import "os"

// fdatasync falls back to fsync (on darwin Go's Sync is F_FULLFSYNC).
func fdatasync(f *os.File) error { return f.Sync() }
