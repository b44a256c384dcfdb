package pgindex

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// Business state: rows that exist only here, written only through these
// methods, with projection.Store's semantics (projection/business.go).
// No projection row references them and they reference none, so nothing
// a rebuild or a catch-up does can remove them. They are keyed by the
// workspace and the thread id; whether the thread still exists is the
// caller's business. A write is acknowledged once PostgreSQL committed
// it.

func checkID(id string) error { return rollout.ValidateThreadID(id) }

// writeBusiness sends one batch of writes, queued by queue, in one
// implicit transaction.
func (s *Store) writeBusiness(ctx context.Context, what string, queue func(w *Writes)) error {
	b := &pgx.Batch{}
	w := s.Writes(b)
	queue(w)
	if err := w.Err(); err != nil {
		return err
	}
	return errors.Wrapf(s.pool.SendBatch(ctx, b).Close(), "pgindex: %s", what)
}

// AddGoal records a new active goal for a thread.
func (s *Store) AddGoal(ctx context.Context, thread, text string) (projection.Goal, error) {
	var g projection.Goal
	err := s.writeBusiness(ctx, "add goal", func(w *Writes) { w.AddGoal(thread, text, &g) })
	return g, err
}

// SetGoalStatus changes a goal's status.
func (s *Store) SetGoalStatus(ctx context.Context, id int64, status string) error {
	return s.writeBusiness(ctx, "set goal status", func(w *Writes) { w.SetGoalStatus(id, status) })
}

// Goals lists a thread's goals, oldest first.
func (s *Store) Goals(ctx context.Context, thread string) ([]projection.Goal, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT id, thread_id, text, status, created_at, updated_at FROM rolloutdb.goals
		WHERE ws = $1 AND thread_id = $2 ORDER BY id`, s.ws, thread)
	if err != nil {
		return nil, errors.Wrap(err, "pgindex: read goals")
	}
	defer rows.Close()
	out := []projection.Goal{}
	for rows.Next() {
		var g projection.Goal
		var c, u int64
		if err := rows.Scan(&g.ID, &g.Thread, &g.Text, &g.Status, &c, &u); err != nil {
			return nil, errors.Wrap(err, "pgindex: read goals")
		}
		g.CreatedAt, g.UpdatedAt = time.Unix(0, c).UTC(), time.Unix(0, u).UTC()
		out = append(out, g)
	}
	return out, errors.Wrap(rows.Err(), "pgindex: read goals")
}

// SetPlan replaces a thread's plan.
func (s *Store) SetPlan(ctx context.Context, thread string, steps []projection.PlanStep) error {
	return s.writeBusiness(ctx, "set plan", func(w *Writes) { w.SetPlan(thread, steps) })
}

// Plan returns a thread's plan (empty if none).
func (s *Store) Plan(ctx context.Context, thread string) ([]projection.PlanStep, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT text, status FROM rolloutdb.plans WHERE ws = $1 AND thread_id = $2 ORDER BY step`, s.ws, thread)
	if err != nil {
		return nil, errors.Wrap(err, "pgindex: read plan")
	}
	defer rows.Close()
	out := []projection.PlanStep{}
	for rows.Next() {
		var st projection.PlanStep
		if err := rows.Scan(&st.Text, &st.Status); err != nil {
			return nil, errors.Wrap(err, "pgindex: read plan")
		}
		out = append(out, st)
	}
	return out, errors.Wrap(rows.Err(), "pgindex: read plan")
}

// OpenEdge records (or reopens) a subagent edge.
func (s *Store) OpenEdge(ctx context.Context, parent, child string) error {
	return s.writeBusiness(ctx, "open edge", func(w *Writes) { w.OpenEdge(parent, child) })
}

// CloseEdge closes a subagent edge (the child finished or was detached).
func (s *Store) CloseEdge(ctx context.Context, parent, child string) error {
	return s.writeBusiness(ctx, "close edge", func(w *Writes) { w.CloseEdge(parent, child) })
}

