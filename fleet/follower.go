package fleet

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/follow"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// Follower yields a thread's records as they are committed, from any host
// of the fleet, in the shape of follow.Follower (and bufio.Scanner):
//
//	f, err := l.Follow(ctx, id, follow.Options{AfterSeq: seen})
//	defer f.Close()
//	for f.Next() {
//		rec := f.Record()
//	}
//	err = f.Err() // nil when it ended with f.End() (archived) or Close
//
// It reads the thread by offset: the frames after the last one it read
// (Log.Read's frames, decoded as a rollout's), so it yields each record
// once, in seq order, and never passes one over: no global order is
// involved, so rounds that commit in any order across hosts cannot make
// it skip. It reads when a notice names the thread (see notifier), and on
// its own every poll interval, so a lost notice only delays a record.
//
// A record is yielded once its commit round committed: it is as durable
// as an acknowledged append, though its writer may not have been told (a
// commit whose answer was lost). If that writer then gave up on it, the
// frame is deleted before the thread's next append (Thread.resolveLocked)
// and another frame takes its place: the follower finds, at its next
// read, that the thread no longer holds the last frame it read where it
// read it, and ends with a *CutError, which says up to which seq its
// records stand (it matches follow.ErrRolloutReplaced).
//
// It ends without an error once the thread is archived and every record
// before was yielded (End returns follow.Archived); with
// follow.ErrThreadDeleted once the thread is deleted (or deleted and made
// again: the follower follows the thread it started on). PostgreSQL
// unreachable only delays it: it reads again at the next poll. A frame
// that fails its checks is skipped, as replay skips it (Damage lists it).
//
// A Follower is not safe for concurrent use; Close may be called from any
// goroutine.
type Follower struct {
	l      *Log
	id     string
	tid    int64
	fileID uint64
	ctx    context.Context
	cancel context.CancelFunc
	poll   time.Duration
	timer  *time.Timer
	wake   chan struct{} // capacity 1: the listener's poke

	// Where it is: the next frame's offset, and the records it read so
	// far (seq after) or passes over (skip: Options.AfterSeq).
	next  int64
	after uint64
	skip  uint64
	// last is the last frame read; open the frames read that a cut may
	// yet take back (those past every durable offset read, see
	// noteFrame), oldest first; kept the last seq no cut can take back.
	last    *anchor
	open    []anchor
	covered int64
	kept    uint64

	queue  []rollout.Record
	qi     int
	rec    rollout.Record
	damage []*rollout.CorruptionError
	err    error
	end    follow.End
	done   bool

	closeOnce sync.Once
	closed    chan struct{}
}

// anchor is a frame a follower read: where, its first bytes (the frame
// header, whose checksum covers the payload's) and its last seq.
type anchor struct {
	off, end int64
	head     []byte
	lastSeq  uint64 // of a damaged frame, the last seq before it
	damaged  bool
}

// A CutError ends a follower that yielded records its thread no longer
// holds: they were committed (hence yielded) by a commit whose answer the
// writer never had, and which it gave up on and cut back (see Follower).
// The records up to Kept stand; those after Kept that were yielded, up
// to Yielded, are gone or replaced. A client drops what it showed after
// Kept and follows again with AfterSeq Kept. It matches
// follow.ErrRolloutReplaced.
type CutError struct {
	Thread  string
	Offset  int64 // where the first frame read that is not there was
	Kept    uint64
	Yielded uint64
}

func (e *CutError) Error() string {
	return fmt.Sprintf("fleet: follow %s: the thread no longer holds the records after seq %d that it yielded (through seq %d): a commit of unknown outcome was cut back at offset %d",
		e.Thread, e.Kept, e.Yielded, e.Offset)
}

// Is makes a CutError match follow.ErrRolloutReplaced.
func (e *CutError) Is(target error) bool { return target == follow.ErrRolloutReplaced }

// maxOpen bounds the frames a follower remembers for a cut. Past it the
// oldest is forgotten, and a cut before it reports Kept lower than it
// could: a client reads some records again, never misses one.
const maxOpen = 1024

