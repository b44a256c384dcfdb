package pgindex

import (
	"context"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// tail is what the fleet's tables say of a thread: whether it exists,
// where, its file id and where its frames end.
type tail struct {
	exists   bool
	location string
	fileID   uint64
	end      int64
}

// fresh reports whether a row is up to date with its thread's frames:
// there, of the same file, and read to where the frames end now.
func (t tail) fresh(th *threadRow) bool {
	return t.exists && th.made() && th.Location == t.location && th.FileID == t.fileID && th.FileSize == t.end
}

// tailCols are the columns of a tail, of a thread row aliased p: the
// fleet's threads row (ft) and the end of its last frame (the frame's
// length is read from the value's header, not its bytes).
const tailCols = `ft.tid IS NOT NULL, coalesce(ft.location, ''), coalesce(ft.file_id, 0), coalesce(e.end_, 128)`

const tailJoin = ` LEFT JOIN rolloutdb.threads ft ON ft.ws = p.ws AND ft.id = p.id COLLATE "default"
	LEFT JOIN LATERAL (SELECT f.off + octet_length(f.data) AS end_ FROM rolloutdb.frames f
		WHERE f.tid = ft.tid ORDER BY f.off DESC LIMIT 1) e ON true`

// scanWithTail scans threadCols then tailCols.
func scanWithTail(rows pgx.Rows) (*threadRow, tail, error) {
	th := &threadRow{}
	dest, done := threadDest(th)
	var tl tail
	var fileID int64
	dest = append(dest, &tl.exists, &tl.location, &fileID, &tl.end)
	if err := rows.Scan(dest...); err != nil {
		return nil, tail{}, err
	}
	done()
	tl.fileID = uint64(fileID)
	return th, tl, nil
}

// List returns one page of threads, newest first, with
// projection.Store.List's filters, order and cursors (the cursors are
// interchangeable). Each page is a range of an index read backwards
// (index_threads, or index_labels for a label), so that its cost does not
// grow with the workspace.
//
// Reads are log-first. Before the query, what this host enqueued is
// applied, and the change log says which threads another host made,
// deleted or moved since this store last looked: their rows are made,
// dropped or moved. Every row on the page is then checked, in the query
// that reads it, against where its thread's frames end, and caught up if
// behind, before it is returned.
func (s *Store) List(ctx context.Context, o projection.ListOptions) (projection.Page, error) {
	if err := s.Settle(ctx); err != nil {
		return projection.Page{}, err
	}
	if err := s.reconcile(ctx, false); err != nil {
		return projection.Page{}, err
	}
	for attempt := 0; ; attempt++ {
		page, stale, err := s.listQuery(ctx, o)
		if err != nil || attempt == 2 || len(stale) == 0 {
			return page, err
		}
		for _, id := range stale {
			if err := s.repairThread(ctx, id); err != nil {
				return projection.Page{}, err
			}
		}
		// A row was behind: its sort key may have moved. Ask again.
	}
}

func (s *Store) listQuery(ctx context.Context, o projection.ListOptions) (projection.Page, []string, error) {
	limit := o.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 1000)
	key := "updated_at"
	if o.Sort == projection.SortCreated {
		key = "created_at"
	}
	args := []any{s.ws}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	// src is the table whose index orders the page: its location, sort
	// key and id are the thread's.
	from, src := "rolloutdb.index_threads t", "t"
	conds := []string{"t.ws = $1"}
	if o.Label != "" {
		from, src = "rolloutdb.index_labels l JOIN rolloutdb.index_threads t ON t.tid = l.tid", "l"
		conds = []string{"l.ws = $1", "l.label = " + arg(o.Label)}
	}
	for _, f := range []struct{ col, v string }{{"t.state", o.State}, {"t.source_kind", o.SourceKind}, {"t.parent", o.Parent}} {
		if f.v != "" {
			conds = append(conds, f.col+" = "+arg(f.v))
		}
	}
	if o.Parent != "" {
		conds = append(conds, "t.parent <> ''") // for the partial indexes index_threads_by_parent*
	}
	if o.Cursor != "" {
		ck, cid, err := projection.DecodeCursor(o.Cursor, o.Sort)
		if err != nil {
			return projection.Page{}, nil, err
		}
		conds = append(conds, "("+src+"."+key+", "+src+".id) < ("+arg(ck)+", "+arg(cid)+")")
	}
	lim := arg(limit + 1)
	one := func(loc string) string {
		return "SELECT t.*, " + src + "." + key + " AS k_, " + src + ".id AS id_ FROM " + from + " WHERE " + strings.Join(conds, " AND ") +
			" AND " + src + ".location = '" + loc + "' ORDER BY " + src + "." + key + " DESC, " + src + ".id DESC LIMIT " + lim
	}
	var page string
	switch o.Scope {
	case projection.ScopeActive:
		page = one(projection.LocationActive)
	case projection.ScopeArchived:
		page = one(projection.LocationArchived)
	default:
		// Each location's range of the index, merged.
		page = "SELECT * FROM ((" + one(projection.LocationActive) + ") UNION ALL (" + one(projection.LocationArchived) +
			")) u ORDER BY k_ DESC, id_ DESC LIMIT " + lim
	}
	q := "SELECT " + prefixCols("p.", threadCols) + ", " + tailCols + " FROM (" + page + ") p" + tailJoin + " ORDER BY p.k_ DESC, p.id_ DESC"
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return projection.Page{}, nil, errors.Wrap(err, "pgindex: list threads")
	}
	defer rows.Close()
	out := projection.Page{Threads: make([]projection.ThreadInfo, 0, limit)}
	var stale []string
	var last *threadRow
	n := 0
	for rows.Next() {
		th, tl, err := scanWithTail(rows)
		if err != nil {
			return projection.Page{}, nil, errors.Wrap(err, "pgindex: list threads")
		}
		if n++; n > limit {
			k := last.UpdatedAt
			if o.Sort == projection.SortCreated {
				k = last.CreatedAt
			}
			out.NextCursor = projection.EncodeCursor(o.Sort, k, last.ID)
			break
		}
		if !tl.fresh(th) {
			stale = append(stale, th.ID)
		}
		out.Threads = append(out.Threads, th.info())
		last = th
	}
	if err := rows.Err(); err != nil {
		return projection.Page{}, nil, errors.Wrap(err, "pgindex: list threads")
	}
	return out, stale, nil
}

