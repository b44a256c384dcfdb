package fleet

import (
	"context"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// Files is a vfs.FS whose files are rows of the fleet's database
// (rolloutdb.files), so that what a host writes through it (the
// artifacts: spilled tool outputs, attachments, terminal records and
// logs, through package artifacts unchanged) every host reads. Paths are
// slash-separated and absolute ("/tool-results/t1/call.out"); there are no
// directories of their own: a directory is a prefix of some file's path.
//
// A file is read whole when opened and written back whole at Sync and at
// Close, in one statement: each write-back is committed, so it is as
// durable as an append, and a crash keeps a file's last write-back or
// its previous one, never a mix. Sync, SyncDir and MkdirAll have nothing
// more to do. Files are for artifacts, megabytes at most; the object
// storage issue moves them to a bucket.
type Files struct {
	l *Log
}

// Files returns the vfs.FS of the fleet workspace's files.
func (l *Log) Files() *Files { return &Files{l: l} }

var _ vfs.FS = (*Files)(nil)

func (f *Files) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), f.l.opts.CommitTimeout)
}

func clean(name string) string { return path.Clean("/" + strings.ReplaceAll(name, `\`, "/")) }

func notExistErr(op, name string) error {
	return &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
}

// Create makes an empty file; fs.ErrExist if the name is taken.
func (f *Files) Create(name string) (vfs.File, error) {
	name = clean(name)
	ctx, cancel := f.ctx()
	defer cancel()
	tag, err := f.l.pool.Exec(ctx, `INSERT INTO rolloutdb.files (ws, path, data, mtime) VALUES ($1, $2, '', now())
		ON CONFLICT (ws, path) DO NOTHING`, f.l.ws, name)
	if err != nil {
		return nil, classify(err, "create "+name)
	}
	if tag.RowsAffected() == 0 {
		return nil, &fs.PathError{Op: "create", Path: name, Err: fs.ErrExist}
	}
	return &file{fs: f, name: name, writable: true}, nil
}

// Open opens a file read-only.
func (f *Files) Open(name string) (vfs.File, error) { return f.open(clean(name), false) }

// OpenRW opens a file for reading and writing.
func (f *Files) OpenRW(name string) (vfs.File, error) { return f.open(clean(name), true) }

func (f *Files) open(name string, writable bool) (vfs.File, error) {
	ctx, cancel := f.ctx()
	defer cancel()
	var data []byte
	err := f.l.pool.QueryRow(ctx, `SELECT data FROM rolloutdb.files WHERE ws = $1 AND path = $2`, f.l.ws, name).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notExistErr("open", name)
	}
	if err != nil {
		return nil, classify(err, "open "+name)
	}
	return &file{fs: f, name: name, data: data, writable: writable}, nil
}

// Link makes newname a copy of oldname (files are never changed in place
// by artifacts once linked); fs.ErrExist if newname exists.
func (f *Files) Link(oldname, newname string) error {
	oldname, newname = clean(oldname), clean(newname)
	ctx, cancel := f.ctx()
	defer cancel()
	var inserted, found bool
	err := f.l.pool.QueryRow(ctx, `WITH src AS (SELECT data FROM rolloutdb.files WHERE ws = $1 AND path = $2),
		ins AS (INSERT INTO rolloutdb.files (ws, path, data, mtime) SELECT $1, $3, data, now() FROM src
			ON CONFLICT (ws, path) DO NOTHING RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM ins), EXISTS (SELECT 1 FROM src)`, f.l.ws, oldname, newname).Scan(&inserted, &found)
	switch {
	case err != nil:
		return classify(err, "link "+newname)
	case !found:
		return notExistErr("link", oldname)
	case !inserted:
		return &fs.PathError{Op: "link", Path: newname, Err: fs.ErrExist}
	}
	return nil
}

// Rename moves a file, replacing newname, in one transaction.
func (f *Files) Rename(oldname, newname string) error {
	oldname, newname = clean(oldname), clean(newname)
	ctx, cancel := f.ctx()
	defer cancel()
	var moved bool
	err := pgx.BeginTxFunc(ctx, f.l.pool, readCommitted, func(tx pgx.Tx) error {
		if oldname == newname {
			return tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM rolloutdb.files WHERE ws = $1 AND path = $2)`, f.l.ws, oldname).Scan(&moved)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM rolloutdb.files WHERE ws = $1 AND path = $2`, f.l.ws, newname); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE rolloutdb.files SET path = $3, mtime = now() WHERE ws = $1 AND path = $2`, f.l.ws, oldname, newname)
		moved = tag.RowsAffected() == 1
		if err == nil && !moved {
			return notExistErr("rename", oldname)
		}
		return err
	})
	if err != nil && !moved {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return err
		}
		return classify(err, "rename "+oldname)
	}
	return nil
}