// Follow starts following a thread, active or archived, from any host:
// the Follower yields its records after o.AfterSeq, then blocks for new
// ones. o.PollInterval defaults to Options.PollInterval. A thread that
// does not exist is an error matching fs.ErrNotExist.
func (l *Log) Follow(ctx context.Context, id string, o follow.Options) (*Follower, error) {
	if err := rollout.ValidateThreadID(id); err != nil {
		return nil, err
	}
	if l.isClosed() {
		return nil, &rollout.ClosedError{What: "fleet: log"}
	}
	if o.PollInterval <= 0 {
		o.PollInterval = l.opts.PollInterval
	}
	f := &Follower{l: l, id: id, poll: o.PollInterval, wake: make(chan struct{}, 1), closed: make(chan struct{}),
		next: rollout.FileHeaderSize, after: o.AfterSeq, skip: o.AfterSeq, kept: o.AfterSeq}
	// A thread far along is not read from its start: the follower starts
	// at the frame that holds seq AfterSeq+1 (or the last one).
	var fileID int64
	var start *int64
	qctx, cancel := context.WithTimeout(ctx, l.opts.CommitTimeout)
	defer cancel()
	err := l.pool.QueryRow(qctx, `SELECT th.tid, th.file_id,
			CASE WHEN $3 > 0 THEN (SELECT off FROM rolloutdb.frames WHERE tid = th.tid AND seq <= $3 + 1 ORDER BY off DESC LIMIT 1) END
		FROM rolloutdb.threads th WHERE th.ws = $1 AND th.id = $2`, l.ws, id, int64(o.AfterSeq)).Scan(&f.tid, &fileID, &start)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notExist(id, "any location")
	}
	if err != nil {
		return nil, classify(err, "follow "+id)
	}
	f.fileID = uint64(fileID)
	if start != nil {
		f.next = *start
	}
	f.ctx, f.cancel = context.WithCancel(ctx)
	if err := l.join(f); err != nil {
		f.cancel()
		return nil, err
	}
	return f, nil
}

// poke wakes the follower (the listener's, for a notice of its thread).
func (f *Follower) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Next waits for the next record and reports whether there is one.
func (f *Follower) Next() bool {
	for {
		if f.qi < len(f.queue) {
			f.rec = f.queue[f.qi]
			f.qi++
			return true
		}
		f.queue, f.qi = nil, 0
		if f.done {
			return false
		}
		switch {
		case f.isClosed():
			f.stop(nil)
			continue
		case f.ctx.Err() != nil:
			f.stop(f.ctx.Err())
			continue
		case f.l.isClosed():
			f.stop(errors.Wrapf(&rollout.ClosedError{What: "fleet: log"}, "follow %s", f.id))
			continue
		}
		progressed, err := f.step()
		switch {
		case err != nil && (f.ctx.Err() != nil || f.l.isClosed()):
			continue // told above
		case err != nil && !isUnavailable(err):
			f.stop(err)
			continue
		case progressed:
			continue
		case f.end != "":
			f.stop(nil)
			continue
		}
		// Nothing new, or PostgreSQL unreachable: wait for a notice, or
		// look again at the poll.
		if f.timer == nil {
			f.timer = time.NewTimer(f.poll)
		} else {
			f.timer.Reset(f.poll)
		}
		select {
		case <-f.wake:
		case <-f.timer.C:
		case <-f.closed:
		case <-f.l.stop:
		case <-f.ctx.Done():
		}
	}
}

// step reads the frames after the last one read, checking first that the
// thread still holds that one, and queues their records. It reports
// whether it queued or skipped anything.
func (f *Follower) step() (bool, error) {
	from := f.next
	if f.last != nil {
		from = f.last.off
	}
	res := f.l.readFrames(f.ctx, f.tid, from, f.next, f.fileID)
	if res.err != nil {
		return false, errors.Wrapf(res.err, "follow %s", f.id)
	}
	if !res.found {
		return false, errors.Wrapf(follow.ErrThreadDeleted, "follow %s after seq %d", f.id, f.after)
	}
	frames := res.frames
	switch {
	case f.last != nil:
		if len(frames) == 0 || frames[0].off != f.last.off || !bytes.Equal(frames[0].data, f.last.head) {
			return false, f.cut()
		}
		frames = frames[1:]
	case len(frames) > 0 && frames[0].off != f.next:
		// The frame it was to start from is gone: cut since Follow.
		return false, errors.WithHint(&CutError{Thread: f.id, Offset: f.next, Kept: f.kept, Yielded: f.after},
			fmt.Sprintf("follow again with AfterSeq %d", f.kept))
	}
	if len(frames) == 0 {
		if res.location == locArchived {
			f.end = follow.Archived
		}
		return false, nil
	}
	for i := range frames {
		if err := f.take(&frames[i]); err != nil {
			return false, err
		}
	}
	return true, nil
}

