package vfs

import (
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"path/filepath"
	"syscall"

	"github.com/cockroachdb/errors"
)

// The helpers below are the few ways rolloutdb puts a whole file on disk.
// Each says what a crash may leave.

// TempPrefix starts the name of every temporary file the helpers make: a
// crash may leave one behind, and a sweep (artifacts' GC) knows it by it.
const TempPrefix = ".tmp-"

// WriteTemp writes b to a new temporary file in dir and syncs it, and
// returns its path. The caller links or renames it into place (and syncs
// dir), or removes it.
func WriteTemp(fsys FS, dir string, b []byte) (string, error) {
	var r [8]byte
	_, _ = rand.Read(r[:])
	tmp := filepath.Join(dir, TempPrefix+hex.EncodeToString(r[:]))
	f, err := fsys.Create(tmp)
	if err != nil {
		return "", err
	}
	_, err = f.WriteAt(b, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = fsys.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// WriteFileAtomic replaces path with b durably: a temporary file, synced,
// renamed over path, and the directory synced. A crash leaves the old
// content or the new, never a mix.
func WriteFileAtomic(fsys FS, path string, b []byte) error {
	tmp, err := WriteTemp(fsys, filepath.Dir(path), b)
	if err == nil {
		if err = fsys.Rename(tmp, path); err != nil {
			_ = fsys.Remove(tmp)
		}
	}
	if err == nil {
		err = fsys.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		return errors.Wrapf(err, "write %s", path)
	}
	return nil
}

// CreateFile puts b at path durably if path does not exist (a temporary
// file, synced, linked to path, and the directory synced), and fails with
// fs.ErrExist if it does: it never overwrites. A crash leaves path whole
// or absent (and maybe a temporary file).
func CreateFile(fsys FS, path string, b []byte) error {
	dir := filepath.Dir(path)
	tmp, err := WriteTemp(fsys, dir, b)
	if err != nil {
		return err
	}
	defer fsys.Remove(tmp)
	if err := fsys.Link(tmp, path); err != nil {
		return err
	}
	return fsys.SyncDir(dir)
}

// ReadFile reads a whole file of at most max bytes; a larger one is
// refused before anything is read.
func ReadFile(fsys FS, path string, max int64) ([]byte, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if size > max {
		return nil, errors.Newf("%s: %d bytes, more than the %d expected", path, size, max)
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && size > 0 {
		return nil, err
	}
	return b, nil
}

// Walk calls fn for every regular file under dir, in lexical order,
// without following links: dir itself too must be a directory, not a
// link to one (a link planted there would lead a sweep outside the data
// directory). A dir that does not exist is walked as empty.
func Walk(fsys FS, dir string, fn func(path string, info Info) error) error {
	if info, err := fsys.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	} else if !info.Dir {
		return nil
	}
	names, err := fsys.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, n := range names {
		p := filepath.Join(dir, n)
		info, err := fsys.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // gone meanwhile
		}
		if err != nil {
			return err
		}
		switch {
		case info.Dir:
			if err := Walk(fsys, p, fn); err != nil {
				return err
			}
		case info.Regular:
			if err := fn(p, info); err != nil {
				return err
			}
		}
	}
	return nil
}

// RemoveAll removes path and, if it is a directory, all it holds, without
// following links. A path that does not exist is not an error.
func RemoveAll(fsys FS, path string) error {
	info, err := fsys.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if info.Dir {
		names, err := fsys.ReadDir(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		for _, n := range names {
			if err := RemoveAll(fsys, filepath.Join(path, n)); err != nil {
				return err
			}
		}
	}
	if err := fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// WithPath wraps err with a message that names the path. An *fs.PathError
// (what the os package returns) is unwrapped first, so that the path is
// named once: "write <path>: no space left on device", not "write <path>:
// write <path>: no space left on device". The cause (errors.Is) is kept.
func WithPath(err error, format string, args ...any) error {
	if pe, ok := err.(*fs.PathError); ok {
		err = pe.Err
	}
	return errors.Wrapf(err, format, args...)
}

// WriteError is the error of a failed or short write to path, with a hint
// when the disk is full.
func WriteError(path string, err error) error {
	if err == nil {
		err = errors.New("short write")
	}
	err = WithPath(err, "write %s", path)
	if errors.Is(err, syscall.ENOSPC) {
		err = errors.WithHint(err, "the disk is full: nothing was acknowledged; free space and retry")
	}
	return err
}
