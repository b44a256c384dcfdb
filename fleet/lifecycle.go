package fleet

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The locations of a thread that follow and watch tell apart (the facade
// names them; Move takes any).
const (
	locActive   = "active"
	locArchived = "archived"
)

// ownerOf returns the live owner of a locked thread row other than the
// handle held (nil if it is free): what refuses a move, a delete or an
// open.
func (l *Log) ownerOf(ctx context.Context, tx pgx.Tx, id string, owner *string, ownerInc *int64, epoch int64, held *Thread) (*OwnerError, error) {
	if owner == nil {
		return nil, nil
	}
	if held != nil && held.id == id && *owner == l.opts.Host && ownerInc != nil && *ownerInc == held.inc && epoch == held.Epoch() {
		return nil, nil
	}
	var live bool
	var until time.Time
	var inc int64
	err := tx.QueryRow(ctx, `SELECT lease_until > now(), lease_until, incarnation FROM rolloutdb.hosts WHERE ws = $1 AND host = $2`,
		l.ws, *owner).Scan(&live, &until, &inc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !live || ownerInc == nil || inc != *ownerInc {
		return nil, nil
	}
	return &OwnerError{Thread: id, Host: *owner, LeaseUntil: until}, nil
}

// lockThread locks a thread's row and returns it, refusing one a live
// host other than held's owns.
func (l *Log) lockThread(ctx context.Context, tx pgx.Tx, id string, held *Thread) (tid int64, loc string, err error) {
	if err := rollout.ValidateThreadID(id); err != nil {
		return 0, "", err
	}
	var owner *string
	var ownerInc *int64
	var epoch int64
	err = tx.QueryRow(ctx, `SELECT tid, location, owner, owner_inc, epoch FROM rolloutdb.threads WHERE ws = $1 AND id = $2 FOR UPDATE`,
		l.ws, id).Scan(&tid, &loc, &owner, &ownerInc, &epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", notExist(id, "any location")
	}
	if err != nil {
		return 0, "", err
	}
	oe, err := l.ownerOf(ctx, tx, id, owner, ownerInc, epoch, held)
	if err != nil {
		return 0, "", err
	}
	if oe != nil {
		return 0, "", errors.WithHint(oe, "a host has this thread open; nothing was changed: close it there, then try again")
	}
	return tid, loc, nil
}

// Free fails with an *OwnerError (matching rollout.ErrThreadLocked) if a
// live host owns the thread.
func (l *Log) Free(ctx context.Context, id string) error {
	return l.tx(ctx, "check thread "+id, func(tx pgx.Tx) error {
		_, _, err := l.lockThread(ctx, tx, id, nil)
		return err
	})
}

// Move moves a thread from one location to another (archive, restore).
// held is this host's handle of the thread, if it has one; otherwise the
// thread must be free.
func (l *Log) Move(ctx context.Context, id, from, to string, held *Thread) error {
	var moved int64
	err := l.tx(ctx, "move thread "+id, func(tx pgx.Tx) error {
		tid, loc, err := l.lockThread(ctx, tx, id, held)
		if err != nil {
			return err
		}
		if loc != from {
			return notExist(id, from)
		}
		_, err = tx.Exec(ctx, `UPDATE rolloutdb.threads SET location = $2 WHERE tid = $1`, tid, to)
		moved = tid
		return err
	})
	if err == nil {
		l.note.noteChange(change{kind: moveKind(to), tid: moved, id: id})
	}
	return err
}

// Delete removes a thread and its frames in one transaction; it must be
// free.
func (l *Log) Delete(ctx context.Context, id string) error {
	var deleted int64
	err := l.tx(ctx, "delete thread "+id, func(tx pgx.Tx) error {
		tid, _, err := l.lockThread(ctx, tx, id, nil)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM rolloutdb.threads WHERE tid = $1`, tid)
		deleted = tid
		return err
	})
	if err == nil {
		l.note.noteChange(change{kind: changeDeleted, tid: deleted, id: id})
	}
	return err
}

// Write makes a new thread, active and free, from whole frames (a fork,
// a copy from a local workspace): frames[0] must hold the ThreadOpened
// header record alone. It is there whole or not at all;
// rollout.ErrThreadExists if the workspace has the id.
func (l *Log) Write(ctx context.Context, id string, frames [][]rollout.Record) error {
	if err := rollout.ValidateThreadID(id); err != nil {
		return err
	}
	if len(frames) == 0 || len(frames[0]) != 1 || frames[0][0].Kind != rollout.KindThreadOpened {
		return errors.New("fleet: Write needs the header record alone as the first frame")
	}
	now := time.Now().UTC()
	hdr := rollout.NewFileHeader(id, now)
	offs := make([]int64, len(frames))
	seqs := make([]int64, len(frames))
	data := make([][]byte, len(frames))
	off, seq := int64(rollout.FileHeaderSize), uint64(1)
	for i, recs := range frames {
		p, err := rollout.PrepareFrame(recs, l.opts.CompressAbove, now)
		if err != nil {
			return err
		}
		b := p.Seal(hdr.FileID, seq, off)
		offs[i], seqs[i], data[i] = off, int64(seq), append([]byte(nil), b...)
		off += int64(len(b))
		seq += uint64(len(recs))
		p.Release()
	}
	var tid int64
	err := l.tx(ctx, "write thread "+id, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO rolloutdb.threads (ws, id, location, file_id, header, epoch)
			VALUES ($1, $2, 'active', $3, $4, 1) ON CONFLICT (ws, id) DO NOTHING RETURNING tid`,
			l.ws, id, int64(hdr.FileID), hdr.Marshal()).Scan(&tid)
		if errors.Is(err, pgx.ErrNoRows) {
			return errors.WithHint(errors.Wrapf(rollout.ErrThreadExists, "thread %s", id), "choose another id")
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO rolloutdb.frames (tid, off, seq, epoch, data)
			SELECT $1, f.off, f.seq, 1, f.data FROM unnest($2::bigint[], $3::bigint[], $4::bytea[]) AS f(off, seq, data)`,
			tid, offs, seqs, data)
		return err
	})
	if err == nil {
		l.note.noteChange(change{kind: changeCreated, tid: tid, id: id})
	}
	return err
}

// tx runs fn in a transaction, and classifies its error: the errors fn
// makes itself (an owner, a missing thread, an existing one) pass as they
// are.
func (l *Log) tx(ctx context.Context, what string, fn func(pgx.Tx) error) error {
	ctx, cancel := context.WithTimeout(ctx, l.opts.CommitTimeout)
	defer cancel()
	err := pgx.BeginTxFunc(ctx, l.pool, readCommitted, fn)
	var oe *OwnerError
	if err == nil || errors.As(err, &oe) || errors.Is(err, errNotExist) || errors.Is(err, rollout.ErrThreadExists) || errors.Is(err, rollout.ErrInvalidThreadID) {
		return err
	}
	return classify(err, what)
}
