package fleet

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// A Thread appends to one thread this host owns. It has the methods and
// the semantics of *rollout.Writer (Prepare, WritePrepared, Wait, Append,
// Sync, ...): an append is acknowledged once its commit round committed.
type Thread struct {
	l       *Log
	id      string
	tid     int64
	hdr     rollout.FileHeader
	epoch   int64
	inc     int64 // the host incarnation that owns it
	created *createdFrame

	mu sync.Mutex
	// Where the thread ends (mu): what was submitted.
	end     int64
	nextSeq uint64
	prev    int64 // offset of the last frame
	// What is acknowledged (mu).
	acked     int64
	ackedSeq  uint64
	ackedPrev int64
	last      *entry // the last frame submitted
	// doubt is set when a commit round failed with its outcome unknown:
	// frames from acked on may be in the database unacknowledged, and are
	// deleted before the next append (resolveLocked).
	doubt  bool
	broken error // fenced: nothing more is appended
	closed bool
	// round is the last commit round that took a frame of the thread,
	// back the round since which it has submitted again (the committer's
	// mu: gather).
	round, back uint64
}

type createdFrame struct {
	res rollout.AppendResult
	rec rollout.Record
}

func newThread(l *Log, id string, tid int64, hdr rollout.FileHeader, epoch, inc, end int64, lastSeq uint64, lastFrame int64) *Thread {
	return &Thread{l: l, id: id, tid: tid, hdr: hdr, epoch: epoch, inc: inc,
		end: end, nextSeq: lastSeq + 1, prev: lastFrame, acked: end, ackedSeq: lastSeq, ackedPrev: lastFrame}
}

// Prepare encodes recs as a frame (stamping Time where it is zero).
func (t *Thread) Prepare(recs []rollout.Record) (*rollout.Prepared, error) {
	return rollout.PrepareFrame(recs, t.l.opts.CompressAbove, time.Now())
}

// WritePrepared numbers a prepared frame and submits it to the next commit
// round; Wait acknowledges it.
func (t *Thread) WritePrepared(ctx context.Context, p *rollout.Prepared, opt rollout.AppendOptions) (rollout.Pending, error) {
	if err := ctx.Err(); err != nil {
		return rollout.Pending{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return rollout.Pending{}, &rollout.ClosedError{What: "fleet: thread " + t.id}
	}
	if t.broken != nil {
		return rollout.Pending{}, t.broken
	}
	if t.doubt {
		if err := t.resolveLocked(ctx); err != nil {
			return rollout.Pending{}, err
		}
	}
	last := t.nextSeq - 1
	if opt.IfLastSeq != 0 && opt.IfLastSeq != last {
		return rollout.Pending{}, errors.Wrapf(rollout.ErrConflict, "%s: expected last seq %d, it is %d", t.l.Path(t.id), opt.IfLastSeq, last)
	}
	frame := p.Seal(t.hdr.FileID, t.nextSeq, t.acked)
	recs := p.Records()
	res := rollout.AppendResult{FirstSeq: t.nextSeq, LastSeq: t.nextSeq + uint64(len(recs)) - 1,
		Offset: t.end, End: t.end + int64(len(frame)), DataCRC: p.DataCRC()}
	e := &entry{t: t, off: t.end, seq: t.nextSeq, epoch: t.epoch, data: bytes.Clone(frame), done: make(chan struct{}), res: res}
	if err := t.l.com.submit(e); err != nil {
		return rollout.Pending{}, err
	}
	t.end, t.nextSeq, t.prev, t.last = res.End, res.LastSeq+1, res.Offset, e
	return rollout.NewPending(res, e), nil
}

// Wait returns once the frame's commit round committed, with Append's
// result, or its error: ErrUnavailable (not acknowledged; retry once the
// database is back), ErrFenced (the thread is no longer this host's).
func (t *Thread) Wait(p rollout.Pending) (rollout.AppendResult, error) {
	e, ok := p.Ticket().(*entry)
	if !ok {
		return rollout.AppendResult{}, errors.New("fleet: Wait of a frame another writer wrote")
	}
	if err := e.Wait(); err != nil {
		return rollout.AppendResult{}, err
	}
	return e.res, nil // the committer advanced the acknowledged end (committed)
}

// committed is told by the committer that e committed, before it tells
// e's waiter: what is committed is acknowledged, whether or not its
// appender has called Wait yet, and a resolve never cuts it. A thread's
// frames commit in order.
func (t *Thread) committed(e *entry) {
	t.mu.Lock()
	if e.res.End > t.acked {
		t.acked, t.ackedSeq, t.ackedPrev = e.res.End, e.res.LastSeq, e.res.Offset
	}
	t.mu.Unlock()
}

// failed is told by the committer that e and every later frame of the
// thread were not committed. fenced is permanent; otherwise the thread is
// in doubt until resolved.
func (t *Thread) failed(err error, fenced bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fenced {
		if t.broken == nil {
			t.broken = err
		}
		return
	}
	t.doubt = true
}

// resolveLocked deletes what a commit of unknown outcome may have left
// past the acknowledged end, under the thread's fence, and rewinds the
// thread there. It waits for the frames still in flight first.
func (t *Thread) resolveLocked(ctx context.Context) error {
	if e := t.last; e != nil {
		t.mu.Unlock()
		<-e.done
		t.mu.Lock()
		if t.closed {
			return &rollout.ClosedError{What: "fleet: thread " + t.id}
		}
		if !t.doubt || t.broken != nil {
			// Another appender resolved it meanwhile (and may have
			// frames in flight past it), or the thread is fenced.
			return t.broken
		}
	}
	return t.resolveTxLocked(ctx)
}

// resolveTxLocked is the resolve's transaction; no frame of t is in
// flight.
func (t *Thread) resolveTxLocked(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, t.l.opts.CommitTimeout)
	defer cancel()
	host, inc := t.l.opts.Host, t.inc
	// The lost commit may still be on its way (held in the network, say)
	// and land after the delete: the thread's epoch is incremented, under
	// the row lock that every insert holds (FOR KEY SHARE) until it
	// commits, so an insert of the old attempt either committed before
	// the delete (and goes) or finds the new epoch (and inserts nothing).
	var gone int64
	epoch := t.epoch + 1
	fenced := false
	err := pgx.BeginTxFunc(ctx, t.l.pool, readCommitted, func(tx pgx.Tx) error {
		var tid int64
		err := tx.QueryRow(ctx, `SELECT tid FROM rolloutdb.threads th
			WHERE th.tid = $1 AND th.epoch = $2 AND th.owner = $3 AND th.owner_inc = $4
			  AND EXISTS (SELECT 1 FROM rolloutdb.hosts h WHERE h.ws = th.ws AND h.host = $3 AND h.incarnation = $4 AND h.lease_until > now())
			FOR UPDATE OF th`, t.tid, t.epoch, host, inc).Scan(&tid)
		if errors.Is(err, pgx.ErrNoRows) {
			fenced = true
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE rolloutdb.threads SET epoch = $2 WHERE tid = $1`, t.tid, epoch); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM rolloutdb.frames WHERE tid = $1 AND off >= $2`, t.tid, t.acked)
		gone = tag.RowsAffected()
		return err
	})
	if err != nil {
		return classify(err, "resolve the unacknowledged frames of "+t.id)
	}
	if fenced {
		t.broken = errors.Wrapf(ErrFenced, "thread %s", t.id)
		return t.broken
	}
	t.epoch = epoch
	t.end, t.nextSeq, t.prev, t.doubt, t.last = t.acked, t.ackedSeq+1, t.ackedPrev, false, nil
	if gone > 0 {
		// Followers may have yielded what went: they look now.
		t.l.note.noteChange(change{tid: t.tid, end: t.acked})
	}
	return nil
}

