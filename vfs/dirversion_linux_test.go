//go:build linux

package vfs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A directory's racy window follows what its file system stamps: a local
// file system with fine stamps settles after FineRacyWindow; whole
// seconds, coarse stamps or a file system not known to be local keep
// RacyWindow.
func TestRacyWindowFollowsTheFileSystem(t *testing.T) {
	for _, c := range []struct {
		fine         bool
		mtime, ctime int64
		want         time.Duration
	}{
		{true, 1_700_000_000_123_456_789, 1_700_000_000_123_456_789, FineRacyWindow},
		{true, 1_700_000_000_000_000_000, 1_700_000_000_004_000_001, FineRacyWindow},
		{true, 1_700_000_000_000_000_000, 1_700_000_000_000_000_000, RacyWindow},  // ext4 with 128-byte inodes
		{true, 1_700_000_000_010_000_000, 1_700_000_000_020_000_000, RacyWindow},  // 10 ms stamps
		{false, 1_700_000_000_123_456_789, 1_700_000_000_123_456_789, RacyWindow}, // nfs, fuse...
	} {
		if got := fineWindow(c.fine, c.mtime, c.ctime); got != c.want {
			t.Errorf("fineWindow(%v, %d, %d) = %v, want %v", c.fine, c.mtime, c.ctime, got, c.want)
		}
	}

	// This machine's temporary directory: the window its file system gets,
	// and a version settled after it and not before.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	v, _, err := VersionOf(OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	want := RacyWindow
	if fineFS[int64(st.Type)] && (v.token[2]%1e6 != 0 || v.token[3]%1e6 != 0) {
		want = FineRacyWindow
	}
	if v.window != want {
		t.Fatalf("%s (file system %#x): racy window %v, want %v", dir, st.Type, v.window, want)
	}
	if v.Settled(v.changed.Add(want - time.Millisecond)) {
		t.Fatalf("settled %v after its change, within its window %v", want-time.Millisecond, want)
	}
	if !v.Settled(v.changed.Add(want + time.Millisecond)) {
		t.Fatalf("not settled %v after its change, past its window %v", want+time.Millisecond, want)
	}
}
