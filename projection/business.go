package projection

import (
	"context"
	"database/sql"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// Business state: rows that exist only here, written only through these
// methods. No projection row references them and they reference none, so
// nothing a rebuild or read-repair does can remove them. They are keyed by
// thread id; whether the thread still exists is the caller's business
// (deleting a thread deletes them through DeleteBusinessState).

// Goal statuses.
const (
	GoalActive    = "active"
	GoalDone      = "done"
	GoalAbandoned = "abandoned"
)

// Goal is a goal set for a thread.
type Goal struct {
	ID        int64     `json:"id"`
	Thread    string    `json:"thread"`
	Text      string    `json:"text"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// ErrNoSuchRow is returned when the goal, message or edge named does not
// exist.
var ErrNoSuchRow = errors.New("projection: no such row")

func checkID(id string) error { return rollout.ValidateThreadID(id) }

// AddGoal records a new active goal for a thread.
func (s *Store) AddGoal(ctx context.Context, thread, text string) (_ Goal, err error) {
	defer s.guard(&err)
	if err := checkID(thread); err != nil {
		return Goal{}, err
	}
	now := time.Now().UTC()
	g := Goal{Thread: thread, Text: text, Status: GoalActive, CreatedAt: now, UpdatedAt: now}
	err = s.writeDurable(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO goals (thread_id, text, status, created_at, updated_at) VALUES (?,?,?,?,?)`,
			thread, text, g.Status, now.UnixNano(), now.UnixNano())
		if err != nil {
			return errors.Wrap(err, "add goal")
		}
		g.ID, err = res.LastInsertId()
		return err
	})
	return g, err
}

// SetGoalStatus changes a goal's status.
func (s *Store) SetGoalStatus(ctx context.Context, id int64, status string) (err error) {
	defer s.guard(&err)
	return s.writeDurable(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE goals SET status = ?, updated_at = ? WHERE id = ?`, status, time.Now().UnixNano(), id)
		return mustAffect(res, err, "goal %d", id)
	})
}

// Goals lists a thread's goals, oldest first.
func (s *Store) Goals(ctx context.Context, thread string) (_ []Goal, err error) {
	defer s.guard(&err)
	if err := s.live(); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, thread_id, text, status, created_at, updated_at FROM goals WHERE thread_id = ? ORDER BY id`, thread)
	if err != nil {
		return nil, errors.Wrap(err, "read goals")
	}
	defer rows.Close()
	out := []Goal{}
	for rows.Next() {
		var g Goal
		var c, u int64
		if err := rows.Scan(&g.ID, &g.Thread, &g.Text, &g.Status, &c, &u); err != nil {
			return nil, errors.Wrap(err, "read goals")
		}
		g.CreatedAt, g.UpdatedAt = time.Unix(0, c).UTC(), time.Unix(0, u).UTC()
		out = append(out, g)
	}
	return out, errors.Wrap(rows.Err(), "read goals")
}

// PlanStep is one step of a thread's plan.
type PlanStep struct {
	Text   string `json:"text"`
	Status string `json:"status"` // e.g. pending, in_progress, completed
}

// SetPlan replaces a thread's plan.
func (s *Store) SetPlan(ctx context.Context, thread string, steps []PlanStep) (err error) {
	defer s.guard(&err)
	if err := checkID(thread); err != nil {
		return err
	}
	return s.writeDurable(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM plans WHERE thread_id = ?`, thread); err != nil {
			return errors.Wrap(err, "set plan")
		}
		now := time.Now().UnixNano()
		for i, st := range steps {
			if _, err := tx.ExecContext(ctx, `INSERT INTO plans (thread_id, step, text, status, updated_at) VALUES (?,?,?,?,?)`,
				thread, i, st.Text, st.Status, now); err != nil {
				return errors.Wrap(err, "set plan")
			}
		}
		return nil
	})
}

// Plan returns a thread's plan (empty if none).
func (s *Store) Plan(ctx context.Context, thread string) (_ []PlanStep, err error) {
	defer s.guard(&err)
	if err := s.live(); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT text, status FROM plans WHERE thread_id = ? ORDER BY step`, thread)
	if err != nil {
		return nil, errors.Wrap(err, "read plan")
	}
	defer rows.Close()
	out := []PlanStep{}
	for rows.Next() {
		var st PlanStep
		if err := rows.Scan(&st.Text, &st.Status); err != nil {
			return nil, errors.Wrap(err, "read plan")
		}
		out = append(out, st)
	}
	return out, errors.Wrap(rows.Err(), "read plan")
}

// Edge statuses.
const (
	EdgeOpen   = "open"
	EdgeClosed = "closed"
)

