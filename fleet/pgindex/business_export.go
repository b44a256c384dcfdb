package pgindex

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/projection"
)

// ExportBusiness reads every row of the workspace's business state at
// once (one read-only transaction), as projection.Store.ExportBusiness.
func (s *Store) ExportBusiness(ctx context.Context) (projection.BusinessExport, error) {
	if err := s.live(); err != nil {
		return projection.BusinessExport{}, err
	}
	e := projection.BusinessExport{Goals: []projection.Goal{}, Plans: []projection.Plan{}, Edges: []projection.Edge{},
		Messages: []projection.Message{}, Diagnostics: []projection.Diagnostic{}}
	at := func(ns int64) time.Time { return time.Unix(0, ns).UTC() }
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		each := func(q string, scan func(pgx.Rows) error) error {
			rows, err := tx.Query(ctx, q, s.ws)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				if err := scan(rows); err != nil {
					return err
				}
			}
			return rows.Err()
		}
		for _, q := range []struct {
			sql  string
			scan func(pgx.Rows) error
		}{
			{`SELECT id, thread_id, text, status, created_at, updated_at FROM rolloutdb.goals WHERE ws = $1 ORDER BY id`, func(r pgx.Rows) error {
				var g projection.Goal
				var c, u int64
				err := r.Scan(&g.ID, &g.Thread, &g.Text, &g.Status, &c, &u)
				g.CreatedAt, g.UpdatedAt = at(c), at(u)
				e.Goals = append(e.Goals, g)
				return err
			}},
			{`SELECT thread_id, text, status, updated_at FROM rolloutdb.plans WHERE ws = $1 ORDER BY thread_id COLLATE "C", step`, func(r pgx.Rows) error {
				var thread string
				var st projection.PlanStep
				var u int64
				if err := r.Scan(&thread, &st.Text, &st.Status, &u); err != nil {
					return err
				}
				if n := len(e.Plans); n == 0 || e.Plans[n-1].Thread != thread {
					e.Plans = append(e.Plans, projection.Plan{Thread: thread, UpdatedAt: at(u)})
				}
				p := &e.Plans[len(e.Plans)-1]
				p.Steps = append(p.Steps, st)
				return nil
			}},
			{`SELECT parent, child, status, created_at, closed_at FROM rolloutdb.subagent_edges WHERE ws = $1 ORDER BY parent, child`, func(r pgx.Rows) error {
				var ed projection.Edge
				var c, cl int64
				err := r.Scan(&ed.Parent, &ed.Child, &ed.Status, &c, &cl)
				ed.CreatedAt = at(c)
				if cl != 0 {
					t := at(cl)
					ed.ClosedAt = &t
				}
				e.Edges = append(e.Edges, ed)
				return err
			}},
			{`SELECT id, from_thread, to_thread, body, created_at, read_at FROM rolloutdb.mailbox WHERE ws = $1 ORDER BY id`, func(r pgx.Rows) error {
				var m projection.Message
				var c, rd int64
				err := r.Scan(&m.ID, &m.From, &m.To, &m.Body, &c, &rd)
				m.CreatedAt = at(c)
				if rd != 0 {
					t := at(rd)
					m.ReadAt = &t
				}
				e.Messages = append(e.Messages, m)
				return err
			}},
			{`SELECT thread_id, off, length, first_seq, last_seq, kind, reason, ack_lost, seen_at FROM rolloutdb.diagnostics WHERE ws = $1 ORDER BY thread_id, off, first_seq`, func(r pgx.Rows) error {
				var d projection.Diagnostic
				var first, last, seen int64
				err := r.Scan(&d.Thread, &d.Offset, &d.Length, &first, &last, &d.Kind, &d.Reason, &d.AckLost, &seen)
				d.FirstSeq, d.LastSeq, d.SeenAt = uint64(first), uint64(last), at(seen)
				e.Diagnostics = append(e.Diagnostics, d)
				return err
			}},
		} {
			if err := each(q.sql, q.scan); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return projection.BusinessExport{}, errors.Wrap(err, "pgindex: export business state")
	}
	return e, nil
}

