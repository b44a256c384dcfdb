package pgindex

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
)

// reconciled is where this store last matched the rows with the fleet's
// threads: the oldest transaction id running then (every change logged
// since is at least it), and the database's time then.
type reconciled struct {
	valid  bool
	xmin   string // xid8, as text
	at     int64  // unix ns, database time
	saved  int64  // when it was last saved for other stores (index_meta), database time
	pruned time.Time
}

// changeLogKeep is how long the change log keeps an entry: a store that
// has not looked for half of it compares every row instead.
const changeLogKeep = 24 * time.Hour

// pruneEvery is how often a store prunes the change log; saveEvery how
// often it saves where it matched the rows for a new store to start from.
const (
	pruneEvery = 10 * time.Minute
	saveEvery  = 30 * time.Second
)

// reconcile makes the rows agree with the fleet's threads: threads with
// no row are projected, rows whose thread moved or was replaced are
// caught up, rows whose thread is gone are dropped. It looks only at the
// threads the change log names since this store (or, for a new one, any
// store of the workspace) last matched them, unless that is too long ago,
// when it compares every row (as projection's reconcile lists the
// directories when their versions do not vouch for the rows); all
// compares every row anyway (Refresh).
func (s *Store) reconcile(ctx context.Context, all bool) error {
	s.recMu.Lock()
	prev := s.rec
	s.recMu.Unlock()
	if !prev.valid {
		if v, ok, err := s.metaGet(ctx, metaMatched); err != nil {
			return err
		} else if ok {
			if x, at, ok := strings.Cut(v, "|"); ok {
				if ns, err := strconv.ParseInt(at, 10, 64); err == nil {
					prev = reconciled{valid: true, xmin: x, at: ns}
				}
			}
		}
	}
	var xmin string
	var now int64
	var ids []string
	var err error
	full := all || !prev.valid
	if !full {
		err = s.pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text, (extract(epoch FROM now()) * 1e9)::bigint,
			array(SELECT DISTINCT id FROM rolloutdb.index_changes WHERE ws = $1 AND xid >= $2::text::xid8)`, s.ws, prev.xmin).Scan(&xmin, &now, &ids)
		if err != nil {
			return errors.Wrap(err, "pgindex: read the change log")
		}
		full = now-prev.at > int64(changeLogKeep/2)
	}
	if full {
		err = s.pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text, (extract(epoch FROM now()) * 1e9)::bigint,
			array(SELECT ft.id FROM rolloutdb.threads ft
				LEFT JOIN rolloutdb.index_threads t ON t.ws = ft.ws AND t.id = ft.id COLLATE "C"
				WHERE ft.ws = $1 AND (t.tid IS NULL OR t.location <> ft.location OR t.file_id <> ft.file_id)
			UNION
			SELECT t.id FROM rolloutdb.index_threads t WHERE t.ws = $1
				AND NOT EXISTS (SELECT 1 FROM rolloutdb.threads ft WHERE ft.ws = t.ws AND ft.id = t.id COLLATE "default"))`,
			s.ws).Scan(&xmin, &now, &ids)
		if err != nil {
			return errors.Wrap(err, "pgindex: compare the rows with the log")
		}
	} else if len(ids) > 0 {
		// Of the threads logged, those whose row does not match.
		err = s.pool.QueryRow(ctx, `SELECT array(SELECT u.id FROM unnest($2::text[]) u(id)
			LEFT JOIN rolloutdb.threads ft ON ft.ws = $1 AND ft.id = u.id
			LEFT JOIN rolloutdb.index_threads t ON t.ws = $1 AND t.id = u.id COLLATE "C"
			WHERE (ft.tid IS NULL) <> (t.tid IS NULL) OR t.location <> ft.location OR t.file_id <> ft.file_id)`,
			s.ws, ids).Scan(&ids)
		if err != nil {
			return errors.Wrap(err, "pgindex: compare the rows with the log")
		}
	}
	for _, id := range ids {
		if err := s.repairThread(ctx, id); err != nil {
			return err
		}
	}
	rec := reconciled{valid: true, xmin: xmin, at: now, pruned: prev.pruned, saved: prev.saved}
	if full || now-prev.saved > int64(saveEvery) {
		// Best effort, and not at every read (it is a commit): without it
		// a new store reads a longer stretch of the log, or compares every
		// row.
		if s.metaSet(ctx, metaMatched, xmin+"|"+strconv.FormatInt(now, 10)) == nil {
			rec.saved = now
		}
	}
	if time.Since(rec.pruned) > pruneEvery {
		rec.pruned = time.Now()
		_, _ = s.pool.Exec(ctx, `DELETE FROM rolloutdb.index_changes WHERE at < now() - $1::interval`, changeLogKeep.String())
	}
	s.setReconciled(rec)
	return nil
}

// matchedNow reads the change log's position now: what a rebuild that
// starts here has matched once it ends.
func (s *Store) matchedNow(ctx context.Context) (reconciled, error) {
	var r reconciled
	err := s.pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text, (extract(epoch FROM now()) * 1e9)::bigint`).Scan(&r.xmin, &r.at)
	r.valid = err == nil
	return r, errors.Wrap(err, "pgindex: read the change log's position")
}

func (s *Store) setReconciled(r reconciled) {
	s.recMu.Lock()
	if r.pruned.IsZero() {
		r.pruned = s.rec.pruned
	}
	s.rec = r
	s.recMu.Unlock()
}
