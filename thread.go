package rolloutdb

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/follow"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// ThreadOptions describe a new thread.
type ThreadOptions struct {
	// ID is the thread id. Default: a new time-ordered id. A host-given id
	// must pass rollout.ValidateThreadID.
	ID string
	// Source says where the thread came from. Default: kind "user".
	Source rollout.Source
	// ForkedFrom names the thread and turn this one was forked from.
	ForkedFrom *rollout.ForkRef
	// Metadata is host-defined and stored in the header.
	Metadata map[string]string
	// Created is the thread's creation time in its header. Default: now;
	// an import gives the source session's.
	Created time.Time
}

// Thread is an open thread: it holds the thread's writer lock until Close.
// It is safe for concurrent use.
type Thread struct {
	db *DB
	id string
	w  ThreadLog

	mu          sync.Mutex
	turn        *Turn           // the open turn, if any
	interrupted map[string]bool // turns Resume found without an end record
	archived    atomic.Bool     // archived while open: no new turns
	opened      rollout.OpenReport
	pub         *publishQueue     // orders its frames from write to publish
	follow      *follow.Publisher // hands its published frames to its followers
	fileID      uint64
}

// CreateThread creates a thread and opens it for writing. Its header record
// (seq 1) is durable when CreateThread returns.
func (db *DB) CreateThread(ctx context.Context, o ThreadOptions) (*Thread, error) {
	if o.ID == "" {
		o.ID = rollout.NewID()
	}
	if err := rollout.ValidateThreadID(o.ID); err != nil {
		return nil, err
	}
	if o.Source.Kind == "" {
		o.Source.Kind = rollout.SourceUser
	}
	hdr := rollout.ThreadOpened{
		ThreadID: o.ID, WorkspaceID: db.id, WorkspacePath: db.workspace, Source: o.Source,
		ForkedFrom: o.ForkedFrom, Host: db.opts.Host, Metadata: o.Metadata, Created: o.Created,
	}
	t, err := db.register(o.ID, func() (ThreadLog, error) { return db.log.Create(ctx, hdr) })
	if err != nil {
		return nil, err
	}
	if res, rec, ok := t.w.Created(); ok {
		// Nothing else can be queued yet: the handle is not returned.
		db.publish(&published{thread: o.ID, t: t, fileID: t.fileID, location: projection.LocationActive,
			res: res, recs: []rollout.Record{rec}, created: true})
	}
	if o.Source.Parent != "" {
		// The edge is what restore follows; it is open while the subagent
		// belongs to its parent's work.
		if err := db.state.OpenEdge(ctx, o.Source.Parent, o.ID); err != nil {
			_ = t.Close()
			return nil, err
		}
	}
	db.notify(o.ID, ThreadCreated)
	return t, nil
}

// OpenThread opens an existing active thread for writing. A torn tail left
// by a crash is cut (see rollout.Open); a second writer gets
// rollout.ErrThreadLocked.
func (db *DB) OpenThread(ctx context.Context, id string) (*Thread, error) {
	if err := rollout.ValidateThreadID(id); err != nil {
		return nil, err
	}
	var rep rollout.OpenReport
	th, err := db.register(id, func() (ThreadLog, error) {
		// From the last frame state.db applied, if the file still holds
		// it: a long thread opens in the time of its tail.
		from, _ := db.state.Anchor(ctx, id)
		var w ThreadLog
		var err error
		w, rep, err = db.log.Open(ctx, id, projection.LocationActive, from)
		if errors.Is(err, ErrNotFound) {
			if loc, _ := db.log.Locate(ctx, id); loc == projection.LocationArchived {
				return nil, errors.WithHint(errors.Wrapf(ErrThreadArchived, "thread %s", id), "restore it first (DB.Restore, rolloutctl restore)")
			}
		}
		return w, err
	})
	if err != nil {
		return nil, err
	}
	th.opened = rep
	return th, nil
}

// OpenReport says what opening the thread's rollout for writing found and
// did: a torn tail cut (an interrupted write of a crashed host, its bytes
// kept beside the file), zero bytes cut, damage found and left in place
// (found by checksums: a frame that checks and does not decode is not
// listed, Resume's report is). It is the zero value for a thread this DB
// created.
func (t *Thread) OpenReport() rollout.OpenReport { return t.opened }

// register opens a writer and records the thread as open in this DB.
func (db *DB) register(id string, open func() (ThreadLog, error)) (*Thread, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		return nil, ErrClosed
	}
	if _, ok := db.threads[id]; ok {
		return nil, errors.Wrapf(ErrThreadOpen, "%s", id)
	}
	w, err := open()
	if err != nil {
		return nil, err
	}
	t := &Thread{db: db, id: id, w: w, pub: newPublishQueue(), fileID: w.Header().FileID}
	db.threads[id] = t
	// What the file holds at open is durable.
	t.follow = db.follow.Publisher(id, t.fileID, w.End(), w.LastSeq())
	return t, nil
}

// ID returns the thread id.
func (t *Thread) ID() string { return t.id }

// Path returns where the log keeps the thread (its rollout file), for
// messages.
func (t *Thread) Path() string { return t.w.Path() }

// LastSeq returns the seq of the thread's last record.
func (t *Thread) LastSeq() uint64 { return t.w.LastSeq() }

// Close releases the thread's writer lock. An open turn stays open on disk
// (resume lists it in State.Interrupted).
func (t *Thread) Close() error {
	t.db.mu.Lock()
	if t.db.threads[t.id] == t {
		delete(t.db.threads, t.id)
	}
	t.db.mu.Unlock()
	err := t.w.Close()
	// Its followers stop relying on this handle's acknowledgements: from
	// here on another process may write the thread.
	t.follow.Close()
	if errors.Is(err, rollout.ErrClosed) {
		return nil
	}
	return err
}

// Append writes raw records as one frame; it is the escape hatch for kinds
// the facade has no method for yet (metadata updates, rollbacks).
func (t *Thread) Append(ctx context.Context, recs []rollout.Record, opt rollout.AppendOptions) (rollout.AppendResult, error) {
	return t.AppendWith(ctx, recs, opt, nil)
}

// append writes one frame and returns once it is durable and published.
func (t *Thread) append(ctx context.Context, recs []rollout.Record, opt rollout.AppendOptions) (rollout.AppendResult, error) {
	return t.appendWith(ctx, recs, opt, nil)
}

// appendWith is append, with business writes committed with the frame
// (checked by checkBusinessWrites).
func (t *Thread) appendWith(ctx context.Context, recs []rollout.Record, opt rollout.AppendOptions, biz *BusinessWrites) (rollout.AppendResult, error) {
	prep, err := t.w.Prepare(recs) // encoded outside every lock
	if err != nil {
		return rollout.AppendResult{}, err
	}
	p, ticket, err := t.write(ctx, prep, recs, opt, biz)
	prep.Release()
	if err != nil {
		return rollout.AppendResult{}, err
	}
	return t.acknowledge(p, ticket)
}