// ImportBusiness merges business state exported from another workspace
// (origin: that workspace's id) into this one, in one transaction,
// idempotently and incrementally:
//
//   - a goal or a message is keyed by its origin and its id there: the
//     first import adds it, a later one updates it (a goal's status, when
//     the export's is newer by its updated time; a message read there is
//     read here) and never adds it again;
//   - a thread's plan is replaced when the export's was set later than
//     this workspace's (or there is none here); a plan cleared there
//     leaves nothing to export, and this one stays;
//   - an edge is added, or takes the export's status when that changed
//     later than this one did (by its open and close times: a reopened
//     edge's time is still its first opening);
//   - a diagnostic is added once (its offset, seq and reason are its key).
//
// Nothing is deleted. Times are the export's, so a change made here after
// the export's wins over it.
func (s *Store) ImportBusiness(ctx context.Context, origin string, e projection.BusinessExport) (projection.BusinessImport, error) {
	var rep projection.BusinessImport
	if err := s.live(); err != nil {
		return rep, err
	}
	if origin == "" {
		return rep, errors.New("pgindex: an import of business state needs its origin (the workspace it comes from)")
	}
	for _, g := range e.Goals {
		if err := checkID(g.Thread); err != nil {
			return rep, err
		}
	}
	for _, p := range e.Plans {
		if err := checkID(p.Thread); err != nil {
			return rep, err
		}
	}
	for _, ed := range e.Edges {
		if err := errors.CombineErrors(checkID(ed.Parent), checkID(ed.Child)); err != nil {
			return rep, err
		}
	}
	for _, m := range e.Messages {
		if err := errors.CombineErrors(checkID(m.From), checkID(m.To)); err != nil {
			return rep, err
		}
	}
	for _, d := range e.Diagnostics {
		if err := checkID(d.Thread); err != nil {
			return rep, err
		}
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rep = projection.BusinessImport{}
		// count tallies an upsert's RETURNING (xmax = 0): added or
		// updated; a row the WHERE of its update left alone returns none.
		count := func(c *projection.RowCounts, q string, args ...any) error {
			rows, err := tx.Query(ctx, q, args...)
			if err != nil {
				return err
			}
			added, err := pgx.CollectRows(rows, pgx.RowTo[bool])
			for _, a := range added {
				if a {
					c.Added++
				} else {
					c.Updated++
				}
			}
			return err
		}
		var (
			gThread, gText, gStatus []string
			gID, gCreated, gUpdated []int64
		)
		for _, g := range e.Goals {
			gThread, gText, gStatus = append(gThread, g.Thread), append(gText, g.Text), append(gStatus, g.Status)
			gID, gCreated, gUpdated = append(gID, g.ID), append(gCreated, g.CreatedAt.UnixNano()), append(gUpdated, g.UpdatedAt.UnixNano())
		}
		if err := count(&rep.Goals, `INSERT INTO rolloutdb.goals AS cur (ws, thread_id, text, status, created_at, updated_at, origin, origin_id)
			SELECT $1, g.thread, g.text, g.status, g.created, g.updated, $2, g.id
			FROM unnest($3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::bigint[]) AS g(thread, text, status, id, created, updated)
			ON CONFLICT (ws, origin, origin_id) WHERE origin <> '' DO UPDATE SET status = excluded.status, updated_at = excluded.updated_at
			WHERE cur.updated_at < excluded.updated_at AND cur.status IS DISTINCT FROM excluded.status
			RETURNING xmax = 0`, s.ws, origin, gThread, gText, gStatus, gID, gCreated, gUpdated); err != nil {
			return errors.Wrap(err, "goals")
		}

		var (
			mFrom, mTo, mBody      []string
			mID, mCreated, mReadAt []int64
		)
		for _, m := range e.Messages {
			var r int64
			if m.ReadAt != nil {
				r = m.ReadAt.UnixNano()
			}
			mFrom, mTo, mBody = append(mFrom, m.From), append(mTo, m.To), append(mBody, m.Body)
			mID, mCreated, mReadAt = append(mID, m.ID), append(mCreated, m.CreatedAt.UnixNano()), append(mReadAt, r)
		}
		if err := count(&rep.Messages, `INSERT INTO rolloutdb.mailbox AS cur (ws, from_thread, to_thread, body, created_at, read_at, origin, origin_id)
			SELECT $1, m.sender, m.recipient, m.body, m.created, m.read, $2, m.id
			FROM unnest($3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::bigint[]) AS m(sender, recipient, body, id, created, read)
			ON CONFLICT (ws, origin, origin_id) WHERE origin <> '' DO UPDATE SET read_at = excluded.read_at
			WHERE cur.read_at = 0 AND excluded.read_at <> 0
			RETURNING xmax = 0`, s.ws, origin, mFrom, mTo, mBody, mID, mCreated, mReadAt); err != nil {
			return errors.Wrap(err, "messages")
		}

		var (
			eParent, eChild, eStatus []string
			eCreated, eClosed        []int64
		)
		for _, ed := range e.Edges {
			var cl int64
			if ed.ClosedAt != nil {
				cl = ed.ClosedAt.UnixNano()
			}
			eParent, eChild, eStatus = append(eParent, ed.Parent), append(eChild, ed.Child), append(eStatus, ed.Status)
			eCreated, eClosed = append(eCreated, ed.CreatedAt.UnixNano()), append(eClosed, cl)
		}
		if err := count(&rep.Edges, `INSERT INTO rolloutdb.subagent_edges AS cur (ws, parent, child, status, created_at, closed_at)
			SELECT $1, e.parent, e.child, e.status, e.created, e.closed
			FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[]) AS e(parent, child, status, created, closed)
			ON CONFLICT (ws, parent, child) DO UPDATE SET status = excluded.status, closed_at = excluded.closed_at
			WHERE cur.status IS DISTINCT FROM excluded.status
			  AND greatest(excluded.created_at, excluded.closed_at) > greatest(cur.created_at, cur.closed_at)
			RETURNING xmax = 0`, s.ws, eParent, eChild, eStatus, eCreated, eClosed); err != nil {
			return errors.Wrap(err, "edges")
		}

		var (
			dThread, dKind, dReason   []string
			dOff, dLen, dFirst, dLast []int64
			dSeen                     []int64
			dAckLost                  []bool
		)
		for _, d := range e.Diagnostics {
			dThread, dKind, dReason = append(dThread, d.Thread), append(dKind, d.Kind), append(dReason, d.Reason)
			dOff, dLen = append(dOff, d.Offset), append(dLen, d.Length)
			dFirst, dLast = append(dFirst, int64(d.FirstSeq)), append(dLast, int64(d.LastSeq))
			dSeen, dAckLost = append(dSeen, d.SeenAt.UnixNano()), append(dAckLost, d.AckLost)
		}
		if err := count(&rep.Diagnostics, `INSERT INTO rolloutdb.diagnostics (ws, thread_id, off, length, first_seq, last_seq, kind, reason, ack_lost, seen_at)
			SELECT $1, d.thread, d.off, d.length, d.first, d.last, d.kind, d.reason, d.ack_lost, d.seen
			FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::text[], $8::text[], $9::bool[], $10::bigint[])
				AS d(thread, off, length, first, last, kind, reason, ack_lost, seen)
			ON CONFLICT (ws, thread_id, off, first_seq, reason) DO NOTHING
			RETURNING true`, s.ws, dThread, dOff, dLen, dFirst, dLast, dKind, dReason, dAckLost, dSeen); err != nil {
			return errors.Wrap(err, "diagnostics")
		}

		return s.importPlans(ctx, tx, e.Plans, &rep.Plans)
	})
	if err != nil {
		return projection.BusinessImport{}, errors.Wrap(err, "pgindex: import business state")
	}
	return rep, nil
}

