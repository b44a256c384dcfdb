package vfs

import (
	"io"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
)

// FS is the file-system seam: every file operation of the package goes
// through it, so tests can inject short writes, failed fsyncs, a full disk,
// or a crash that keeps a random part of what was not synced (see MemFS and
// FaultFS). OS is the real one.
type FS interface {
	// Create makes a new file for reading and writing; it fails with
	// fs.ErrExist if the name exists.
	Create(name string) (File, error)
	// Open opens an existing file read-only.
	Open(name string) (File, error)
	// OpenRW opens an existing file for reading and writing.
	OpenRW(name string) (File, error)
	// Link makes newname a second name of oldname; fs.ErrExist if newname
	// exists. It is the atomic "publish unless present" used by Create.
	Link(oldname, newname string) error
	// Rename renames a file, replacing what newname names, or a
	// directory, to a name that does not exist.
	Rename(oldname, newname string) error
	// Remove removes a file or an empty directory.
	Remove(name string) error
	MkdirAll(dir string) error
	// SyncDir makes the directory's entries (creates, renames, removes)
	// durable.
	SyncDir(dir string) error
	// ReadDir lists the names in a directory, sorted.
	ReadDir(dir string) ([]string, error)
	// Stat returns the size of a file.
	Stat(name string) (int64, error)
	// Lstat describes a file or directory, without following a link.
	Lstat(name string) (Info, error)
}

// Info describes a directory entry (FS.Lstat).
type Info struct {
	Size    int64
	Dir     bool
	Regular bool // a regular file: not a directory, link or device
	ModTime time.Time
}

// File is an open file of an FS.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes the file's data and size durable (fdatasync).
	Sync() error
	Truncate(size int64) error
	Size() (int64, error)
	// Lock takes an exclusive, non-blocking lock on the file, held until
	// Close. It fails with ErrLocked if another open file holds it, in this
	// process or another.
	Lock() error
}

// ErrLocked is returned by File.Lock when another open file holds the
// lock.
var ErrLocked = errors.New("vfs: locked by another writer")

// OS is the operating system's file system.
var OS FS = osFS{}

type osFS struct{}

type osFile struct{ *os.File }

func (osFS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Open(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|oNoFollow, 0)
	if err != nil {
		return nil, linkError(name, err)
	}
	return osFile{f}, nil
}

func (osFS) OpenRW(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|oNoFollow, 0)
	if err != nil {
		return nil, linkError(name, err)
	}
	return osFile{f}, nil
}

// linkError says why a symbolic link was not opened.
func linkError(name string, err error) error {
	if isLinkRefusal(err) {
		return errors.WithHint(errors.Newf("%s is a symbolic link; rolloutdb does not follow links out of its data directory", name),
			"replace the link with the file itself (or remove it)")
	}
	return err
}

func (osFS) Link(oldname, newname string) error   { return os.Link(oldname, newname) }
func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }
func (osFS) Remove(name string) error             { return os.Remove(name) }
func (osFS) MkdirAll(dir string) error            { return os.MkdirAll(dir, 0o755) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func (osFS) ReadDir(dir string) ([]string, error) {
	// Names only: a read of a thread directory (ten thousand entries and
	// more) should not pay for an entry value per name.
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

func (osFS) Stat(name string) (int64, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (osFS) Lstat(name string) (Info, error) {
	fi, err := os.Lstat(name)
	if err != nil {
		return Info{}, err
	}
	return Info{Size: fi.Size(), Dir: fi.IsDir(), Regular: fi.Mode().IsRegular(), ModTime: fi.ModTime()}, nil
}

func (f osFile) Sync() error { return fdatasync(f.File) }

func (f osFile) Size() (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (f osFile) Lock() error { return flock(f.File) }

// IsNotExist reports whether err means a file is missing, through any FS.
func IsNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

func IsExist(err error) bool { return err != nil && errors.Is(err, fs.ErrExist) }