// Edges lists subagent edges.
func (s *Store) Edges(ctx context.Context, f projection.EdgeFilter) ([]projection.Edge, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT parent, child, status, created_at, closed_at FROM rolloutdb.subagent_edges
		WHERE ws = $1 AND ($2 = '' OR parent = $2) AND ($3 = '' OR child = $3) AND ($4 = '' OR status = $4) ORDER BY created_at, parent, child`,
		s.ws, f.Parent, f.Child, f.Status)
	if err != nil {
		return nil, errors.Wrap(err, "pgindex: read edges")
	}
	defer rows.Close()
	out := []projection.Edge{}
	for rows.Next() {
		var e projection.Edge
		var c, cl int64
		if err := rows.Scan(&e.Parent, &e.Child, &e.Status, &c, &cl); err != nil {
			return nil, errors.Wrap(err, "pgindex: read edges")
		}
		e.CreatedAt = time.Unix(0, c).UTC()
		if cl != 0 {
			t := time.Unix(0, cl).UTC()
			e.ClosedAt = &t
		}
		out = append(out, e)
	}
	return out, errors.Wrap(rows.Err(), "pgindex: read edges")
}

// Send puts a message in a thread's mailbox.
func (s *Store) Send(ctx context.Context, from, to, body string) (projection.Message, error) {
	var m projection.Message
	err := s.writeBusiness(ctx, "send", func(w *Writes) { w.Send(from, to, body, &m) })
	return m, err
}

// Inbox lists a thread's messages, oldest first; unread only if asked.
func (s *Store) Inbox(ctx context.Context, to string, unreadOnly bool) ([]projection.Message, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT id, from_thread, to_thread, body, created_at, read_at FROM rolloutdb.mailbox
		WHERE ws = $1 AND to_thread = $2 AND (NOT $3 OR read_at = 0) ORDER BY id`, s.ws, to, unreadOnly)
	if err != nil {
		return nil, errors.Wrap(err, "pgindex: read mailbox")
	}
	defer rows.Close()
	out := []projection.Message{}
	for rows.Next() {
		var m projection.Message
		var c, r int64
		if err := rows.Scan(&m.ID, &m.From, &m.To, &m.Body, &c, &r); err != nil {
			return nil, errors.Wrap(err, "pgindex: read mailbox")
		}
		m.CreatedAt = time.Unix(0, c).UTC()
		if r != 0 {
			t := time.Unix(0, r).UTC()
			m.ReadAt = &t
		}
		out = append(out, m)
	}
	return out, errors.Wrap(rows.Err(), "pgindex: read mailbox")
}

// MarkRead marks a message read (once: a message read already keeps its
// time). projection.ErrNoSuchRow if there is no such message.
func (s *Store) MarkRead(ctx context.Context, id int64) error {
	return s.writeBusiness(ctx, "mark read", func(w *Writes) { w.MarkRead(id) })
}

// RecordResumeReport keeps what a resume skipped as diagnostics (each
// once, however often it is seen).
func (s *Store) RecordResumeReport(ctx context.Context, thread string, rep recovery.Report) error {
	if len(rep.Skipped) == 0 {
		return nil
	}
	if err := s.live(); err != nil {
		return err
	}
	b := &pgx.Batch{}
	now := time.Now().UnixNano()
	for _, sk := range rep.Skipped {
		b.Queue(`INSERT INTO rolloutdb.diagnostics (ws, thread_id, off, length, first_seq, last_seq, kind, reason, ack_lost, seen_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (ws, thread_id, off, first_seq, reason) DO NOTHING`,
			s.ws, thread, sk.Offset, sk.Length, int64(sk.FirstSeq), int64(sk.LastSeq), sk.Kind, sk.Reason, sk.AckLost, now)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return sendBatch(ctx, tx, b) })
	return errors.Wrap(err, "pgindex: record diagnostics")
}

// Diagnostics lists a thread's diagnostics in log order ("" for all
// threads).
func (s *Store) Diagnostics(ctx context.Context, thread string) ([]projection.Diagnostic, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT thread_id, off, length, first_seq, last_seq, kind, reason, ack_lost, seen_at FROM rolloutdb.diagnostics
		WHERE ws = $1 AND ($2 = '' OR thread_id = $2) ORDER BY thread_id, off, first_seq`, s.ws, thread)
	if err != nil {
		return nil, errors.Wrap(err, "pgindex: read diagnostics")
	}
	defer rows.Close()
	out := []projection.Diagnostic{}
	for rows.Next() {
		var d projection.Diagnostic
		var first, last, seen int64
		if err := rows.Scan(&d.Thread, &d.Offset, &d.Length, &first, &last, &d.Kind, &d.Reason, &d.AckLost, &seen); err != nil {
			return nil, errors.Wrap(err, "pgindex: read diagnostics")
		}
		d.FirstSeq, d.LastSeq, d.SeenAt = uint64(first), uint64(last), time.Unix(0, seen).UTC()
		out = append(out, d)
	}
	return out, errors.Wrap(rows.Err(), "pgindex: read diagnostics")
}

// DeleteBusinessState removes every business row of the threads (for
// deleting them for good): goals, plans, edges either way, mailbox
// entries either way, diagnostics.
func (s *Store) DeleteBusinessState(ctx context.Context, threads []string) error {
	if err := s.live(); err != nil {
		return err
	}
	if threads == nil {
		threads = []string{}
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, q := range []string{
			`DELETE FROM rolloutdb.goals WHERE ws = $1 AND thread_id = ANY($2)`,
			`DELETE FROM rolloutdb.plans WHERE ws = $1 AND thread_id = ANY($2)`,
			`DELETE FROM rolloutdb.subagent_edges WHERE ws = $1 AND (parent = ANY($2) OR child = ANY($2))`,
			`DELETE FROM rolloutdb.mailbox WHERE ws = $1 AND (from_thread = ANY($2) OR to_thread = ANY($2))`,
			`DELETE FROM rolloutdb.diagnostics WHERE ws = $1 AND thread_id = ANY($2)`,
		} {
			b.Queue(q, s.ws, threads)
		}
		return sendBatch(ctx, tx, b)
	})
	return errors.Wrap(err, "pgindex: delete business state")
}