// importPlans replaces each thread's plan that the export set later than
// this workspace did. The plans it reads are locked until it commits: a
// host replacing one meanwhile waits, and its plan, newer, stays.
func (s *Store) importPlans(ctx context.Context, tx pgx.Tx, plans []projection.Plan, c *projection.RowCounts) error {
	if len(plans) == 0 {
		return nil
	}
	threads := make([]string, len(plans))
	for i, p := range plans {
		threads[i] = p.Thread
	}
	rows, err := tx.Query(ctx, `SELECT thread_id, updated_at FROM rolloutdb.plans WHERE ws = $1 AND thread_id = ANY($2) FOR UPDATE`, s.ws, threads)
	if err != nil {
		return errors.Wrap(err, "plans")
	}
	have := map[string]int64{}
	for rows.Next() {
		var id string
		var at int64
		if err := rows.Scan(&id, &at); err != nil {
			rows.Close()
			return errors.Wrap(err, "plans")
		}
		have[id] = max(have[id], at)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return errors.Wrap(err, "plans")
	}
	b := &pgx.Batch{}
	for _, p := range plans {
		at, ok := have[p.Thread]
		if ok && at >= p.UpdatedAt.UnixNano() {
			continue
		}
		if ok {
			c.Updated++
		} else {
			c.Added++
		}
		texts, statuses := make([]string, len(p.Steps)), make([]string, len(p.Steps))
		for i, st := range p.Steps {
			texts[i], statuses[i] = st.Text, st.Status
		}
		b.Queue(`DELETE FROM rolloutdb.plans WHERE ws = $1 AND thread_id = $2`, s.ws, p.Thread)
		b.Queue(`INSERT INTO rolloutdb.plans (ws, thread_id, step, text, status, updated_at)
			SELECT $1, $2, u.n - 1, u.text, u.status, $5 FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS u(text, status, n)`,
			s.ws, p.Thread, texts, statuses, p.UpdatedAt.UnixNano())
	}
	return errors.Wrap(sendBatch(ctx, tx, b), "plans")
}