// Append writes recs as one frame and waits for its commit.
func (t *Thread) Append(ctx context.Context, recs []rollout.Record, opt rollout.AppendOptions) (rollout.AppendResult, error) {
	p, err := t.Prepare(recs)
	if err != nil {
		return rollout.AppendResult{}, err
	}
	defer p.Release()
	pend, err := t.WritePrepared(ctx, p, opt)
	if err != nil {
		return rollout.AppendResult{}, err
	}
	return t.Wait(pend)
}

// Sync waits until every frame submitted is committed.
func (t *Thread) Sync(ctx context.Context) error {
	t.mu.Lock()
	e := t.last
	t.mu.Unlock()
	if e == nil {
		return nil
	}
	select {
	case <-e.done:
		return e.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// LastSeq returns the seq of the last record written.
func (t *Thread) LastSeq() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nextSeq - 1
}

// End returns the offset where the next frame goes.
func (t *Thread) End() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.end
}

// Header returns the thread's rollout file header.
func (t *Thread) Header() rollout.FileHeader { return t.hdr }

// Created returns the header frame of a thread Create made.
func (t *Thread) Created() (rollout.AppendResult, rollout.Record, bool) {
	if t.created == nil {
		return rollout.AppendResult{}, rollout.Record{}, false
	}
	return t.created.res, t.created.rec, true
}

// Path names the thread in messages.
func (t *Thread) Path() string { return t.l.Path(t.id) }

// Epoch returns the ownership epoch this handle appends under.
func (t *Thread) Epoch() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.epoch
}

// Close waits for the frames in flight and releases the thread, so that
// another host may open it at once.
func (t *Thread) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return &rollout.ClosedError{What: "fleet: thread " + t.id}
	}
	t.closed = true
	e := t.last
	t.mu.Unlock()
	defer t.l.unclaim(t.id) // then, released or not, this Log may open it again
	if e != nil {
		<-e.done
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.l.opts.CommitTimeout)
	defer cancel()
	t.mu.Lock()
	if t.doubt && t.broken == nil {
		// What a lost commit may have left goes before the thread is
		// free: the next owner must not find it (a retry elsewhere would
		// then land twice).
		if err := t.resolveTxLocked(ctx); err != nil {
			t.mu.Unlock()
			return errors.WithHint(err, "the thread stays this host's until its lease expires or this process opens it again")
		}
	}
	epoch := t.epoch
	t.mu.Unlock()
	_, err := t.l.pool.Exec(ctx, `UPDATE rolloutdb.threads SET owner = NULL, owner_inc = NULL
		WHERE tid = $1 AND epoch = $2 AND owner = $3 AND owner_inc = $4`, t.tid, epoch, t.l.opts.Host, t.inc)
	if err != nil {
		// The lease frees it in time.
		return classify(err, "release thread "+t.id)
	}
	return nil
}
