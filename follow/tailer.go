package follow

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// tailWait is how long the first frame of a rollout that no later frame
// covers must stay so before the tailer syncs the file to cover it. A
// sync by a follower is a flush of the writer's file, which the writer
// then waits behind: while a writer streams, each frame is covered by the
// next within its commit interval, and no follower syncs; once it stops,
// its last frames wait this long, once. It also bounds the wait for a
// writer whose frames cover nothing (SyncNever): its first uncovered frame
// stays the same while it streams.
const tailWait = 10 * time.Millisecond

// safetyNet: with file-change notification, the tailer looks where the
// rollout is every safetyNet poll intervals all the same, in case a notice
// was lost.
const safetyNet = 8

// tailer is the live reader of a rollout another process (or another DB)
// writes, in the shape of Prometheus' wlog.Watcher: one goroutine per
// thread followed here, woken by the directory watch's notice of a write
// (wake) or by a ticker, reads what became durable and publishes it into
// the thread's stream, for all its followers here at once.
type tailer struct {
	s        *stream
	pokes    chan struct{} // a notice came (buffered: notices while it reads are one)
	quit     chan struct{}
	stopOnce sync.Once
	reopen   atomic.Bool // look where the rollout is at the next pass

	// Owned by run.
	r       liveReader
	synced  int64     // how far this tailer synced the file
	waitOff int64     // the first frame not known durable (0: none)
	waitAt  time.Time // since when it is the first
}

// startTailLocked starts a tailer at r's position (a follower that read
// what is durable, and is at the rollout's end as far as it knows), unless
// one runs, the thread is written here, or nobody follows it.
func (s *stream) startTailLocked(r *liveReader) {
	if s.local || s.tail != nil || s.followers == 0 || r.fileID == 0 || s.h.isClosed() {
		return
	}
	if r.fileID != s.fileID || r.off != s.durable {
		s.frames, s.held = nil, 0
	}
	s.fileID, s.durable, s.err = r.fileID, r.off, nil
	t := &tailer{s: s, pokes: make(chan struct{}, 1), quit: make(chan struct{}),
		r: liveReader{id: s.id, path: r.path, fileID: r.fileID, off: r.off, last: r.last}}
	t.reopen.Store(true)
	s.tail = t
	go t.run()
}

// wake tells the tailer to read (reopen: to look where the rollout is
// first). It never blocks.
func (t *tailer) wake(reopen bool) {
	if reopen {
		t.reopen.Store(true)
	}
	select {
	case t.pokes <- struct{}{}:
	default:
	}
}

func (t *tailer) stop() { t.stopOnce.Do(func() { close(t.quit) }) }

func (t *tailer) run() {
	h := t.s.h
	var dirs *dirWatch
	if h.cfg.Notify {
		dirs = h.watchDirs() // before the first pass: no write is missed
	}
	defer func() {
		t.r.close()
		if dirs != nil {
			h.unwatchDirs(dirs)
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, err := t.pass()
		if err != nil {
			t.s.fail(t, err)
			return
		}
		if due == 0 { // more to read now
			select {
			case <-t.quit:
				return
			default:
				continue
			}
		}
		d, tick := t.s.pollInterval(), true
		if dirs != nil {
			d *= safetyNet
		}
		if due > 0 && due < d {
			d, tick = due, false
		}
		timer.Reset(d)
		select {
		case <-t.quit:
			return
		case <-t.pokes:
		case <-timer.C:
			if tick {
				t.reopen.Store(true) // a poll, or the safety net
			}
		}
	}
}

// pass reads what became durable and publishes it. It returns when to
// look again: 0 at once (more to read), >0 after that long (the tail's
// sync is due), <0 at the next notice or tick.
func (t *tailer) pass() (time.Duration, error) {
	if t.reopen.Swap(false) || t.r.src == nil {
		if err := t.open(); err != nil {
			return -1, err
		}
		if t.r.src == nil {
			return -1, nil // no plain rollout to tail: gone, compressed, or moving
		}
	}
	size, err := t.r.length()
	if err == nil {
		var frames []Frame
		var pending, more bool
		frames, pending, more, err = t.r.read(size, t.synced, followBatch)
		if err == nil {
			t.s.publish(t, frames)
			switch {
			case len(frames) > 0 && more:
				return 0, nil
			case !pending:
				t.waitOff = 0
				return -1, nil
			}
			return t.syncTail(size)
		}
	}
	if errors.Is(err, ErrRolloutReplaced) {
		return 0, t.restart() // what was read is not there: read the file there now
	}
	return -1, err
}

// syncTail syncs the file once its first frame not known durable has
// waited tailWait; what the file held before the sync is durable then.
func (t *tailer) syncTail(size int64) (time.Duration, error) {
	now := time.Now()
	if t.waitOff != t.r.off {
		t.waitOff, t.waitAt = t.r.off, now
	}
	if wait := tailWait - now.Sub(t.waitAt); wait > 0 {
		return wait, nil
	}
	if err := t.r.file.Sync(); err != nil {
		return -1, errors.Wrapf(err, "follow %s: sync %s", t.s.id, t.r.path)
	}
	t.synced, t.waitOff = size, 0
	return 0, nil
}

// open looks where the rollout is and opens it, checking that it holds
// what was read. A rollout moved elsewhere makes the stream's followers
// look too; one replaced starts the stream over on the new file.
func (t *tailer) open() error {
	h := t.s.h
	prev := t.r.path
	path, _, cold, err := h.locate(t.s.id)
	switch {
	case errors.Is(err, errNotFound), err == nil && cold:
		// Deleted (its followers end), or compressed: a cold rollout is
		// whole and durable, and its followers read it themselves.
		t.r.close()
		t.r.path = path
	case err != nil:
		return err
	default:
		err = t.r.open(h.cfg.FS, path, false)
		switch {
		case notThere(err):
			t.r.path = "" // moving: its notice, or the next tick, brings it back
		case errors.Is(err, ErrRolloutReplaced):
			return t.restart()
		case err != nil:
			return err
		}
	}
	if t.r.path != prev {
		t.s.bump(t)
	}
	return nil
}

// restart reads the thread's rollout from its first frame: the file read
// so far is not there any more (a repair wrote another, or the thread was
// deleted and created again).
func (t *tailer) restart() error {
	t.r.close()
	t.r = liveReader{id: t.s.id, off: rollout.FileHeaderSize}
	t.synced, t.waitOff = 0, 0
	path, _, cold, err := t.s.h.locate(t.s.id)
	if err == nil && !cold {
		err = t.r.open(t.s.h.cfg.FS, path, false)
	}
	if err != nil && !errors.Is(err, errNotFound) && !notThere(err) {
		return err
	}
	t.s.mu.Lock()
	if t.s.tail == t {
		t.s.resetLocked(t.r.fileID, rollout.FileHeaderSize, 0)
	}
	t.s.mu.Unlock()
	return nil
}

// publish adds frames a tailer read to the stream, unless the tailer was
// stopped meanwhile.
func (s *stream) publish(t *tailer, frames []Frame) {
	if len(frames) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tail != t {
		return
	}
	for _, fr := range frames {
		s.addLocked(fr)
	}
	s.changedLocked()
}

// bump has the followers look where the rollout is (the tailer found it
// moved).
func (s *stream) bump(t *tailer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tail == t {
		s.gen++
		s.changedLocked()
	}
}

// fail ends the stream's followers with the tailer's error.
func (s *stream) fail(t *tailer, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tail == t {
		s.err, s.tail = err, nil
		s.changedLocked()
	}
}

func (s *stream) pollInterval() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Duration(s.poll)
}
