package rolloutdb

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
)

// Business is the workspace's business state: what state.db holds that
// the rollouts do not (goals, plans, subagent edges, the mailbox) and the
// diagnostics replay left. It cannot be rebuilt: a state.db lost or
// corrupt loses it, and Open says so (DB.StateReport). Every write is
// durable when it returns, on its own: to commit writes with a record,
// both or neither, give them to the append (BusinessWrites; a fleet
// workspace only).
type Business struct {
	s  BusinessState
	db *DB // its errors: a fleet's failure to reach PostgreSQL is ErrUnavailable
}

// Business returns the workspace's business state.
func (db *DB) Business() Business { return Business{s: db.state, db: db} }

// AddGoal adds an open goal to a thread.
func (b Business) AddGoal(ctx context.Context, thread, text string) (projection.Goal, error) {
	v, err := b.s.AddGoal(ctx, thread, text)
	return v, b.db.indexErr(err)
}

// SetGoalStatus changes a goal's status (projection.GoalActive, GoalDone, GoalAbandoned).
func (b Business) SetGoalStatus(ctx context.Context, id int64, status string) error {
	return b.db.indexErr(b.s.SetGoalStatus(ctx, id, status))
}

// Goals lists a thread's goals.
func (b Business) Goals(ctx context.Context, thread string) ([]projection.Goal, error) {
	v, err := b.s.Goals(ctx, thread)
	return v, b.db.indexErr(err)
}

// SetPlan replaces a thread's plan.
func (b Business) SetPlan(ctx context.Context, thread string, steps []projection.PlanStep) error {
	return b.db.indexErr(b.s.SetPlan(ctx, thread, steps))
}

// Plan returns a thread's plan.
func (b Business) Plan(ctx context.Context, thread string) ([]projection.PlanStep, error) {
	v, err := b.s.Plan(ctx, thread)
	return v, b.db.indexErr(err)
}

// OpenEdge records that child is parent's subagent and belongs to its
// work: archive and restore take it along.
func (b Business) OpenEdge(ctx context.Context, parent, child string) error {
	return b.db.indexErr(b.s.OpenEdge(ctx, parent, child))
}

// CloseEdge records that the subagent's work for its parent is done.
func (b Business) CloseEdge(ctx context.Context, parent, child string) error {
	return b.db.indexErr(b.s.CloseEdge(ctx, parent, child))
}

// Edges lists subagent edges.
func (b Business) Edges(ctx context.Context, f projection.EdgeFilter) ([]projection.Edge, error) {
	v, err := b.s.Edges(ctx, f)
	return v, b.db.indexErr(err)
}

// Send puts a message in a thread's mailbox.
func (b Business) Send(ctx context.Context, from, to, body string) (projection.Message, error) {
	v, err := b.s.Send(ctx, from, to, body)
	return v, b.db.indexErr(err)
}

// Inbox lists a thread's messages, oldest first.
func (b Business) Inbox(ctx context.Context, to string, unreadOnly bool) ([]projection.Message, error) {
	v, err := b.s.Inbox(ctx, to, unreadOnly)
	return v, b.db.indexErr(err)
}

// MarkRead marks a message read.
func (b Business) MarkRead(ctx context.Context, id int64) error {
	return b.db.indexErr(b.s.MarkRead(ctx, id))
}

// Diagnostics lists what replay and the projection found wrong in a
// thread's rollout (skipped and rejected records, damaged regions).
func (b Business) Diagnostics(ctx context.Context, thread string) ([]projection.Diagnostic, error) {
	v, err := b.s.Diagnostics(ctx, thread)
	return v, b.db.indexErr(err)
}

// AddDiagnostics keeps what a reader of the thread's history found wrong
// in it (each once, however often it is added): an import's damaged
// lines, kind "import:<format>" and offset the line.
func (b Business) AddDiagnostics(ctx context.Context, thread string, rep recovery.Report) error {
	return b.db.indexErr(b.s.RecordResumeReport(ctx, thread, rep))
}

// Export returns every row of the business state, with its ids and
// times, read at one instant: what Import of another workspace takes.
func (b Business) Export(ctx context.Context) (projection.BusinessExport, error) {
	v, err := b.s.ExportBusiness(ctx)
	return v, b.db.indexErr(err)
}

// Import merges business state exported from another workspace (origin
// is that workspace's id, DB.WorkspaceID) into this one, in one
// transaction, idempotently and incrementally: a goal or message already
// imported from origin is updated (the newer status wins, a message read
// stays read), never added twice; a plan is replaced when the export's is
// newer; edges and diagnostics are added or updated the same way
// (pgindex.Store.ImportBusiness says how). Nothing is deleted. Only a
// fleet workspace imports (rolloutctl fleet push uses it); a local
// workspace returns an error matching errors.ErrUnsupported.
func (b Business) Import(ctx context.Context, origin string, e projection.BusinessExport) (projection.BusinessImport, error) {
	im, ok := b.s.(businessImporter)
	if !ok {
		return projection.BusinessImport{}, errors.Wrap(errors.ErrUnsupported, "rolloutdb: a local workspace does not import business state")
	}
	v, err := im.ImportBusiness(ctx, origin, e)
	return v, b.db.indexErr(err)
}

// Settle waits until the projector and the search index have applied
// every append acknowledged before it (reads do not need it: they catch
// up themselves; a benchmark or a test measuring a settled store does).
func (db *DB) Settle(ctx context.Context) error { return db.state.Settle(ctx) }

// CheckIntegrity runs SQLite's full integrity check of state.db and the
// search index (its cost grows with them: Open does not run it).
func (db *DB) CheckIntegrity(ctx context.Context) (projection.IntegrityReport, error) {
	return db.state.CheckIntegrity(ctx)
}
