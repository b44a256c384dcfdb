package fleet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// An append with other writes: one frame of one thread, and statements of
// the caller's (the index's business state, which this package knows
// nothing of), committed together or not at all, under the thread's
// fence.
//
// It does not join the commit rounds: a round is one statement for many
// threads' frames, and the other writes of one frame would have to wait
// for the fence of that frame alone, in a transaction the round's other
// threads do not need. It goes to PostgreSQL by itself, after every frame
// of its thread submitted before it has committed (or failed: then it
// fails too), as one batch: the fence and the frame's insert first, then
// the caller's statements, sent in one message and run in one implicit
// transaction (pgx.Batch), so that, like a round, it never waits on this
// host between its statements. A fence that does not hold raises
// (rolloutdb.fence), and so does any statement of the caller's that
// fails: the whole batch rolls back.
//
// What it costs: a commit of its own (one round trip and one WAL flush)
// where an append rides a round shared with other threads. Writes of
// business state are rare beside appends (a goal or a plan changes a few
// times a turn, an item streams many), so the rounds stay as they are.
//
// A batch whose answer was lost (the connection broke or timed out
// after it was sent) may have committed. Unlike a round's frames, it
// cannot be deleted after the fact: what the caller's statements
// changed is not this package's to undo. So it is settled instead: the
// thread's row is locked FOR UPDATE, which waits for the batch if it is
// still running (its fence holds FOR KEY SHARE until it commits), the
// epoch is incremented if the thread is still this host's (a batch that
// arrives later is fenced), and the frame looked up: there with its
// bytes, the batch committed, whole; not there, it never will. Until the
// commit's deadline the settle is retried; past it the append fails with
// ErrInDoubt and the handle appends nothing more (Close, then Open the
// thread again: the frame is in it, or not, with the other writes).

// ErrInDoubt is returned by WritePreparedWith when PostgreSQL did not
// answer its commit, nor a look at its outcome after, before the commit
// timeout: the frame and the other writes committed together or not at
// all, and this host does not know which. The handle appends nothing
// more: Close it and open the thread again, and read its tail (the frame
// is there or not, and the other writes with it). Do not retry blindly.
var ErrInDoubt = errors.New("fleet: the append's outcome is unknown")

// errFenceRaised marks the fence's error in the batch.
var errFenceRaised = errors.New("fleet: fence raised")

