package follow

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// ErrThreadDeleted ends a follower whose thread was deleted.
var ErrThreadDeleted = errors.New("follow: thread deleted")

// End is why a follower stopped without an error.
type End string

// Archived: the thread was archived; every record before the archive was
// yielded.
const Archived End = "archived"

// Options say where a follower starts. The zero value follows a thread
// from its first record.
type Options struct {
	// AfterSeq: the follower yields the records whose seq is greater
	// (0: every record, the header first). A host resuming a client's
	// view passes the last seq the client saw.
	AfterSeq uint64
	// PollInterval is how often the rollout of a thread another process
	// writes is looked at when the file system cannot notify this process
	// of changes (and, as a safety net, every 8 intervals when it can).
	// Default: 100ms. A thread this DB writes is never polled.
	PollInterval time.Duration
}

// Follower yields a thread's records as they become durable, in the shape
// of bufio.Scanner:
//
//	f, err := db.Follow(ctx, id, rolloutdb.FollowOptions{AfterSeq: seen})
//	defer f.Close()
//	for f.Next() {
//		rec := f.Record()
//	}
//	err = f.Err() // nil when it ended with f.End() (archived) or Close
//
// Next blocks until a record is durable, the thread ends, ctx is done,
// Close is called or the Hub is closed (Config.Closed). A record is
// yielded once it is durable: for a thread this DB writes, once its
// append was acknowledged (under the DB's sync policy); for one another
// process writes, once a later frame's header records the file durable
// past it (its writer's journal or fsync made it so) or this process has
// synced the rollout itself (fdatasync), so a crash of that process cannot
// take back what was yielded (one exception, on that process's failure
// path: a frame it wrote, then failed to make durable and cut, may have
// been synced and yielded first). A torn tail is never yielded (only
// whole, checked frames are read). Damaged records are skipped, as replay
// skips them (Damage lists the regions).
//
// It ends without an error once the thread is archived and every record
// before the archive was yielded (End returns Archived); with
// ErrThreadDeleted once the thread is deleted; with ErrRolloutReplaced once
// the rollout no longer holds the last frame read where it was.
//
// A Follower is not safe for concurrent use; Close may be called from any
// goroutine.
type Follower struct {
	h      *Hub
	s      *stream
	id     string
	ctx    context.Context
	cancel context.CancelFunc

	after    uint64     // the last seq queued
	r        liveReader // its own reading of the rollout, when behind the stream
	gen      uint64     // the stream's moves when it last looked where the rollout is
	located  bool
	archived bool // the rollout was in threads/archived when located

	// Frames queued ahead of the caller (from the stream or the file),
	// of which the records after skip, from fi, ri on.
	queue  []Frame
	fi, ri int
	skip   uint64
	rec    rollout.Record
	damage []*rollout.CorruptionError
	err    error
	end    End
	done   bool

	closeOnce sync.Once
	closed    chan struct{}
	cmu       sync.Mutex // inNext, and the rollout once closed
	inNext    bool
}

// Follow starts following a thread, active or archived. It does not look
// for the rollout: a thread with none ends the first Next with
// ErrThreadDeleted.
func (h *Hub) Follow(ctx context.Context, id string, o Options) (*Follower, error) {
	if err := rollout.ValidateThreadID(id); err != nil {
		return nil, err
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 100 * time.Millisecond
	}
	s := h.acquire(id)
	s.mu.Lock()
	s.followers++
	if s.poll == 0 || int64(o.PollInterval) < s.poll {
		s.poll = int64(o.PollInterval)
	}
	local, fileID, end, lastSeq := s.local, s.fileID, s.durable, s.lastSeq
	s.mu.Unlock()
	h.followers.Add(1)
	f := &Follower{h: h, s: s, id: id, after: o.AfterSeq, closed: make(chan struct{}),
		r: liveReader{id: id, off: rollout.FileHeaderSize}}
	f.ctx, f.cancel = context.WithCancel(ctx)
	// A thread far along need not be read from its start. Following a
	// thread this DB writes from its last record on (the usual "from
	// now"), the follower starts where the last acknowledged frame ended;
	// else at the projection's anchor, a frame at or before AfterSeq that
	// the rollout still holds.
	switch {
	case local && o.AfterSeq >= lastSeq && end > rollout.FileHeaderSize:
		f.r.off, f.r.fileID = end, fileID
	case o.AfterSeq > 0 && h.cfg.Anchor != nil:
		if a, ok := h.cfg.Anchor(ctx, id); ok && a.Seq <= o.AfterSeq+1 && a.Offset > rollout.FileHeaderSize && h.holdsFrame(id, a) {
			f.r.off = a.Offset
		}
	}
	return f, nil
}