// Anchor returns the last frame the thread's row applied, as the row has
// it (no catch-up): a hint a writer checks against the log. ok is false
// when the row has none.
func (s *Store) Anchor(ctx context.Context, id string) (a rollout.Anchor, ok bool) {
	if s.live() != nil {
		return a, false
	}
	var off, seq, crc int64
	err := s.pool.QueryRow(ctx, `SELECT anchor_offset, anchor_seq, anchor_crc FROM rolloutdb.index_threads WHERE ws = $1 AND id = $2`,
		s.ws, id).Scan(&off, &seq, &crc)
	if err != nil || off <= 0 {
		return a, false
	}
	return rollout.Anchor{Offset: off, Seq: uint64(seq), DataCRC: uint32(crc)}, true
}

// Thread returns one thread's row, caught up with its frames first.
// projection.ErrNotFound if the log has no such thread.
func (s *Store) Thread(ctx context.Context, id string) (projection.ThreadInfo, error) {
	th, err := s.freshThread(ctx, id)
	if err != nil {
		return projection.ThreadInfo{}, err
	}
	return th.info(), nil
}

// freshThread applies what is enqueued, then checks the thread's row
// against its frames and catches it up.
func (s *Store) freshThread(ctx context.Context, id string) (*threadRow, error) {
	if err := rollout.ValidateThreadID(id); err != nil {
		return nil, err
	}
	if err := s.Settle(ctx); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		th, tl, err := s.readThread(ctx, id)
		switch {
		case err != nil:
			return nil, err
		case th != nil && tl.fresh(th):
			return th, nil
		case th == nil && !tl.exists, attempt == 1 && (th == nil || !tl.exists):
			return nil, errors.Wrapf(projection.ErrNotFound, "thread %s", id)
		case attempt == 1:
			// Still not what the log says after a catch-up: a row with a
			// problem (tried again at the next read), or frames committed
			// meanwhile.
			return th, nil
		}
		if err := s.repairThread(ctx, id); err != nil {
			return nil, err
		}
	}
}

// readThread reads a thread's row (nil if none) and its tail.
func (s *Store) readThread(ctx context.Context, id string) (*threadRow, tail, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+prefixCols("p.", threadCols)+`, `+tailCols+`
		FROM rolloutdb.index_threads p`+tailJoin+` WHERE p.ws = $1 AND p.id = $2`, s.ws, id)
	if err != nil {
		return nil, tail{}, errors.Wrapf(err, "pgindex: read thread %s", id)
	}
	defer rows.Close()
	if rows.Next() {
		th, tl, err := scanWithTail(rows)
		return th, tl, errors.Wrapf(err, "pgindex: read thread %s", id)
	}
	if err := rows.Err(); err != nil {
		return nil, tail{}, errors.Wrapf(err, "pgindex: read thread %s", id)
	}
	rows.Close()
	var tl tail
	var fileID int64
	err = s.pool.QueryRow(ctx, `SELECT location, file_id FROM rolloutdb.threads WHERE ws = $1 AND id = $2`, s.ws, id).Scan(&tl.location, &fileID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, tail{}, nil
	case err != nil:
		return nil, tail{}, errors.Wrapf(err, "pgindex: read thread %s", id)
	}
	tl.exists, tl.fileID = true, uint64(fileID)
	return nil, tl, nil
}

// repairThread catches one thread's rows up with its frames (making them,
// or dropping them if the log has no such thread), in a transaction of
// its own.
func (s *Store) repairThread(ctx context.Context, id string) error {
	return s.withSlot(ctx, func() error {
		return s.write(ctx, "catch up thread "+id, func(t *txn) error {
			rows, err := s.lockRows(ctx, t, []string{id}, []string{projection.LocationActive})
			if err != nil {
				return err
			}
			l := rows[id]
			if !l.exists {
				return s.drop(ctx, t, l.row)
			}
			_, err = s.catchUp(ctx, t, l.row)
			return ignoreGone(err)
		})
	})
}
