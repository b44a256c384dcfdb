package rolloutdb

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/fleet/pgindex"
	"github.com/rolloutdb/rolloutdb/journal"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// FleetOptions configure a fleet workspace (Open with a postgres:// DSN).
// The zero value works.
type FleetOptions struct {
	// Workspace is the workspace's name in the database; several share
	// one database. Default: the DSN's workspace parameter, else
	// "default".
	Workspace string
	// HostName names this host process to the fleet: the owner an
	// ErrThreadLocked names, so a router can forward to it. It must be
	// unique among live processes. Default: machine name, pid and a
	// random suffix.
	HostName string
	// LeaseTTL is how long a host's threads stay its own after it stops
	// renewing its lease (it died, or was cut off): another host can take
	// them over after at most this long. Default 10s.
	LeaseTTL time.Duration
	// CommitTimeout is how long an append waits for PostgreSQL before it
	// fails with ErrUnavailable (not acknowledged). Default 2s.
	CommitTimeout time.Duration
	// RequireSyncStandby refuses to open unless PostgreSQL commits to a
	// synchronous standby: an acknowledged append then survives the loss
	// of the primary.
	RequireSyncStandby bool
	// RoundWindow is how long this host's next commit round may wait for
	// the threads of its last round to append again, so that appenders
	// that each wait for their acknowledgement share one round instead of
	// alternating between two half-full ones (fleet.Options.RoundWindow).
	// A host whose threads do not come back at once does not wait.
	// Default 200µs; negative: never wait.
	RoundWindow time.Duration
}

// Errors of a fleet workspace (see package fleet).
var (
	// ErrUnavailable is returned when PostgreSQL cannot be reached in
	// time: an append that returns it is not acknowledged (it matches
	// ErrNotDurable too), and retrying it later puts it in the thread
	// once.
	ErrUnavailable = fleet.ErrUnavailable
	// ErrFenced is returned by an append of a host that lost the thread
	// (its lease expired, another host took the thread over): nothing was
	// written. Open the thread again.
	ErrFenced = fleet.ErrFenced
	// ErrInDoubt is returned by an append with business writes
	// (BusinessWrites) when PostgreSQL answered neither its commit nor a
	// look at its outcome after, within the commit timeout: the frame and
	// the writes committed together or not at all, and this host does not
	// know which. The thread's handle appends nothing more: close it,
	// open the thread again and read its tail (Resume) before writing
	// them again.
	ErrInDoubt = fleet.ErrInDoubt
)

// isFleetDSN reports whether a workspace is a fleet's: a postgres:// URL.
func isFleetDSN(dir string) bool {
	_, _, err := fleet.SplitDSN(dir)
	return err == nil
}

// openFleet opens a fleet workspace: threads, index and artifacts in the
// PostgreSQL database at dsn.
func openFleet(ctx context.Context, dsn string, opts Options) (*DB, error) {
	fo := opts.Fleet
	fl, err := fleet.Open(ctx, dsn, fleet.Options{
		Workspace: fo.Workspace, Host: fo.HostName, LeaseTTL: fo.LeaseTTL, CommitTimeout: fo.CommitTimeout,
		RequireSyncStandby: fo.RequireSyncStandby, RoundWindow: fo.RoundWindow, CompressAbove: max(opts.CompressAbove, 0), Logger: opts.Logger,
	})
	if err != nil {
		return nil, err
	}
	files := fl.Files()
	db := &DB{workspace: fl.Path(""), root: "/", opts: opts, fs: files, threads: map[string]*Thread{}, fleet: fl}
	db.private.importFrame, db.private.maxImportRecord = defaultImportFrame, defaultMaxImportRecord
	db.id = fl.WorkspaceID()
	db.follow = db.newFollowHub(false)
	db.log = fleetLog{fl}
	if opts.Artifacts.FS == nil {
		opts.Artifacts.FS = files
	}
	db.arts = artifacts.New("/", opts.Artifacts)
	idx, err := pgindex.Open(ctx, fl.Pool(), fl.Workspace(), fleetSource{fl}, pgindex.Options{
		WorkspaceID: db.id, Logger: opts.Logger, MaxLag: opts.MaxProjectionLag,
	})
	if err != nil {
		return nil, errors.CombineErrors(err, fl.Close())
	}
	db.state = idx
	if opts.MeterProvider != nil {
		if db.metrics, err = db.registerMetrics(opts.MeterProvider); err != nil {
			return nil, errors.CombineErrors(errors.Wrap(err, "rolloutdb: register metrics"), db.Close())
		}
	}
	return db, nil
}

// fleetLog is the Log of a fleet workspace (package fleet).
type fleetLog struct{ l *fleet.Log }

var _ Log = fleetLog{}

// notFound marks a fleet's missing thread as the facade's ErrNotFound.
func notFound(err error) error {
	if vfs.IsNotExist(err) {
		return errors.Mark(err, projection.ErrNotFound)
	}
	return err
}

func (f fleetLog) Create(ctx context.Context, opened rollout.ThreadOpened) (ThreadLog, error) {
	t, err := f.l.Create(ctx, opened)
	if err != nil {
		return nil, err
	}
	return t, nil
}