// holdsFrame reports whether the thread's rollout holds the frame a
// names, where it names it (the projection's anchor may be ahead of a
// rollout a crash or a repair left shorter or different).
func (h *Hub) holdsFrame(id string, a rollout.Anchor) bool {
	path, _, _, err := h.locate(id)
	if err != nil {
		return false
	}
	src, _, closeSrc, err := rollout.OpenRead(h.cfg.FS, path)
	if err != nil {
		return false
	}
	defer closeSrc()
	fh, err := rollout.ReadFrameHeader(src, a.Offset)
	return err == nil && fh.Seq == a.Seq && fh.DataCRC == a.DataCRC
}

// Next waits for the next record and reports whether there is one.
func (f *Follower) Next() bool {
	if !f.isClosed() && f.pop() {
		return true // queued: no step, no lock
	}
	f.cmu.Lock()
	f.inNext = true
	f.cmu.Unlock()
	defer func() {
		f.cmu.Lock()
		f.inNext = false
		if f.isClosed() {
			f.r.close()
		}
		f.cmu.Unlock()
	}()
	for {
		if f.isClosed() {
			f.stop(nil)
			return false
		}
		if f.pop() {
			return true
		}
		if f.done {
			return false
		}
		progressed, wake, err := f.step()
		switch {
		case err != nil:
			f.stop(err)
			continue
		case progressed:
			continue
		case f.end != "":
			f.stop(nil) // after the records queued with it
			continue
		}
		select {
		case <-wake:
		case <-f.closed:
			f.stop(nil)
		case <-f.h.done:
			f.stop(errors.Wrapf(f.h.cfg.Closed, "follow %s", f.id))
		case <-f.ctx.Done():
			f.stop(f.ctx.Err())
		}
	}
}

// pop moves to the next queued record, if there is one.
func (f *Follower) pop() bool {
	for f.fi < len(f.queue) {
		recs := f.queue[f.fi].Records
		for f.ri < len(recs) {
			rec := recs[f.ri]
			f.ri++
			if rec.Seq > f.skip {
				f.rec = rec
				return true
			}
		}
		f.fi, f.ri = f.fi+1, 0
	}
	f.queue = nil
	return false
}

// Record returns the record Next found. It stays valid after Next moves on.
func (f *Follower) Record() rollout.Record { return f.rec }

// Err is why the follower stopped: nil when it ended (End) or was closed.
func (f *Follower) Err() error { return f.err }

// End is how the thread ended, if it did without an error.
func (f *Follower) End() End { return f.end }

// Damage lists the damaged regions the follower skipped.
func (f *Follower) Damage() []*rollout.CorruptionError { return f.damage }

// Close stops the follower; a Next waiting returns false.
func (f *Follower) Close() error {
	f.closeOnce.Do(func() {
		close(f.closed)
		f.cancel()
		f.h.leave(f.s)
		f.h.followers.Add(-1)
	})
	f.cmu.Lock()
	if !f.inNext {
		f.r.close() // else the Next that runs does, as it returns
	}
	f.cmu.Unlock()
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
	f.r.close()
	f.queue = nil // a stopped follower yields nothing more
	f.done, f.err = true, err
	if errors.Is(err, context.Canceled) && f.isClosed() {
		f.err = nil // closed, not failed
	}
}

