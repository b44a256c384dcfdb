package vfs

import "github.com/cockroachdb/errors"

// Op names a file-system operation for fault injection.
type Op string

// Operations a FaultFS can fail.
const (
	OpCreate   Op = "create"
	OpOpen     Op = "open"
	OpWrite    Op = "write"
	OpSync     Op = "sync"
	OpTruncate Op = "truncate"
	OpLink     Op = "link"
	OpRename   Op = "rename"
	OpRemove   Op = "remove"
	OpSyncDir  Op = "syncdir"
)

// ShortWrite, returned by a FaultFS hook for OpWrite, writes the first N
// bytes and then fails with Err (a disk that filled up mid-write).
type ShortWrite struct {
	N   int
	Err error
}

func (s *ShortWrite) Error() string { return "short write: " + s.Err.Error() }
func (s *ShortWrite) Unwrap() error { return s.Err }

// FaultFS wraps an FS and asks Hook before each operation: a non-nil error
// fails the operation (without doing it, except for a *ShortWrite).
type FaultFS struct {
	FS
	Hook func(op Op, name string) error
}

func (f *FaultFS) fault(op Op, name string) error {
	if f.Hook == nil {
		return nil
	}
	return f.Hook(op, name)
}

// Create implements FS.
func (f *FaultFS) Create(name string) (File, error) {
	if err := f.fault(OpCreate, name); err != nil {
		return nil, err
	}
	file, err := f.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f, name: name}, nil
}

// Open implements FS.
func (f *FaultFS) Open(name string) (File, error) {
	if err := f.fault(OpOpen, name); err != nil {
		return nil, err
	}
	file, err := f.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f, name: name}, nil
}

// OpenRW implements FS.
func (f *FaultFS) OpenRW(name string) (File, error) {
	if err := f.fault(OpOpen, name); err != nil {
		return nil, err
	}
	file, err := f.FS.OpenRW(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f, name: name}, nil
}

// Link implements FS.
func (f *FaultFS) Link(o, n string) error {
	if err := f.fault(OpLink, n); err != nil {
		return err
	}
	return f.FS.Link(o, n)
}

// Rename implements FS.
func (f *FaultFS) Rename(o, n string) error {
	if err := f.fault(OpRename, n); err != nil {
		return err
	}
	return f.FS.Rename(o, n)
}

// Remove implements FS.
func (f *FaultFS) Remove(name string) error {
	if err := f.fault(OpRemove, name); err != nil {
		return err
	}
	return f.FS.Remove(name)
}

// SyncDir implements FS.
func (f *FaultFS) SyncDir(dir string) error {
	if err := f.fault(OpSyncDir, dir); err != nil {
		return err
	}
	return f.FS.SyncDir(dir)
}

type faultFile struct {
	File
	fs   *FaultFS
	name string
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.fault(OpWrite, f.name); err != nil {
		var sw *ShortWrite
		if errors.As(err, &sw) {
			n := min(max(sw.N, 0), len(p))
			if _, werr := f.File.WriteAt(p[:n], off); werr != nil {
				return 0, werr
			}
			return n, sw.Err
		}
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *faultFile) Sync() error {
	if err := f.fs.fault(OpSync, f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultFile) Truncate(size int64) error {
	if err := f.fs.fault(OpTruncate, f.name); err != nil {
		return err
	}
	return f.File.Truncate(size)
}
