package artifacts

import (
	"path/filepath"

	"github.com/rolloutdb/rolloutdb/vfs"
)

// RemoveAll removes rel (relative to the data directory, under one of the
// artifact directories: a deleted thread's tool-results/<id> or
// terminals/<id>), a file or a directory tree, keeping the files whose
// path is in keep (and the directories holding them): GC takes them once
// unreferenced. A symbolic link is removed, never followed.
func (s *Store) RemoveAll(rel string, keep map[string]bool) error {
	path, err := join(s.root, rel)
	if err != nil {
		return err
	}
	return s.removeAll(path, keep)
}

func (s *Store) removeAll(path string, keep map[string]bool) error {
	if info, err := s.fs.Lstat(path); err == nil && !info.Dir && !info.Regular {
		return s.fs.Remove(path) // a link (or a device): never followed
	}
	names, err := s.fs.ReadDir(path)
	if err != nil {
		// Not a directory: a file, or nothing.
		if keep[s.rel(path)] {
			return nil
		}
		if err := s.fs.Remove(path); err != nil && !vfs.IsNotExist(err) {
			return err
		}
		return nil
	}
	for _, n := range names {
		if err := s.removeAll(filepath.Join(path, n), keep); err != nil {
			return err
		}
	}
	if left, _ := s.fs.ReadDir(path); len(left) > 0 {
		return nil // kept files stay
	}
	if err := s.fs.Remove(path); err != nil && !vfs.IsNotExist(err) {
		return err
	}
	return nil
}