// leave: a follower of the stream closed.
func (h *Hub) leave(s *stream) {
	s.mu.Lock()
	if s.followers--; s.followers == 0 {
		s.stopTailLocked()
		s.frames, s.held, s.err, s.poll = nil, 0, nil, 0
	}
	s.mu.Unlock()
	h.release(s)
}

// step queues what became durable since the last step and reports
// whether it found anything; else it returns the channel closed at the
// stream's next change. It runs in Next's goroutine only.
func (f *Follower) step() (bool, <-chan struct{}, error) {
	s := f.s
	s.mu.Lock()
	gen, local, fileID, durable, kept, err := s.gen, s.local, s.fileID, s.durable, s.frames, s.err
	tailing := s.tail != nil
	wake := s.waitLocked()
	s.mu.Unlock()
	if err != nil {
		return false, nil, err
	}
	if !f.located || gen != f.gen {
		if err := f.locate(); err != nil {
			return false, nil, err
		}
		f.gen = gen
	}
	// What the stream keeps, if it reaches back to the next record.
	if frames := takeKept(kept, f.after, f.r.fileID); len(frames) > 0 {
		f.r.advance(frames)
		f.enqueue(frames)
		return true, wake, nil
	}
	if f.r.src == nil {
		f.located = false // moving: look again at the next change
		return false, wake, nil
	}
	// The rollout itself, up to what the stream knows durable of this
	// file; and, where no tailer reads it yet, what its frames record.
	var known int64
	switch {
	case f.r.file == nil:
		known = f.r.size // compressed: written whole, and synced
	case fileID == f.r.fileID:
		known = durable
	}
	if known > f.r.off || !local && !tailing || f.archived {
		size, err := f.r.length()
		if err != nil {
			return false, nil, err
		}
		frames, pending, _, err := f.r.read(size, known, followBatch)
		if err != nil {
			return false, nil, err
		}
		if len(frames) > 0 {
			f.enqueue(frames)
			return true, wake, nil
		}
		if f.archived && !pending && f.r.off >= size {
			f.end = Archived
			return false, wake, nil
		}
	}
	if !local && f.r.file != nil {
		// Another process may write it: a tailer reads what comes, for
		// every follower here.
		s.mu.Lock()
		s.startTailLocked(&f.r)
		s.mu.Unlock()
	}
	return false, wake, nil
}

// takeKept returns the kept frames from the one that holds seq after+1 on,
// at most about followBatch records, if they are of the rollout with
// fileID (0: any) and reach back to it.
func takeKept(kept []Frame, after uint64, fileID uint64) []Frame {
	if len(kept) == 0 || fileID != 0 && kept[0].FileID != fileID || kept[0].Records[0].Seq > after+1 {
		return nil
	}
	i := sort.Search(len(kept), func(i int) bool { return kept[i].lastSeq() > after })
	j, n := i, 0
	for ; j < len(kept) && n < followBatch; j++ {
		n += len(kept[j].Records)
	}
	return kept[i:j:j]
}

// enqueue queues frames read or taken, for pop.
func (f *Follower) enqueue(frames []Frame) {
	f.queue, f.fi, f.ri, f.skip = frames, 0, 0, f.after
	for i := range frames {
		f.damage = append(f.damage, frames[i].Damage...)
	}
	f.after = max(f.after, frames[len(frames)-1].lastSeq())
}

// locate opens the rollout where it is now (it may have moved) and checks
// that it still holds the last frame read.
func (f *Follower) locate() error {
	f.located = true
	for range 3 {
		path, archived, cold, err := f.h.locate(f.id)
		if errors.Is(err, errNotFound) {
			f.r.close()
			return errors.Wrapf(ErrThreadDeleted, "follow %s after seq %d", f.id, f.after)
		}
		if err != nil {
			return err
		}
		f.archived = archived
		if err := f.r.open(f.h.cfg.FS, path, cold); !notThere(err) {
			return err
		}
		// Moved between the look and the open: look again.
	}
	return nil
}
