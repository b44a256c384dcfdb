package rolloutdb

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// CompressOptions select archived threads to compress.
type CompressOptions struct {
	// OlderThan is how long an archived thread must have gone without an
	// update to be compressed. Default: 0, every archived thread.
	OlderThan time.Duration
}

// CompressArchived compresses archived rollouts (zstd, the whole file) to
// threads/archived/<id>.rollout.zst. Each compressed file is decoded and
// compared with the original before the original is removed; a crash at
// any step leaves one readable copy (both, at worst, until the next Open
// keeps the plain one). Readers read both forms; Restore decompresses
// first. It returns the threads compressed.
func (db *DB) CompressArchived(ctx context.Context, o CompressOptions) ([]string, error) {
	cutoff := time.Now().Add(-o.OlderThan)
	var ids []string
	for cursor := ""; ; {
		page, err := db.state.List(ctx, projection.ListOptions{Scope: projection.ScopeArchived, Limit: 1000, Cursor: cursor})
		if err != nil {
			return nil, err
		}
		for _, t := range page.Threads {
			if !strings.HasSuffix(t.RolloutPath, rollout.ColdExt) && (o.OlderThan <= 0 || t.UpdatedAt.Before(cutoff)) {
				ids = append(ids, t.ID)
			}
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	var done []string
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		plain, _ := rollout.ArchivedPath(db.root, id)
		cold, _ := rollout.ColdPath(db.root, id)
		err := db.convert(id, plain, cold, rollout.CompressRollout, func(b []byte) ([]byte, error) { return rollout.DecompressRollout(b, 0) })
		if errors.Is(err, rollout.ErrThreadLocked) {
			// A turn that was running when the thread was archived still
			// holds it: next time.
			db.logger().Info("rolloutdb: archived thread still held by a writer; not compressed", "thread", id)
			continue
		}
		if err != nil {
			return done, errors.Wrapf(err, "compress %s", id)
		}
		if _, err := db.state.Thread(ctx, id); err != nil {
			return done, err
		}
		done = append(done, id)
	}
	return done, nil
}

// decompress turns an archived thread's compressed rollout back into a
// plain one (before it is restored).
func (db *DB) decompress(id string) error {
	plain, _ := rollout.ArchivedPath(db.root, id)
	cold, _ := rollout.ColdPath(db.root, id)
	if _, err := db.fs.Stat(cold); err != nil {
		return nil // not compressed
	}
	return db.convert(id, cold, plain, func(b []byte) ([]byte, error) { return rollout.DecompressRollout(b, 0) }, rollout.CompressRollout)
}

// convert writes to `to` the bytes of `from` passed through fwd, checks
// that back turns them into the very bytes of `from`, and only then gives
// the result its name (create-new, directory synced) and removes `from`.
// It holds `from`'s lock throughout, so no writer is at work on it.
func (db *DB) convert(id, from, to string, fwd, back func([]byte) ([]byte, error)) error {
	f, err := db.fs.OpenRW(from)
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
	if err := writeFileSynced(db.fs, tmp, out); err != nil {
		return err
	}
	defer db.fs.Remove(tmp)
	// Verify what is on disk, not what is in memory.
	written, err := vfs.ReadFile(db.fs, tmp, int64(len(out)))
	if err != nil {
		return err
	}
	again, err := back(written)
	if err != nil || !bytes.Equal(again, orig) {
		return errors.Newf("rolloutdb: %s: the converted copy does not decode to the original; original kept", id)
	}
	if err := db.fs.Link(tmp, to); err != nil {
		return err
	}
	if err := db.fs.SyncDir(filepath.Dir(to)); err != nil {
		return err
	}
	if err := db.fs.Remove(from); err != nil {
		return err
	}
	return db.fs.SyncDir(filepath.Dir(from))
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