// take queues a frame's records, after checking that it is the next one.
func (f *Follower) take(fr *readFrame) error {
	path := f.l.Path(f.id)
	if fr.off != f.next {
		// Frames commit whole and in order: a hole is damage.
		return &rollout.CorruptionError{Path: path, Offset: f.next, Length: fr.off - f.next, Reason: rollout.ReasonTruncated}
	}
	a := anchor{off: fr.off, end: fr.off + int64(len(fr.data)), head: bytes.Clone(fr.data[:min(len(fr.data), rollout.FrameHeaderSize)])}
	if f.last != nil {
		a.lastSeq = f.last.lastSeq
	}
	var durable int64
	h := fr.h
	var ce *rollout.CorruptionError
	switch {
	case errors.As(fr.err, &ce):
		// Skipped, as replay skips it.
		d := *ce
		d.Path, d.Offset, d.Length = path, fr.off, int64(len(fr.data))
		f.damage = append(f.damage, &d)
		a.damaged = true
	case fr.err != nil:
		return fr.err
	case f.last != nil && !f.last.damaged && h.Seq != f.last.lastSeq+1:
		return &rollout.CorruptionError{Path: path, Offset: fr.off, Length: int64(len(fr.data)), Reason: rollout.ReasonSeq,
			FirstSeq: f.last.lastSeq + 1, LastSeq: h.Seq - 1}
	default:
		a.lastSeq, durable = h.Seq+uint64(h.Count)-1, h.Durable
		for _, rec := range fr.recs {
			if rec.Seq > f.skip {
				f.queue = append(f.queue, rec)
			}
		}
		f.after = max(f.after, a.lastSeq)
	}
	f.next = a.end
	f.noteFrame(a, durable)
	return nil
}

// noteFrame remembers a frame read, for a later cut. A frame's durable
// offset is, in a fleet thread, its writer's acknowledged end when it
// wrote it (Thread.WritePrepared): the frames ending there were
// acknowledged, and a cut only takes frames past the acknowledged end
// (Thread.resolveLocked), so they are the thread's for good.
func (f *Follower) noteFrame(a anchor, durable int64) {
	f.last = &a
	f.covered = max(f.covered, durable)
	i := 0
	for i < len(f.open) && f.open[i].end <= f.covered {
		f.kept = max(f.kept, f.open[i].lastSeq)
		i++
	}
	f.open = append(f.open[i:], a)
	if len(f.open) > maxOpen {
		f.open = f.open[1:]
	}
}

// cut finds, for a thread that no longer holds the last frame read, the
// last frame read that it still holds, and returns the *CutError.
func (f *Follower) cut() error {
	ctx, cancel := context.WithTimeout(f.ctx, f.l.opts.CommitTimeout)
	defer cancel()
	e := &CutError{Thread: f.id, Kept: f.kept, Yielded: f.after, Offset: f.last.off}
	offs := make([]int64, len(f.open))
	for i, a := range f.open {
		offs[i] = a.off
	}
	heads := map[int64][]byte{}
	rows, err := f.l.pool.Query(ctx, `SELECT off, substr(data, 1, $3) FROM rolloutdb.frames WHERE tid = $1 AND off = ANY($2)`,
		f.tid, offs, rollout.FrameHeaderSize)
	if err == nil {
		for rows.Next() {
			var off int64
			var head []byte
			if rows.Scan(&off, &head) == nil {
				heads[off] = head
			}
		}
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		// Kept stays what no cut can take back.
		f.l.opts.Logger.Warn("rolloutdb: fleet follow: could not tell where a cut began", "thread", f.id, "err", err)
	}
	for i := len(f.open) - 1; i >= 0; i-- {
		a := f.open[i]
		if head, ok := heads[a.off]; ok && bytes.Equal(head, a.head) {
			e.Kept = max(e.Kept, a.lastSeq)
			break
		}
		e.Offset = a.off
	}
	return errors.WithHint(e, fmt.Sprintf("drop what was shown after seq %d, and follow again with AfterSeq %d", e.Kept, e.Kept))
}

// Record returns the record Next found. It stays valid after Next moves on.
func (f *Follower) Record() rollout.Record { return f.rec }

// Err is why the follower stopped: nil when it ended (End) or was closed.
func (f *Follower) Err() error { return f.err }

// End is how the thread ended, if it did without an error.
func (f *Follower) End() follow.End { return f.end }

// Damage lists the damaged frames the follower skipped.
func (f *Follower) Damage() []*rollout.CorruptionError { return f.damage }

// Close stops the follower; a Next waiting returns false.
func (f *Follower) Close() error {
	f.closeOnce.Do(func() {
		close(f.closed)
		f.cancel()
		f.l.leave(f)
	})
	return nil
}

func (f *Follower) isClosed() bool {
	select {
	case <-f.closed:
		return true
	default:
		return false
	}
}

func (f *Follower) stop(err error) {
	if f.done {
		return
	}
	f.queue, f.qi = nil, 0 // a stopped follower yields nothing more
	f.done, f.err = true, err
	if f.timer != nil {
		f.timer.Stop()
	}
	if errors.Is(err, context.Canceled) && f.isClosed() {
		f.err = nil // closed, not failed
	}
}
