package pgindex

import (
	"context"
	"fmt"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rolloutdb/rolloutdb/projection"
)

// Writes queues writes of business state into a pgx.Batch, so that they
// commit with whatever else the batch holds, in its one implicit
// transaction, or not at all: the facade puts them in a fleet append's
// batch (fleet.Thread.WritePreparedWith), after the frame. The Store's
// own write methods send a batch of one kind of write each. A write that
// names a row that is not there (a goal, an edge, a message) raises in
// SQL (rolloutdb.index_expect), so that the batch rolls back whole; its
// error then matches projection.ErrNoSuchRow. The results (a goal or a
// message, with its id) are set when the batch's answer is read, or when
// the write is queued if Reserve drew its id; either way they hold only
// if the batch committed.
type Writes struct {
	s   *Store
	b   *pgx.Batch
	now time.Time // one time for every write of the batch
	err error
	// ids Reserve drew for the goals and messages queued next.
	goalIDs, messageIDs []int64
}

// Writes returns a Writes that queues into b.
func (s *Store) Writes(b *pgx.Batch) *Writes {
	w := &Writes{s: s, b: b, now: time.Now().UTC()}
	w.err = s.live()
	return w
}

// Reserve draws the ids of the next goals AddGoal and the next messages
// Send queue, in a statement of its own, so that the results are known
// whatever becomes of the batch's answer: a fleet append whose answer
// was lost, and that found its batch committed, still has them.
func (w *Writes) Reserve(ctx context.Context, goals, messages int) error {
	if w.err != nil || goals+messages == 0 {
		return w.err
	}
	var g, m []int64
	err := w.s.pool.QueryRow(ctx, `SELECT
			ARRAY(SELECT nextval(pg_get_serial_sequence('rolloutdb.goals', 'id')) FROM generate_series(1, $1)),
			ARRAY(SELECT nextval(pg_get_serial_sequence('rolloutdb.mailbox', 'id')) FROM generate_series(1, $2))`,
		goals, messages).Scan(&g, &m)
	if err != nil {
		return errors.Wrap(err, "pgindex: reserve ids")
	}
	w.goalIDs, w.messageIDs = append(w.goalIDs, g...), append(w.messageIDs, m...)
	return nil
}

// Err returns the first argument a write refused (a thread id that is
// not one, an edge of a thread to itself): then the batch must not be
// sent, since it lacks that write.
func (w *Writes) Err() error { return w.err }

// check records err as the Writes' error; false if there is one.
func (w *Writes) check(err error) bool {
	if w.err == nil {
		w.err = err
	}
	return w.err == nil
}

// noSuchRowCode is the SQLSTATE rolloutdb.index_expect raises (a class
// of its own).
const noSuchRowCode = "RDI01"

// expect queues a statement whose one row is index_expect's answer: what
// names the row it wants.
func (w *Writes) expect(what, sql string, args ...any) {
	w.b.Queue(sql, args...).QueryRow(func(row pgx.Row) error {
		var ok bool
		err := row.Scan(&ok)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == noSuchRowCode {
			return errors.Wrapf(projection.ErrNoSuchRow, "%s", what)
		}
		return err
	})
}

// AddGoal queues a new active goal of thread; g is set to it once the
// batch commits.
func (w *Writes) AddGoal(thread, text string, g *projection.Goal) {
	if !w.check(checkID(thread)) {
		return
	}
	goal := projection.Goal{Thread: thread, Text: text, Status: projection.GoalActive, CreatedAt: w.now, UpdatedAt: w.now}
	if len(w.goalIDs) > 0 {
		goal.ID, w.goalIDs = w.goalIDs[0], w.goalIDs[1:]
		*g = goal
		w.b.Queue(`INSERT INTO rolloutdb.goals (id, ws, thread_id, text, status, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6)`,
			goal.ID, w.s.ws, thread, text, goal.Status, w.now.UnixNano())
		return
	}
	w.b.Queue(`INSERT INTO rolloutdb.goals (ws, thread_id, text, status, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5) RETURNING id`,
		w.s.ws, thread, text, goal.Status, w.now.UnixNano()).QueryRow(func(row pgx.Row) error {
		*g = goal
		return row.Scan(&g.ID)
	})
}

