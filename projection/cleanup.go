package projection

import (
	"context"
	"database/sql"
	"time"

	"github.com/cockroachdb/errors"
)

// The cleanup queue is business state: files that must go (a deleted
// thread's artifacts, a deleted rollout that could not be removed at once),
// kept in state.db until they are gone, so that a crash or a failed delete
// is retried rather than forgotten.

// CleanupItem is one queued path.
type CleanupItem struct {
	ID         int64     `json:"id"`
	Path       string    `json:"path"` // relative to the data directory
	Reason     string    `json:"reason"`
	EnqueuedAt time.Time `json:"enqueued_at"`
	Attempts   int       `json:"attempts"`
	LastError  string    `json:"last_error,omitempty"`
}

// EnqueueCleanup queues paths (relative to the data directory) for removal.
func (s *Store) EnqueueCleanup(ctx context.Context, reason string, paths ...string) (err error) {
	defer s.guard(&err)
	return s.writeDurable(ctx, func(tx *sql.Tx) error {
		for _, p := range paths {
			if _, err := tx.ExecContext(ctx, `INSERT INTO cleanup_queue (path, reason, enqueued_at) VALUES (?,?,?)`, p, reason, time.Now().UnixNano()); err != nil {
				return errors.Wrap(err, "queue cleanup")
			}
		}
		return nil
	})
}

// PendingCleanup lists the queue, oldest first.
func (s *Store) PendingCleanup(ctx context.Context) (_ []CleanupItem, err error) {
	defer s.guard(&err)
	if err := s.live(); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, path, reason, enqueued_at, attempts, last_error FROM cleanup_queue ORDER BY id`)
	if err != nil {
		return nil, errors.Wrap(err, "read cleanup queue")
	}
	defer rows.Close()
	out := []CleanupItem{}
	for rows.Next() {
		var c CleanupItem
		var at int64
		if err := rows.Scan(&c.ID, &c.Path, &c.Reason, &at, &c.Attempts, &c.LastError); err != nil {
			return nil, errors.Wrap(err, "read cleanup queue")
		}
		c.EnqueuedAt = time.Unix(0, at).UTC()
		out = append(out, c)
	}
	return out, errors.Wrap(rows.Err(), "read cleanup queue")
}

// CleanupDone removes a path from the queue; CleanupFailed records a
// failed attempt and keeps it.
func (s *Store) CleanupDone(ctx context.Context, id int64) (err error) {
	defer s.guard(&err)
	return s.writeDurable(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM cleanup_queue WHERE id = ?`, id)
		return errors.Wrap(err, "cleanup done")
	})
}

// CleanupFailed records a failed attempt.
func (s *Store) CleanupFailed(ctx context.Context, id int64, cause error) (err error) {
	defer s.guard(&err)
	return s.writeDurable(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE cleanup_queue SET attempts = attempts + 1, last_error = ? WHERE id = ?`, cause.Error(), id)
		return errors.Wrap(err, "cleanup failed")
	})
}

// Forget drops every projection row of the threads (for threads deleted
// for good; read-repair would drop them too, once their rollouts are gone).
func (s *Store) Forget(ctx context.Context, threads ...string) (err error) {
	defer s.guard(&err)
	return s.writeDurable(ctx, func(tx *sql.Tx) error {
		for _, id := range threads {
			if _, err := s.deleteThreadRows(ctx, tx, id, false); err != nil {
				return err
			}
		}
		return nil
	})
}
