package rolloutdb

import (
	"bytes"
	"context"
	"path/filepath"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// The local log's cold tier: an archived rollout compressed whole (zstd)
// to threads/archived/<id>.rollout.zst. Readers read both forms
// (rollout.OpenRead); Move out of threads/archived decompresses first.

// A compressor is a log that compresses archived threads (the local
// log); DB.CompressArchived reaches it by a type assertion.
type compressor interface {
	// Compress compresses an archived thread's records; false if they are
	// compressed already.
	Compress(ctx context.Context, id string) (bool, error)
}

var _ compressor = (*localLog)(nil)

// Compress converts the thread's archived rollout to its compressed
// form: rollout.ErrThreadLocked if a writer still holds it.
func (l *localLog) Compress(ctx context.Context, id string) (bool, error) {
	plain, err := rollout.ArchivedPath(l.root, id)
	if err != nil {
		return false, err
	}
	cold, _ := rollout.ColdPath(l.root, id)
	if !l.exists(plain) && l.exists(cold) {
		return false, nil
	}
	err = l.convert(id, plain, cold, rollout.CompressRollout, func(b []byte) ([]byte, error) { return rollout.DecompressRollout(b, 0) })
	return err == nil, err
}

// decompress turns an archived thread's compressed rollout back into a
// plain one (before it is restored).
func (l *localLog) decompress(id string) error {
	plain, _ := rollout.ArchivedPath(l.root, id)
	cold, _ := rollout.ColdPath(l.root, id)
	if _, err := l.fs.Stat(cold); err != nil {
		return nil // not compressed
	}
	return l.convert(id, cold, plain, func(b []byte) ([]byte, error) { return rollout.DecompressRollout(b, 0) }, rollout.CompressRollout)
}

// convert writes to `to` the bytes of `from` passed through fwd, checks
// that back turns them into the very bytes of `from`, and only then gives
// the result its name (create-new, directory synced) and removes `from`.
// It holds `from`'s lock throughout, so no writer is at work on it.
func (l *localLog) convert(id, from, to string, fwd, back func([]byte) ([]byte, error)) error {
	f, err := l.fs.OpenRW(from)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Lock(); err != nil {
		return errors.Wrapf(err, "%s", id)
	}
	size, err := f.Size()
	if err != nil {
		return err
	}
	if size > rollout.MaxColdSize {
		return errors.Wrapf(rollout.ErrTooLarge, "%s: %d bytes", from, size)
	}
	orig := make([]byte, size)
	if _, err := f.ReadAt(orig, 0); err != nil && size > 0 {
		return errors.Wrapf(err, "read %s", from)
	}
	out, err := fwd(orig)
	if err != nil {
		return err
	}
	tmp := to + ".tmp-" + rollout.NewID()
	if err := writeFileSynced(l.fs, tmp, out); err != nil {
		return err
	}
	defer l.fs.Remove(tmp)
	// Verify what is on disk, not what is in memory.
	written, err := vfs.ReadFile(l.fs, tmp, int64(len(out)))
	if err != nil {
		return err
	}
	again, err := back(written)
	if err != nil || !bytes.Equal(again, orig) {
		return errors.Newf("rolloutdb: %s: the converted copy does not decode to the original; original kept", id)
	}
	if err := l.fs.Link(tmp, to); err != nil {
		return err
	}
	if err := l.fs.SyncDir(filepath.Dir(to)); err != nil {
		return err
	}
	if err := l.fs.Remove(from); err != nil {
		return err
	}
	return l.fs.SyncDir(filepath.Dir(from))
}

func writeFileSynced(fsys vfs.FS, path string, b []byte) error {
	f, err := fsys.Create(path)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(b, 0)
	if err == nil {
		err = f.Sync()
	}
	return errors.CombineErrors(err, f.Close())
}