func (f fleetLog) Open(ctx context.Context, id, loc string, _ rollout.Anchor) (ThreadLog, rollout.OpenReport, error) {
	t, err := f.l.Open(ctx, id, loc)
	if err != nil {
		return nil, rollout.OpenReport{}, notFound(err)
	}
	return t, rollout.OpenReport{}, nil
}

func (f fleetLog) Locate(ctx context.Context, id string) (string, error) {
	loc, err := f.l.Locate(ctx, id)
	return loc, notFound(err)
}

func (f fleetLog) List(ctx context.Context, loc string) ([]string, error) { return f.l.List(ctx, loc) }

func (f fleetLog) Read(ctx context.Context, id string) (ThreadData, error) {
	s, err := f.l.Read(ctx, id)
	if err != nil {
		return ThreadData{}, notFound(err)
	}
	return ThreadData{ReaderAt: s, Size: s.Size(), Path: f.l.Path(id), Location: s.Location(), Close: s.Close}, nil
}

func (f fleetLog) Free(ctx context.Context, id string) error { return notFound(f.l.Free(ctx, id)) }

func (f fleetLog) Move(ctx context.Context, id, from, to string, held ThreadLog) error {
	th, _ := held.(*fleet.Thread)
	return notFound(f.l.Move(ctx, id, from, to, th))
}

// Delete deletes in one transaction: nothing is left behind to queue.
func (f fleetLog) Delete(ctx context.Context, id string, queue func(leftovers ...string) error) error {
	if err := queue(); err != nil {
		return err
	}
	return notFound(f.l.Delete(ctx, id))
}

func (f fleetLog) Leftover(string) (string, bool)      { return "", false }
func (f fleetLog) Purge(context.Context, string) error { return nil }
func (f fleetLog) Write(ctx context.Context, id string, frames [][]rollout.Record) error {
	return f.l.Write(ctx, id, frames)
}

// Metrics maps the fleet's commit rounds onto the journal's counters: a
// round is a group commit.
func (f fleetLog) Metrics() journal.Metrics {
	m := f.l.Metrics()
	return journal.Metrics{Commits: m.Rounds, Entries: m.Frames, Bytes: m.Bytes, Failures: m.Failed}
}

// Close is the DB's: the index shares the log's connections, so the log
// closes after it (closeFleet).
func (f fleetLog) Close() error { return nil }

// fleetSource is the fleet log as the fleet index's source of records.
type fleetSource struct{ l *fleet.Log }

func (s fleetSource) Read(ctx context.Context, id string) (pgindex.Snapshot, error) {
	snap, err := s.l.Read(ctx, id)
	if err != nil {
		return nil, err
	}
	return snap, nil
}

func (s fleetSource) Path(id string) string { return s.l.Path(id) }

// writeBusiness writes a prepared frame and business writes in one
// transaction of the fleet's database: the frame through its thread
// (fleet.Thread.WritePreparedWith), the writes queued after it by the
// index (pgindex.Writes), the ids of new goals and messages drawn first
// so that they are known whatever becomes of the commit's answer.
func (db *DB) writeBusiness(ctx context.Context, w ThreadLog, prep *rollout.Prepared, opt rollout.AppendOptions, biz *BusinessWrites) (rollout.Pending, error) {
	th, ok := w.(*fleet.Thread)
	idx, ok2 := db.state.(*pgindex.Store)
	if !ok || !ok2 {
		return rollout.Pending{}, errors.Wrap(errors.ErrUnsupported, "rolloutdb: this workspace's log cannot commit business state with a record")
	}
	goals := make([]projection.Goal, len(biz.ops))
	msgs := make([]projection.Message, len(biz.ops))
	p, err := th.WritePreparedWith(ctx, prep, opt, func(ctx context.Context, b *pgx.Batch) error {
		q := idx.Writes(b)
		ng, nm := 0, 0
		for _, op := range biz.ops {
			switch op.kind {
			case opAddGoal:
				ng++
			case opSend:
				nm++
			}
		}
		if err := q.Reserve(ctx, ng, nm); err != nil {
			return err
		}
		for i, op := range biz.ops {
			switch op.kind {
			case opAddGoal:
				q.AddGoal(op.a, op.text, &goals[i])
			case opSetGoalStatus:
				q.SetGoalStatus(op.id, op.text)
			case opSetPlan:
				q.SetPlan(op.a, op.steps)
			case opOpenEdge:
				q.OpenEdge(op.a, op.b)
			case opCloseEdge:
				q.CloseEdge(op.a, op.b)
			case opSend:
				q.Send(op.a, op.b, op.text, &msgs[i])
			case opMarkRead:
				q.MarkRead(op.id)
			}
		}
		return q.Err()
	})
	if err != nil {
		return p, err
	}
	for i, op := range biz.ops {
		switch op.kind {
		case opAddGoal:
			*op.goal = goals[i]
		case opSend:
			*op.msg = msgs[i]
		}
	}
	biz.spent = true
	return p, nil
}