// Edge is a parent→child subagent edge.
type Edge struct {
	Parent    string     `json:"parent"`
	Child     string     `json:"child"`
	Status    string     `json:"status"`
	CreatedAt time.Time  `json:"created_at"`
	ClosedAt  *time.Time `json:"closed_at,omitempty"`
}

// OpenEdge records (or reopens) a subagent edge.
func (s *Store) OpenEdge(ctx context.Context, parent, child string) (err error) {
	defer s.guard(&err)
	if err := errors.CombineErrors(checkID(parent), checkID(child)); err != nil {
		return err
	}
	if parent == child {
		return errors.Newf("projection: thread %s cannot be its own subagent", parent)
	}
	return s.writeDurable(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO subagent_edges (parent, child, status, created_at) VALUES (?,?,?,?)
			ON CONFLICT (parent, child) DO UPDATE SET status = excluded.status, closed_at = 0`, parent, child, EdgeOpen, time.Now().UnixNano())
		return errors.Wrap(err, "open edge")
	})
}

// CloseEdge closes a subagent edge (the child finished or was detached).
func (s *Store) CloseEdge(ctx context.Context, parent, child string) (err error) {
	defer s.guard(&err)
	return s.writeDurable(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE subagent_edges SET status = ?, closed_at = ? WHERE parent = ? AND child = ?`,
			EdgeClosed, time.Now().UnixNano(), parent, child)
		return mustAffect(res, err, "edge %s -> %s", parent, child)
	})
}

// EdgeFilter selects edges; empty fields match all.
type EdgeFilter struct {
	Parent, Child string
	Status        string
}

// Edges lists subagent edges.
func (s *Store) Edges(ctx context.Context, f EdgeFilter) (_ []Edge, err error) {
	defer s.guard(&err)
	if err := s.live(); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT parent, child, status, created_at, closed_at FROM subagent_edges
		WHERE (?1 = '' OR parent = ?1) AND (?2 = '' OR child = ?2) AND (?3 = '' OR status = ?3) ORDER BY created_at, parent, child`,
		f.Parent, f.Child, f.Status)
	if err != nil {
		return nil, errors.Wrap(err, "read edges")
	}
	defer rows.Close()
	out := []Edge{}
	for rows.Next() {
		var e Edge
		var c, cl int64
		if err := rows.Scan(&e.Parent, &e.Child, &e.Status, &c, &cl); err != nil {
			return nil, errors.Wrap(err, "read edges")
		}
		e.CreatedAt = time.Unix(0, c).UTC()
		if cl != 0 {
			t := time.Unix(0, cl).UTC()
			e.ClosedAt = &t
		}
		out = append(out, e)
	}
	return out, errors.Wrap(rows.Err(), "read edges")
}

// Message is a mailbox entry from one thread to another.
type Message struct {
	ID        int64      `json:"id"`
	From      string     `json:"from"`
	To        string     `json:"to"`
	Body      string     `json:"body"`
	CreatedAt time.Time  `json:"created_at"`
	ReadAt    *time.Time `json:"read_at,omitempty"`
}

// Send puts a message in a thread's mailbox.
func (s *Store) Send(ctx context.Context, from, to, body string) (_ Message, err error) {
	defer s.guard(&err)
	if err := errors.CombineErrors(checkID(from), checkID(to)); err != nil {
		return Message{}, err
	}
	m := Message{From: from, To: to, Body: body, CreatedAt: time.Now().UTC()}
	err = s.writeDurable(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO mailbox (from_thread, to_thread, body, created_at) VALUES (?,?,?,?)`,
			from, to, body, m.CreatedAt.UnixNano())
		if err != nil {
			return errors.Wrap(err, "send")
		}
		m.ID, err = res.LastInsertId()
		return err
	})
	return m, err
}

// Inbox lists a thread's messages, oldest first; unread only if asked.
func (s *Store) Inbox(ctx context.Context, to string, unreadOnly bool) (_ []Message, err error) {
	defer s.guard(&err)
	if err := s.live(); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, from_thread, to_thread, body, created_at, read_at FROM mailbox
		WHERE to_thread = ? AND (NOT ? OR read_at = 0) ORDER BY id`, to, unreadOnly)
	if err != nil {
		return nil, errors.Wrap(err, "read mailbox")
	}
	defer rows.Close()
	out := []Message{}
	for rows.Next() {
		var m Message
		var c, r int64
		if err := rows.Scan(&m.ID, &m.From, &m.To, &m.Body, &c, &r); err != nil {
			return nil, errors.Wrap(err, "read mailbox")
		}
		m.CreatedAt = time.Unix(0, c).UTC()
		if r != 0 {
			t := time.Unix(0, r).UTC()
			m.ReadAt = &t
		}
		out = append(out, m)
	}
	return out, errors.Wrap(rows.Err(), "read mailbox")
}

// MarkRead marks a message read.
func (s *Store) MarkRead(ctx context.Context, id int64) (err error) {
	defer s.guard(&err)
	return s.writeDurable(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE mailbox SET read_at = ? WHERE id = ? AND read_at = 0`, time.Now().UnixNano(), id)
		if err == nil {
			if n, _ := res.RowsAffected(); n == 0 {
				var one int
				if err := tx.QueryRowContext(ctx, `SELECT 1 FROM mailbox WHERE id = ?`, id).Scan(&one); errors.Is(err, sql.ErrNoRows) {
					return errors.Wrapf(ErrNoSuchRow, "message %d", id)
				}
			}
		}
		return errors.Wrap(err, "mark read")
	})
}