// WritePreparedWith writes a prepared frame as WritePrepared does, in a
// transaction of its own that also runs the statements queue adds to the
// batch it is given (after the frame's): both commit or neither does. It
// returns once that is settled, with a Pending whose Wait returns at
// once. queue's context ends at the commit's deadline (CommitTimeout
// after the call).
//
// An error from queue, or a statement of queue's that fails, writes
// nothing (the error is returned, with its callback's wrapping; marked
// ErrUnavailable when PostgreSQL was not reached). A frame
// of the thread submitted before it that fails fails it too. ErrFenced:
// the thread is not this host's (nothing written). ErrUnavailable:
// PostgreSQL was not reached, or the batch was lost and is known not to
// have committed; retrying puts it in once. ErrInDoubt: see there. While
// it runs, the thread's other calls wait for it.
func (t *Thread) WritePreparedWith(ctx context.Context, p *rollout.Prepared, opt rollout.AppendOptions, queue func(ctx context.Context, b *pgx.Batch) error) (rollout.Pending, error) {
	if err := ctx.Err(); err != nil {
		return rollout.Pending{}, err
	}
	submitted := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	// The frames before it commit first, in their rounds; one that fails
	// meanwhile fails it too (nothing of a thread commits after a frame
	// that did not). One that failed before it was called left the thread
	// in doubt, resolved here as by WritePrepared.
	var failed error
	for {
		if t.closed {
			return rollout.Pending{}, &rollout.ClosedError{What: "fleet: thread " + t.id}
		}
		if t.broken != nil {
			return rollout.Pending{}, t.broken
		}
		e := t.last
		if e == nil || e.isDone() {
			break
		}
		t.mu.Unlock()
		<-e.done
		t.mu.Lock()
		if e.err != nil {
			failed = e.err
		}
	}
	if failed != nil {
		return rollout.Pending{}, errors.Wrap(failed, "an earlier frame of the thread was not committed")
	}
	if t.doubt {
		if err := t.resolveTxLocked(ctx); err != nil {
			return rollout.Pending{}, err
		}
	}
	if opt.IfLastSeq != 0 && opt.IfLastSeq != t.nextSeq-1 {
		return rollout.Pending{}, errors.Wrapf(rollout.ErrConflict, "%s: expected last seq %d, it is %d", t.l.Path(t.id), opt.IfLastSeq, t.nextSeq-1)
	}
	frame := p.Seal(t.hdr.FileID, t.nextSeq, t.acked)
	recs := p.Records()
	res := rollout.AppendResult{FirstSeq: t.nextSeq, LastSeq: t.nextSeq + uint64(len(recs)) - 1,
		Offset: t.end, End: t.end + int64(len(frame)), DataCRC: p.DataCRC()}
	e := &entry{t: t, off: t.end, seq: t.nextSeq, epoch: t.epoch, data: bytes.Clone(frame), res: res,
		submitted: submitted, done: make(chan struct{})}
	b := &pgx.Batch{}
	b.Queue(`WITH ok AS (
			SELECT th.tid FROM rolloutdb.threads th
			WHERE th.tid = $1 AND th.epoch = $2 AND th.owner = $3 AND th.owner_inc = $4
			  AND EXISTS (SELECT 1 FROM rolloutdb.hosts h WHERE h.ws = th.ws AND h.host = $3 AND h.incarnation = $4 AND h.lease_until > now())
			FOR KEY SHARE OF th
		), f AS (
			INSERT INTO rolloutdb.frames (tid, off, seq, epoch, data) SELECT tid, $5, $6, $2, $7 FROM ok RETURNING 1
		)
		SELECT rolloutdb.fence(EXISTS (SELECT 1 FROM f), $8)`,
		t.tid, e.epoch, t.l.opts.Host, t.inc, e.off, int64(e.seq), e.data, t.id).QueryRow(func(row pgx.Row) error {
		var held bool
		err := row.Scan(&held)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == fencedCode {
			return errors.Mark(err, errFenceRaised)
		}
		return err
	})
	deadline := submitted.Add(t.l.opts.CommitTimeout)
	qctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	err := queue(qctx, b)
	if err == nil {
		err = qctx.Err() // nothing is sent past the deadline
	}
	if err != nil {
		if isUnavailable(err) {
			return rollout.Pending{}, unavailable(err, "append to "+t.id+" (nothing was sent)")
		}
		return rollout.Pending{}, err
	}
	err = t.sendLocked(ctx, deadline, b)
	c := t.l.com
	switch {
	case err == nil:
		t.committedLocked(e)
	case errors.Is(err, errFenceRaised):
		t.broken = errors.WithHint(errors.Wrapf(ErrFenced, "thread %s: frame at %d not written", t.id, e.off),
			"the thread was taken over by another host, or this host's lease expired: open it again")
		c.failed.Add(1)
		return rollout.Pending{}, t.broken
	case !isUnavailable(err):
		// A definite failure: the batch rolled back.
		c.failed.Add(1)
		return rollout.Pending{}, errors.Wrapf(err, "fleet: append to %s (nothing was written)", t.id)
	default:
		committed, serr := t.settleLocked(ctx, deadline, e)
		switch {
		case serr != nil:
			e.err = errors.WithHint(errors.Mark(errors.Wrapf(serr, "fleet: append to %s at %d: outcome unknown", t.id, e.off), ErrInDoubt),
				"the frame and the writes with it committed together or not at all: close the thread, open it again and read its tail before writing them again")
			t.broken = e.err
			t.last = e
			close(e.done)
			c.failed.Add(1)
			return rollout.Pending{}, e.err
		case committed:
			t.committedLocked(e)
		case t.broken != nil:
			c.failed.Add(1)
			return rollout.Pending{}, t.broken
		default:
			c.failed.Add(1)
			return rollout.Pending{}, unavailable(err, "append to "+t.id+" (not committed)")
		}
	}
	return rollout.NewPending(res, e), nil
}

