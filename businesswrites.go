package rolloutdb

import (
	"bytes"
	"context"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// BusinessWrites are writes of business state (goals, plans, subagent
// edges, the mailbox) that an append commits in one transaction with its
// frame (Thread.AppendWith, Commit.Business): when the append returns
// nil, the frame and every write are durable; when it fails, none is.
// They are fenced as the frame is: a host that lost the thread writes
// neither and gets ErrFenced. A write that names a row that is not there
// (SetGoalStatus of no goal) fails the append with ErrNoSuchRow, and a
// thread id that is not one with rollout.ErrInvalidThreadID, both before
// or instead of anything written. One exception to "none": ErrInDoubt,
// when PostgreSQL answered neither the commit nor a look at it after.
//
// Only a fleet workspace can do this: its frames and its business state
// are in one PostgreSQL database. A local workspace's rollout and
// state.db are two files, and no write makes two files change together;
// there the append is refused, nothing written, with an error that
// matches errors.ErrUnsupported. A host that runs on both writes the
// frame first and then the business state through DB.Business, and knows
// a crash between them may leave the frame alone.
//
// The zero value is empty (an append with it is a plain append). Build it
// with the methods, give it to one append, and retry that append with it
// if it fails; once it committed it is spent, and another append with it
// is refused. It is not safe for concurrent use.
type BusinessWrites struct {
	ops   []businessOp
	spent bool
}

type businessOpKind uint8

const (
	opAddGoal businessOpKind = iota + 1
	opSetGoalStatus
	opSetPlan
	opOpenEdge
	opCloseEdge
	opSend
	opMarkRead
)

// businessOp is one write: a and b are its thread, parent and child, or
// sender and recipient; text a goal's text, a message's body or a status.
type businessOp struct {
	kind  businessOpKind
	a, b  string
	text  string
	id    int64
	steps []projection.PlanStep
	goal  *projection.Goal
	msg   *projection.Message
}

// AddGoal adds an active goal to a thread. The goal returned is filled in
// (id, times) when the append commits.
func (w *BusinessWrites) AddGoal(thread, text string) *projection.Goal {
	g := &projection.Goal{}
	w.ops = append(w.ops, businessOp{kind: opAddGoal, a: thread, text: text, goal: g})
	return g
}

// SetGoalStatus changes a goal's status (projection.GoalActive, GoalDone,
// GoalAbandoned).
func (w *BusinessWrites) SetGoalStatus(id int64, status string) {
	w.ops = append(w.ops, businessOp{kind: opSetGoalStatus, id: id, text: status})
}

// SetPlan replaces a thread's plan.
func (w *BusinessWrites) SetPlan(thread string, steps []projection.PlanStep) {
	w.ops = append(w.ops, businessOp{kind: opSetPlan, a: thread, steps: append([]projection.PlanStep(nil), steps...)})
}

// OpenEdge records that child is parent's subagent (Business.OpenEdge).
func (w *BusinessWrites) OpenEdge(parent, child string) {
	w.ops = append(w.ops, businessOp{kind: opOpenEdge, a: parent, b: child})
}

// CloseEdge records that the subagent's work for its parent is done.
func (w *BusinessWrites) CloseEdge(parent, child string) {
	w.ops = append(w.ops, businessOp{kind: opCloseEdge, a: parent, b: child})
}

// Send puts a message in a thread's mailbox. The message returned is
// filled in (id, time) when the append commits.
func (w *BusinessWrites) Send(from, to, body string) *projection.Message {
	m := &projection.Message{}
	w.ops = append(w.ops, businessOp{kind: opSend, a: from, b: to, text: body, msg: m})
	return m
}

// MarkRead marks a message read.
func (w *BusinessWrites) MarkRead(id int64) {
	w.ops = append(w.ops, businessOp{kind: opMarkRead, id: id})
}

// Len returns how many writes there are.
func (w *BusinessWrites) Len() int {
	if w == nil {
		return 0
	}
	return len(w.ops)
}

// AppendWith writes raw records as one frame, as Append does, and the
// business writes w in the same transaction: both or neither (see
// BusinessWrites). A local workspace refuses a non-empty w (an error
// matching errors.ErrUnsupported), writing nothing.
func (t *Thread) AppendWith(ctx context.Context, recs []rollout.Record, opt rollout.AppendOptions, w *BusinessWrites) (rollout.AppendResult, error) {
	if err := t.db.checkBusinessWrites(w); err != nil {
		return rollout.AppendResult{}, err
	}
	// The projector keeps the records until it applies them; the caller
	// keeps its slice.
	own := make([]rollout.Record, len(recs))
	for i, r := range recs {
		r.Body = bytes.Clone(r.Body)
		own[i] = r
	}
	res, err := t.appendWith(ctx, own, opt, w)
	for i := range recs {
		recs[i].Seq, recs[i].Time = own[i].Seq, own[i].Time
	}
	return res, err
}

// checkBusinessWrites refuses business writes this workspace cannot
// commit with a frame, or that were committed already.
func (db *DB) checkBusinessWrites(w *BusinessWrites) error {
	switch {
	case w.Len() == 0:
		return nil
	case w.spent:
		return errors.New("rolloutdb: these business writes were committed already (with an earlier append)")
	case db.fleet == nil:
		return errors.WithHint(errors.Wrap(errors.ErrUnsupported,
			"rolloutdb: a local workspace cannot commit business state with a record (the rollout and state.db are two files); nothing was written"),
			"append the record, then write the business state through DB.Business (not atomic), or use a fleet workspace")
	}
	return nil
}
