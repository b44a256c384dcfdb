package rolloutdb

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
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
// first. It returns the threads compressed. A workspace whose log does
// not compress (the local log is the one that does) says
// errors.ErrUnsupported.
func (db *DB) CompressArchived(ctx context.Context, o CompressOptions) ([]string, error) {
	c, ok := db.log.(compressor)
	if !ok {
		return nil, errors.Wrap(errors.ErrUnsupported, "rolloutdb: this workspace's log does not compress archived threads")
	}
	cutoff := time.Now().Add(-o.OlderThan)
	var ids []string
	for cursor := ""; ; {
		page, err := db.state.List(ctx, projection.ListOptions{Scope: projection.ScopeArchived, Limit: 1000, Cursor: cursor})
		if err != nil {
			return nil, err
		}
		for _, t := range page.Threads {
			if o.OlderThan <= 0 || t.UpdatedAt.Before(cutoff) {
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
		compressed, err := c.Compress(ctx, id)
		if errors.Is(err, rollout.ErrThreadLocked) {
			// A turn that was running when the thread was archived still
			// holds it: next time.
			db.logger().Info("rolloutdb: archived thread still held by a writer; not compressed", "thread", id)
			continue
		}
		if err != nil {
			return done, errors.Wrapf(err, "compress %s", id)
		}
		if !compressed {
			continue
		}
		if _, err := db.state.Thread(ctx, id); err != nil {
			return done, err
		}
		done = append(done, id)
	}
	return done, nil
}
