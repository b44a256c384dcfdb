package vfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// DirVersion is what a file system says about a directory's entries at one
// moment, so that a reader can tell, without listing it, that no name was
// created, removed or renamed in it since an earlier look: two equal
// versions of one directory, the earlier of them settled, mean exactly
// that.
//
// A version that is not settled may equal a later one even though names
// changed in between (a change within the granularity of the directory's
// timestamps: git's "racily clean" case); the reader must list the
// directory and look again later.
type DirVersion struct {
	token [4]int64
	// changed is when the directory last changed (zero: the file system
	// versions exactly, and every version is settled).
	changed time.Time
	// window is how old changed must be for the version to be settled
	// (zero: RacyWindow).
	window time.Duration
}

// Settled reports whether the version can be trusted at now: its last
// change is older than its file system's racy window (RacyWindow, or
// FineRacyWindow where timestamps are known to be fine).
func (v DirVersion) Settled(now time.Time) bool {
	w := v.window
	if w == 0 {
		w = RacyWindow
	}
	return v.changed.IsZero() || now.Sub(v.changed) > w
}

// Same reports whether v and w are the same version of a directory.
func (v DirVersion) Same(w DirVersion) bool { return v.token == w.token }

// String is the version as text, for keeping it: equal strings, equal
// versions.
func (v DirVersion) String() string {
	return fmt.Sprintf("%x.%x.%x.%x", v.token[0], v.token[1], v.token[2], v.token[3])
}

// DirVersioner is an FS that can version its directories (OS and MemFS
// can). An FS that cannot is listed at every look.
type DirVersioner interface {
	DirVersion(dir string) (DirVersion, error)
}

// VersionOf returns fsys's version of dir; ok is false when fsys cannot
// version directories.
func VersionOf(fsys FS, dir string) (v DirVersion, ok bool, err error) {
	dv, ok := fsys.(DirVersioner)
	if !ok {
		return DirVersion{}, false, nil
	}
	v, err = dv.DirVersion(dir)
	return v, err == nil, err
}

// RacyWindow is how old a directory's last change must be before its
// version is Settled. A change to a directory's entries stamps its
// modification and change times from the kernel's clock, whose granularity
// is a scheduler tick on Linux and a second or two on some file systems;
// two seconds covers both. (A network file system's server clock must be
// within that of this machine's.)
const RacyWindow = 2 * time.Second

// FineRacyWindow is the racy window of a local file system whose
// timestamps keep the kernel clock's full resolution (ext4 with large
// inodes, xfs, btrfs, tmpfs...: see fineWindow): their granularity is a
// scheduler tick (10 ms at the lowest usual HZ), stamped by this machine's
// own clock. A directory that a host changes every second or so (threads
// made, archived) would otherwise never settle, and every read would list
// it.
const FineRacyWindow = 50 * time.Millisecond

// DirVersion implements DirVersioner: the directory's device, inode,
// modification and change times (the change time cannot be set back by
// hand, so a restored directory's copied timestamps do not fool it).
func (osFS) DirVersion(dir string) (DirVersion, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return DirVersion{}, err
	}
	tok, changed := dirStamp(fi)
	if changed.IsZero() {
		changed = time.Unix(0, 1) // (zero means exact)
	}
	return DirVersion{token: tok, changed: changed, window: racyWindowOf(dir, tok)}, nil
}

// DirVersion implements DirVersioner with a counter of the changes to the
// directory's entries: exact, so always Settled.
func (m *MemFS) DirVersion(dir string) (DirVersion, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.crashed {
		return DirVersion{}, ErrCrashed
	}
	d, ok := m.dirs[filepath.Clean(dir)]
	if !ok {
		return DirVersion{}, &fs.PathError{Op: "stat", Path: dir, Err: fs.ErrNotExist}
	}
	return DirVersion{token: [4]int64{m.lineage, d.changes}}, nil
}

// DirVersion implements DirVersioner when the wrapped FS does.
func (f *FaultFS) DirVersion(dir string) (DirVersion, error) {
	v, ok, err := VersionOf(f.FS, dir)
	if err == nil && !ok {
		// Not versioned: a version that never settles makes every look
		// list the directory, as without one.
		return DirVersion{token: [4]int64{time.Now().UnixNano()}, changed: time.Now().Add(time.Hour * 24 * 365 * 100)}, nil
	}
	return v, err
}