// Diagnostic is a rejected record or damaged region seen while projecting
// or resuming a rollout.
type Diagnostic struct {
	Thread   string    `json:"thread"`
	Offset   int64     `json:"offset"`
	Length   int64     `json:"length"`
	FirstSeq uint64    `json:"first_seq,omitempty"`
	LastSeq  uint64    `json:"last_seq,omitempty"`
	Kind     string    `json:"kind,omitempty"`
	Reason   string    `json:"reason"`
	AckLost  bool      `json:"ack_lost,omitempty"`
	SeenAt   time.Time `json:"seen_at"`
}

// RecordResumeReport keeps what a resume skipped as diagnostics (each
// once, however often it is seen).
func (s *Store) RecordResumeReport(ctx context.Context, thread string, rep recovery.Report) (err error) {
	defer s.guard(&err)
	if len(rep.Skipped) == 0 {
		return nil
	}
	return s.writeDurable(ctx, func(tx *sql.Tx) error {
		for _, sk := range rep.Skipped {
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO diagnostics (thread_id, offset, length, first_seq, last_seq, kind, reason, ack_lost, seen_at)
				VALUES (?,?,?,?,?,?,?,?,?)`, thread, sk.Offset, sk.Length, int64(sk.FirstSeq), int64(sk.LastSeq), sk.Kind, sk.Reason, sk.AckLost, time.Now().UnixNano()); err != nil {
				return errors.Wrap(err, "record diagnostics")
			}
		}
		return nil
	})
}

// Diagnostics lists a thread's diagnostics in file order ("" for all
// threads).
func (s *Store) Diagnostics(ctx context.Context, thread string) (_ []Diagnostic, err error) {
	defer s.guard(&err)
	if err := s.live(); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT thread_id, offset, length, first_seq, last_seq, kind, reason, ack_lost, seen_at FROM diagnostics
		WHERE (?1 = '' OR thread_id = ?1) ORDER BY thread_id, offset, first_seq`, thread)
	if err != nil {
		return nil, errors.Wrap(err, "read diagnostics")
	}
	defer rows.Close()
	out := []Diagnostic{}
	for rows.Next() {
		var d Diagnostic
		var first, last, seen int64
		if err := rows.Scan(&d.Thread, &d.Offset, &d.Length, &first, &last, &d.Kind, &d.Reason, &d.AckLost, &seen); err != nil {
			return nil, errors.Wrap(err, "read diagnostics")
		}
		d.FirstSeq, d.LastSeq, d.SeenAt = uint64(first), uint64(last), time.Unix(0, seen).UTC()
		out = append(out, d)
	}
	return out, errors.Wrap(rows.Err(), "read diagnostics")
}

// DeleteBusinessState removes every business row of the threads (for
// deleting them for good): goals, plans, edges either way, mailbox entries
// either way, diagnostics.
func (s *Store) DeleteBusinessState(ctx context.Context, threads []string) (err error) {
	defer s.guard(&err)
	return s.writeDurable(ctx, func(tx *sql.Tx) error {
		for _, id := range threads {
			for _, q := range []string{
				`DELETE FROM goals WHERE thread_id = ?1`,
				`DELETE FROM plans WHERE thread_id = ?1`,
				`DELETE FROM subagent_edges WHERE parent = ?1 OR child = ?1`,
				`DELETE FROM mailbox WHERE from_thread = ?1 OR to_thread = ?1`,
				`DELETE FROM diagnostics WHERE thread_id = ?1`,
			} {
				if _, err := tx.ExecContext(ctx, q, id); err != nil {
					return errors.Wrapf(err, "delete business state of %s", id)
				}
			}
		}
		return nil
	})
}

func mustAffect(res sql.Result, err error, format string, args ...any) error {
	if err != nil {
		return errors.Wrapf(err, format, args...)
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return errors.Wrapf(ErrNoSuchRow, format, args...)
	}
	return nil
}