func (e *entry) isDone() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// sendLocked sends the batch and reads its answer, before deadline
// whatever ctx says (a batch abandoned part way is a commit of unknown
// outcome).
func (t *Thread) sendLocked(ctx context.Context, deadline time.Time, b *pgx.Batch) error {
	lose := t.l.testing.lose.Swap(0)
	if lose == loseRequest {
		return errors.Wrap(context.DeadlineExceeded, "fleet: test: the batch was lost on its way")
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	err := t.l.pool.SendBatch(ctx, b).Close()
	if err == nil && lose == loseAnswer {
		return errors.Wrap(context.DeadlineExceeded, "fleet: test: the answer was lost")
	}
	return err
}

// What a test has the next WritePreparedWith lose (Log.testing.lose).
const (
	loseRequest = 1 + iota // the batch never reaches PostgreSQL
	loseAnswer             // it commits, and its answer never comes back
)

// committedLocked records e as committed and acknowledged.
func (t *Thread) committedLocked(e *entry) {
	t.acked, t.ackedSeq, t.ackedPrev = e.res.End, e.res.LastSeq, e.res.Offset
	t.end, t.nextSeq, t.prev, t.last = e.res.End, e.res.LastSeq+1, e.res.Offset, e
	close(e.done)
	c := t.l.com
	c.rounds.Add(1)
	c.frames.Add(1)
	c.bytes.Add(int64(len(e.data)))
	t.l.note.noteRound([]*entry{e})
}

// settleLocked finds out whether e's batch committed, retrying until
// deadline while PostgreSQL is unreachable; an error says it could not.
// The thread is fenced (t.broken) if it is no longer this host's.
func (t *Thread) settleLocked(ctx context.Context, deadline time.Time, e *entry) (bool, error) {
	backoff := 10 * time.Millisecond
	for {
		sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		committed, err := t.settleTx(sctx, e)
		cancel()
		if err == nil {
			return committed, nil
		}
		if !isUnavailable(err) || time.Now().Add(backoff).After(deadline) {
			return false, err
		}
		t.l.com.retries.Add(1)
		time.Sleep(backoff)
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// settleTx is the settle's transaction (see the comment at the top).
func (t *Thread) settleTx(ctx context.Context, e *entry) (bool, error) {
	host := t.l.opts.Host
	var committed, ours bool
	err := pgx.BeginTxFunc(ctx, t.l.pool, readCommitted, func(tx pgx.Tx) error {
		var epoch int64
		var owner *string
		var inc *int64
		// The row first, then the lease: a join's other rows are not read
		// again after the lock waited (as in Open).
		if err := tx.QueryRow(ctx, `SELECT epoch, owner, owner_inc FROM rolloutdb.threads WHERE tid = $1 FOR UPDATE`, t.tid).
			Scan(&epoch, &owner, &inc); err != nil {
			return err
		}
		var live bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM rolloutdb.hosts WHERE ws = $1 AND host = $2 AND incarnation = $3 AND lease_until > now())`,
			t.l.ws, host, t.inc).Scan(&live); err != nil {
			return err
		}
		ours = live && epoch == e.epoch && owner != nil && *owner == host && inc != nil && *inc == t.inc
		if ours {
			if _, err := tx.Exec(ctx, `UPDATE rolloutdb.threads SET epoch = $2 WHERE tid = $1`, t.tid, e.epoch+1); err != nil {
				return err
			}
		}
		var sum []byte
		err := tx.QueryRow(ctx, `SELECT sha256(data) FROM rolloutdb.frames WHERE tid = $1 AND off = $2`, t.tid, e.off).Scan(&sum)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		want := sha256.Sum256(e.data)
		committed = err == nil && bytes.Equal(sum, want[:])
		return err
	})
	if err != nil {
		return false, err
	}
	if ours {
		t.epoch = e.epoch + 1
	} else {
		t.broken = errors.WithHint(errors.Wrapf(ErrFenced, "thread %s", t.id),
			"the thread was taken over by another host, or this host's lease expired: open it again")
	}
	return committed, nil
}
