package pgindex

import (
	"context"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rolloutdb/rolloutdb/projection"
)

// The cleanup queue is business state: what must go once a thread is
// deleted (its artifacts), kept until it is gone, so that a crash or a
// failed delete is retried rather than forgotten (projection/cleanup.go).

// exec runs one statement of the queue.
func (s *Store) exec(ctx context.Context, what, q string, args ...any) (pgconn.CommandTag, error) {
	if err := s.live(); err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := s.pool.Exec(ctx, q, args...)
	return tag, errors.Wrapf(err, "pgindex: %s", what)
}

// EnqueueCleanup queues paths for removal.
func (s *Store) EnqueueCleanup(ctx context.Context, reason string, paths ...string) error {
	if len(paths) == 0 {
		return s.live()
	}
	_, err := s.exec(ctx, "queue cleanup", `INSERT INTO rolloutdb.cleanup_queue (ws, path, reason, enqueued_at)
		SELECT $1, p, $2, $3 FROM unnest($4::text[]) WITH ORDINALITY AS u(p, n) ORDER BY n`, s.ws, reason, time.Now().UnixNano(), paths)
	return err
}

// PendingCleanup lists the queue, oldest first.
func (s *Store) PendingCleanup(ctx context.Context) ([]projection.CleanupItem, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT id, path, reason, enqueued_at, attempts, last_error FROM rolloutdb.cleanup_queue
		WHERE ws = $1 ORDER BY id`, s.ws)
	if err != nil {
		return nil, errors.Wrap(err, "pgindex: read cleanup queue")
	}
	defer rows.Close()
	out := []projection.CleanupItem{}
	for rows.Next() {
		var c projection.CleanupItem
		var at int64
		if err := rows.Scan(&c.ID, &c.Path, &c.Reason, &at, &c.Attempts, &c.LastError); err != nil {
			return nil, errors.Wrap(err, "pgindex: read cleanup queue")
		}
		c.EnqueuedAt = time.Unix(0, at).UTC()
		out = append(out, c)
	}
	return out, errors.Wrap(rows.Err(), "pgindex: read cleanup queue")
}

// CleanupDone removes a path from the queue.
func (s *Store) CleanupDone(ctx context.Context, id int64) error {
	_, err := s.exec(ctx, "cleanup done", `DELETE FROM rolloutdb.cleanup_queue WHERE ws = $1 AND id = $2`, s.ws, id)
	return err
}

// CleanupFailed records a failed attempt and keeps the path queued.
func (s *Store) CleanupFailed(ctx context.Context, id int64, cause error) error {
	_, err := s.exec(ctx, "cleanup failed", `UPDATE rolloutdb.cleanup_queue SET attempts = attempts + 1, last_error = $3 WHERE ws = $1 AND id = $2`,
		s.ws, id, cause.Error())
	return err
}

// Forget drops every projection row of the threads (for threads deleted
// for good; a read would drop them too, once their log is gone).
// Business state is not touched (DeleteBusinessState).
func (s *Store) Forget(ctx context.Context, threads ...string) error {
	if len(threads) == 0 {
		return s.live()
	}
	ids := slices.Sorted(slices.Values(threads))
	ids = slices.Compact(ids)
	err := s.write(ctx, "forget threads", func(t *txn) error {
		rows, err := t.Query(ctx, `SELECT tid, id FROM rolloutdb.index_threads WHERE ws = $1 AND id = ANY($2) ORDER BY id FOR UPDATE`, s.ws, ids)
		if err != nil {
			return err
		}
		type key struct {
			tid int64
			id  string
		}
		keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (key, error) {
			var k key
			return k, r.Scan(&k.tid, &k.id)
		})
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		for _, k := range keys {
			queueDeleteRows(b, s.ws, k.tid, k.id, false)
		}
		t.dropped = append(t.dropped, ids...)
		return sendBatch(ctx, t, b)
	})
	return err
}