// Remove removes a file, or a directory that holds no file.
func (f *Files) Remove(name string) error {
	name = clean(name)
	ctx, cancel := f.ctx()
	defer cancel()
	tag, err := f.l.pool.Exec(ctx, `DELETE FROM rolloutdb.files WHERE ws = $1 AND path = $2`, f.l.ws, name)
	if err != nil {
		return classify(err, "remove "+name)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	info, err := f.Lstat(name)
	if err != nil {
		return err
	}
	if info.Dir {
		return &fs.PathError{Op: "remove", Path: name, Err: errors.New("directory not empty")}
	}
	return notExistErr("remove", name)
}

// MkdirAll has nothing to do: a directory is a prefix.
func (f *Files) MkdirAll(string) error { return nil }

// SyncDir has nothing to do: every change is committed when it is made.
func (f *Files) SyncDir(string) error { return nil }

// ReadDir lists the names directly under dir, sorted; fs.ErrNotExist if no
// file is under it.
func (f *Files) ReadDir(dir string) ([]string, error) {
	dir = clean(dir)
	prefix := strings.TrimSuffix(dir, "/") + "/"
	ctx, cancel := f.ctx()
	defer cancel()
	rows, err := f.l.pool.Query(ctx, `SELECT DISTINCT split_part(substr(path, $3), '/', 1) FROM rolloutdb.files
		WHERE ws = $1 AND path LIKE $2 ESCAPE '\'`, f.l.ws, likePrefix(prefix), len(prefix)+1)
	if err != nil {
		return nil, classify(err, "list "+dir)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, classify(err, "list "+dir)
	}
	if len(names) == 0 {
		return nil, notExistErr("readdir", dir)
	}
	slices.Sort(names)
	return names, nil
}

// likePrefix is a LIKE pattern matching what starts with p.
func likePrefix(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(p) + "%"
}

// Stat returns a file's size.
func (f *Files) Stat(name string) (int64, error) {
	info, err := f.Lstat(name)
	if err != nil {
		return 0, err
	}
	return info.Size, nil
}

// Lstat describes a file, or a directory (a prefix of some file's path).
func (f *Files) Lstat(name string) (vfs.Info, error) {
	name = clean(name)
	ctx, cancel := f.ctx()
	defer cancel()
	var size int64
	var mtime time.Time
	err := f.l.pool.QueryRow(ctx, `SELECT length(data), mtime FROM rolloutdb.files WHERE ws = $1 AND path = $2`, f.l.ws, name).Scan(&size, &mtime)
	if err == nil {
		return vfs.Info{Size: size, Regular: true, ModTime: mtime}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return vfs.Info{}, classify(err, "stat "+name)
	}
	var dir bool
	prefix := strings.TrimSuffix(name, "/") + "/"
	if err := f.l.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM rolloutdb.files WHERE ws = $1 AND path LIKE $2 ESCAPE '\')`,
		f.l.ws, likePrefix(prefix)).Scan(&dir); err != nil {
		return vfs.Info{}, classify(err, "stat "+name)
	}
	if !dir {
		return vfs.Info{}, notExistErr("lstat", name)
	}
	return vfs.Info{Dir: true}, nil
}

// file is an open file: its bytes, written back whole at Sync and Close.
type file struct {
	fs       *Files
	name     string
	writable bool

	mu     sync.Mutex
	data   []byte
	dirty  bool
	closed bool
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if off >= int64(len(f.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *file) WriteAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.writable || f.closed {
		return 0, &fs.PathError{Op: "write", Path: f.name, Err: fs.ErrPermission}
	}
	if end := off + int64(len(p)); end > int64(len(f.data)) {
		f.data = append(f.data, make([]byte, end-int64(len(f.data)))...)
	}
	copy(f.data[off:], p)
	f.dirty = true
	return len(p), nil
}

// Sync writes the file back (committed).
func (f *file) Sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flushLocked()
}

func (f *file) flushLocked() error {
	if !f.dirty {
		return nil
	}
	ctx, cancel := f.fs.ctx()
	defer cancel()
	tag, err := f.fs.l.pool.Exec(ctx, `UPDATE rolloutdb.files SET data = $3, mtime = now() WHERE ws = $1 AND path = $2`,
		f.fs.l.ws, f.name, f.data)
	if err != nil {
		return classify(err, "write "+f.name)
	}
	if tag.RowsAffected() == 0 {
		return notExistErr("write", f.name) // removed meanwhile
	}
	f.dirty = false
	return nil
}

func (f *file) Truncate(size int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.writable {
		return &fs.PathError{Op: "truncate", Path: f.name, Err: fs.ErrPermission}
	}
	if size < int64(len(f.data)) {
		f.data = f.data[:size]
	} else {
		f.data = append(f.data, make([]byte, size-int64(len(f.data)))...)
	}
	f.dirty = true
	return nil
}

func (f *file) Size() (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(len(f.data)), nil
}

// Lock is not offered: fleet threads are owned through the database, and
// artifacts do not lock.
func (f *file) Lock() error {
	return errors.New("fleet: files cannot be locked")
}

// Close writes the file back if it changed.
func (f *file) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	return f.flushLocked()
}