// SetGoalStatus queues a change of a goal's status.
func (w *Writes) SetGoalStatus(id int64, status string) {
	what := fmt.Sprintf("goal %d", id)
	w.expect(what, `WITH u AS (
			UPDATE rolloutdb.goals SET status = $3, updated_at = $4 WHERE ws = $1 AND id = $2 RETURNING 1
		) SELECT rolloutdb.index_expect(EXISTS (SELECT 1 FROM u), $5)`,
		w.s.ws, id, status, w.now.UnixNano(), what)
}

// SetPlan queues the replacement of a thread's plan.
func (w *Writes) SetPlan(thread string, steps []projection.PlanStep) {
	if !w.check(checkID(thread)) {
		return
	}
	texts, statuses := make([]string, len(steps)), make([]string, len(steps))
	for i, st := range steps {
		texts[i], statuses[i] = st.Text, st.Status
	}
	w.b.Queue(`DELETE FROM rolloutdb.plans WHERE ws = $1 AND thread_id = $2`, w.s.ws, thread)
	w.b.Queue(`INSERT INTO rolloutdb.plans (ws, thread_id, step, text, status, updated_at)
		SELECT $1, $2, u.n - 1, u.text, u.status, $5 FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS u(text, status, n)`,
		w.s.ws, thread, texts, statuses, w.now.UnixNano())
}

// OpenEdge queues a subagent edge opened (or reopened).
func (w *Writes) OpenEdge(parent, child string) {
	if !w.check(errors.CombineErrors(checkID(parent), checkID(child))) {
		return
	}
	if parent == child {
		w.check(errors.Newf("pgindex: thread %s cannot be its own subagent", parent))
		return
	}
	w.b.Queue(`INSERT INTO rolloutdb.subagent_edges (ws, parent, child, status, created_at) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (ws, parent, child) DO UPDATE SET status = excluded.status, closed_at = 0`,
		w.s.ws, parent, child, projection.EdgeOpen, w.now.UnixNano())
}

// CloseEdge queues a subagent edge closed.
func (w *Writes) CloseEdge(parent, child string) {
	what := "edge " + parent + " -> " + child
	w.expect(what, `WITH u AS (
			UPDATE rolloutdb.subagent_edges SET status = $4, closed_at = $5 WHERE ws = $1 AND parent = $2 AND child = $3 RETURNING 1
		) SELECT rolloutdb.index_expect(EXISTS (SELECT 1 FROM u), $6)`,
		w.s.ws, parent, child, projection.EdgeClosed, w.now.UnixNano(), what)
}

// Send queues a message to a thread's mailbox; m is set to it once the
// batch commits.
func (w *Writes) Send(from, to, body string, m *projection.Message) {
	if !w.check(errors.CombineErrors(checkID(from), checkID(to))) {
		return
	}
	msg := projection.Message{From: from, To: to, Body: body, CreatedAt: w.now}
	if len(w.messageIDs) > 0 {
		msg.ID, w.messageIDs = w.messageIDs[0], w.messageIDs[1:]
		*m = msg
		w.b.Queue(`INSERT INTO rolloutdb.mailbox (id, ws, from_thread, to_thread, body, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			msg.ID, w.s.ws, from, to, body, w.now.UnixNano())
		return
	}
	w.b.Queue(`INSERT INTO rolloutdb.mailbox (ws, from_thread, to_thread, body, created_at) VALUES ($1, $2, $3, $4, $5) RETURNING id`,
		w.s.ws, from, to, body, w.now.UnixNano()).QueryRow(func(row pgx.Row) error {
		*m = msg
		return row.Scan(&m.ID)
	})
}

// MarkRead queues a message marked read (a message read already keeps
// its time).
func (w *Writes) MarkRead(id int64) {
	what := fmt.Sprintf("message %d", id)
	w.expect(what, `WITH m AS (SELECT id FROM rolloutdb.mailbox WHERE ws = $1 AND id = $2),
		u AS (UPDATE rolloutdb.mailbox SET read_at = $3 WHERE ws = $1 AND id = $2 AND read_at = 0)
		SELECT rolloutdb.index_expect(EXISTS (SELECT 1 FROM m), $4)`,
		w.s.ws, id, w.now.UnixNano(), what)
}
