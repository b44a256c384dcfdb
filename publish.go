package rolloutdb

import (
	"context"
	"sync"

	"github.com/rolloutdb/rolloutdb/follow"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The ordered publish.
//
// A frame is published once the writer acknowledged it as durable: its
// records become visible to the consumers wired once at Open (the
// thread's followers, metrics, the workspace watch, and the projector,
// which feeds search). The invariant, enforced here and nowhere else:
//
//	for each thread, frames are published in the order they were written
//	to its rollout, each at most once, and only after its writer
//	acknowledged it; a frame that failed is never published.
//
// Nobody downstream sorts, holds back or reorders frames. A consumer that
// finds a frame that does not continue what it has (a frame written by
// another process, or by a handle closed and opened again) reads the
// rollout instead; that is a catch-up, not a reordering.
//
// How it is enforced: a thread's frames enter its publishQueue in write
// order (the queue's lock is held across the write of the frame), and
// leave it from the head only. Appends woken by one sync return from Wait
// in any order, so each appender resolves its own frame (durable or
// failed), and whichever appender finds the head resolved publishes every
// resolved frame from the head on, one publisher at a time. An appender
// whose frame sits behind an unresolved one waits until its frame is
// published: when an append returns, its frame and every frame before it
// have been published. The wait is for other appenders already past their
// sync, never for a timer.

// published is one durable frame, as the consumers see it.
type published struct {
	thread   string
	t        *Thread // the open handle that wrote it (nil: a lifecycle writer of its own)
	fileID   uint64
	location string // projection.LocationActive or LocationArchived
	res      rollout.AppendResult
	recs     []rollout.Record
	// created marks a thread's header frame, published by CreateThread:
	// its followers start past it, it is not an append for the metrics,
	// and the index makes the thread's row from it.
	created bool
}

// publish hands one durable frame to every consumer. Frames of one thread
// reach it in frame order (publishQueue, or a lifecycle writer that is the
// thread's only writer and appends one frame at a time).
func (db *DB) publish(p *published) {
	if p.t != nil && !p.created {
		// A thread written by a lifecycle writer of its own has no
		// handle: its followers read the rollout, told of the move
		// (follow.Hub.Moved).
		p.t.follow.Publish(follow.Frame{FileID: p.fileID, Offset: p.res.Offset, End: p.res.End, DataCRC: p.res.DataCRC, Records: p.recs})
	}
	if !p.created {
		db.counters.acked(p.res, len(p.recs)) // appends: the header is not one
	}
	db.notify(p.thread, ThreadUpdated)
	b := projection.Batch{Thread: p.thread, Location: p.location, Offset: p.res.Offset, End: p.res.End, DataCRC: p.res.DataCRC, Records: p.recs}
	if p.created {
		b.FileID = p.fileID
	}
	db.state.Enqueue(b)
}

// frameState is a queued frame's outcome.
type frameState uint8

const (
	frameWritten frameState = iota // written, its Wait not returned yet
	frameDurable                   // acknowledged: to publish
	frameFailed                    // not durable: dropped, never published
)

type queuedFrame struct {
	state    frameState
	location string
	res      rollout.AppendResult
	recs     []rollout.Record
}

// publishQueue orders one thread's frames from their write to their
// publish (see the invariant above).
type publishQueue struct {
	// write is held across a frame's write and its entry into the queue,
	// so that the queue's order is the file's.
	write sync.Mutex

	mu         sync.Mutex
	cond       *sync.Cond
	frames     []queuedFrame // frames[0] has ticket head
	head       uint64        // ticket of frames[0]
	next       uint64        // ticket of the next frame pushed
	done       uint64        // every ticket before it is published or dropped
	publishing bool          // an appender is publishing from the head
}

func newPublishQueue() *publishQueue {
	q := &publishQueue{head: 1, next: 1, done: 1}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// write writes a prepared frame of recs, with the business writes biz
// if any, and queues it in write order. The caller hands the returned
// ticket to acknowledge, whatever happens.
func (t *Thread) write(ctx context.Context, prep *rollout.Prepared, recs []rollout.Record, opt rollout.AppendOptions, biz *BusinessWrites) (rollout.Pending, uint64, error) {
	q := t.pub
	q.write.Lock()
	defer q.write.Unlock()
	var p rollout.Pending
	var err error
	if biz.Len() == 0 {
		p, err = t.w.WritePrepared(ctx, prep, opt)
	} else {
		p, err = t.db.writeBusiness(ctx, t.w, prep, opt, biz)
	}
	if err != nil {
		return p, 0, err
	}
	q.mu.Lock()
	ticket := q.next
	q.next++
	q.frames = append(q.frames, queuedFrame{recs: recs})
	q.mu.Unlock()
	return p, ticket, nil
}

// acknowledge waits for a written frame to be durable, resolves its
// ticket, and returns once it is published (or dropped, with Wait's error).
func (t *Thread) acknowledge(p rollout.Pending, ticket uint64) (rollout.AppendResult, error) {
	res, err := t.w.Wait(p)
	q := t.pub
	q.mu.Lock()
	f := &q.frames[ticket-q.head]
	if err != nil {
		f.state = frameFailed
	} else {
		f.state, f.res = frameDurable, res
		f.location = projection.LocationActive
		if t.archived.Load() {
			f.location = projection.LocationArchived // a turn that was running when archived
		}
	}
	for q.done <= ticket {
		// Whoever finds no publisher and the head resolved publishes; a
		// publisher stops once its own frame is out, so no appender keeps
		// publishing for others while frames keep resolving.
		if !q.publishing && len(q.frames) > 0 && q.frames[0].state != frameWritten {
			t.drainLocked(ticket)
			continue
		}
		q.cond.Wait()
	}
	q.mu.Unlock()
	return res, err
}

// drainLocked publishes the resolved frames at the head of the queue
// until it meets one unresolved, or until the caller's own frame (ticket
// own) is published: then the appenders waiting behind take over. It is
// the only publisher of the thread while it runs (publishing); consumers
// are called without q.mu held, so that appenders keep queueing frames
// meanwhile.
func (t *Thread) drainLocked(own uint64) {
	q := t.pub
	q.publishing = true
	for q.done <= own {
		n := 0
		for n < len(q.frames) && q.frames[n].state != frameWritten {
			n++
		}
		if n == 0 {
			break
		}
		batch := q.frames[:n:n]
		q.frames = q.frames[n:]
		q.head += uint64(n)
		if len(q.frames) == 0 {
			q.frames = nil // let the backing array go
		}
		q.mu.Unlock()
		for i := range batch {
			if f := &batch[i]; f.state == frameDurable {
				t.db.publish(&published{thread: t.id, t: t, fileID: t.fileID, location: f.location, res: f.res, recs: f.recs})
			}
		}
		q.mu.Lock()
		q.done += uint64(n)
		q.cond.Broadcast()
	}
	q.publishing = false
	q.cond.Broadcast() // a waiter whose frame is resolved takes over
}
