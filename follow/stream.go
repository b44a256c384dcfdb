package follow

import (
	"sync"
	"time"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// Frame is one durable frame of a rollout, as followers take it.
type Frame struct {
	FileID  uint64 // the rollout's file id
	Offset  int64  // where the frame starts
	End     int64  // where it ends
	DataCRC uint32
	// Records are the frame's records. They are shared by every follower
	// that takes the frame, and never changed.
	Records []rollout.Record
	// Damage lists the damaged regions skipped right before the frame.
	Damage []*rollout.CorruptionError
}

func (fr *Frame) lastSeq() uint64 { return fr.Records[len(fr.Records)-1].Seq }

// anchor names the frame for a later check that the file still holds it.
func (fr *Frame) anchor() rollout.Anchor {
	return rollout.Anchor{Offset: fr.Offset, Seq: fr.Records[0].Seq, DataCRC: fr.DataCRC}
}

// keepRecords bounds the records a stream keeps for its followers, so that
// its memory stays flat however long the thread; a follower further behind
// reads the rollout.
const keepRecords = 2048

// stream is what this DB knows of a thread's rollout, and its latest
// durable frames. Everything is guarded by mu; every change closes wake,
// so that a follower that took wake before it looked misses no change.
type stream struct {
	h     *Hub
	id    string
	users int // Hub.mu: the Publisher and the followers holding it

	mu sync.Mutex
	// local: a Publisher of this DB feeds the stream (its writer holds
	// the thread's lock: nobody else writes or moves the rollout).
	local bool
	// The rollout the facts below are of (0: none known), how far it is
	// known durable, and the last seq there.
	fileID  uint64
	durable int64
	lastSeq uint64
	// frames are the latest durable frames, consecutive, of file fileID,
	// ending at durable; kept while the thread has followers.
	frames    []Frame
	held      int    // records in frames
	gen       uint64 // moves seen: a follower looks again where the rollout is
	wake      chan struct{}
	followers int
	poll      int64       // the shortest PollInterval of its followers (ns)
	tail      *tailer     // while followed, not local
	err       error       // the tailer's failure: its followers end with it
	woke      time.Time   // when followers were last woken for a published frame
	timer     *time.Timer // wakes them once their interval has passed (nil: none due)
}

// A Publisher wakes its thread's followers at most every wakeEvery, or
// wakePerFollower times their number if longer. Waking them is on the
// append's path, one append at a time: with one follower and two
// processors, each wake-up had the appender start the idle processor,
// which cost more than the follower's work (docs/BENCHMARKS.md, Live
// follow). For many followers the interval grows with their number: a
// timer waking all of them that often cost more than waking them at each
// append. A tailer's frames come a round of the directory watch at a
// time, and wake them at once.
const (
	wakeEvery       = 500 * time.Microsecond
	wakePerFollower = 50 * time.Microsecond
)

// waitLocked returns the channel closed at the stream's next change.
func (s *stream) waitLocked() <-chan struct{} {
	if s.wake == nil {
		s.wake = make(chan struct{})
	}
	return s.wake
}

// changedLocked wakes the followers waiting.
func (s *stream) changedLocked() {
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
}

// addLocked records a durable frame: the durable end moves to its end,
// and, while the thread has followers, it is kept for them; the caller
// wakes them. A frame that
// does not continue the kept ones (another file, or a gap the reader
// skipped as damage) starts them over: followers behind read the file.
// The kept frames are never changed in place, only appended to past every
// slice handed out or dropped from the front, so followers read them
// without a copy or a lock.
func (s *stream) addLocked(fr Frame) {
	if s.followers > 0 && len(fr.Records) > 0 {
		if fr.FileID != s.fileID || fr.Offset != s.durable {
			s.frames, s.held = nil, 0
		}
		s.frames = append(s.frames, fr)
		s.held += len(fr.Records)
		drop := 0
		for s.held > keepRecords && len(s.frames)-drop > 1 {
			s.held -= len(s.frames[drop].Records)
			drop++
		}
		s.frames = s.frames[drop:]
	}
	s.fileID, s.durable = fr.FileID, fr.End
	if len(fr.Records) > 0 {
		s.lastSeq = fr.lastSeq()
	}
}

// pacedLocked wakes the waiting followers for a published frame now, or,
// if they were woken less than their interval ago, once it has passed.
func (s *stream) pacedLocked() {
	if s.wake == nil || s.timer != nil {
		return // no one waits, or a wake-up is due
	}
	now := time.Now()
	if d := max(wakeEvery, time.Duration(s.followers)*wakePerFollower) - now.Sub(s.woke); d > 0 {
		s.timer = time.AfterFunc(d, func() {
			s.mu.Lock()
			s.timer, s.woke = nil, time.Now()
			s.changedLocked()
			s.mu.Unlock()
		})
		return
	}
	s.woke = now
	s.changedLocked()
}

// resetLocked starts the stream over on file fileID, known durable through
// end (a frame boundary), and tells followers to look where the rollout
// is.
func (s *stream) resetLocked(fileID uint64, end int64, lastSeq uint64) {
	if fileID != s.fileID || end != s.durable {
		s.frames, s.held = nil, 0
	}
	s.fileID, s.durable, s.lastSeq = fileID, end, lastSeq
	s.gen++
	s.changedLocked()
}

// moved: the rollout may have moved, been deleted or replaced.
func (s *stream) moved() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	if s.tail != nil {
		s.tail.wake(true)
	}
	s.changedLocked()
}

// written: another process wrote to the rollout.
func (s *stream) written() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tail != nil {
		s.tail.wake(false)
	}
}

// stopTailLocked stops the tailer, if one runs.
func (s *stream) stopTailLocked() {
	if s.tail != nil {
		s.tail.stop()
		s.tail = nil
	}
}

// Publisher feeds a thread's stream from the DB that writes it: the
// facade makes one when it opens the thread for writing and hands it, in
// frame order, every frame the thread's writer acknowledged.
type Publisher struct {
	s    *stream
	once sync.Once
}

// Publisher records that this DB writes the thread from now on: the
// rollout with this file id holds durable frames through end, the last
// with seq lastSeq. Until Close, nobody else writes or moves the rollout
// (the writer holds its lock), and the thread's followers read what the
// Publisher publishes; a tailer reading it stops.
func (h *Hub) Publisher(id string, fileID uint64, end int64, lastSeq uint64) *Publisher {
	s := h.acquire(id)
	s.mu.Lock()
	s.stopTailLocked()
	s.local = true
	s.resetLocked(fileID, end, lastSeq)
	s.mu.Unlock()
	return &Publisher{s: s}
}

// Publish hands the thread's followers a frame its writer acknowledged.
// Frames come in the order they were written, each once.
func (p *Publisher) Publish(fr Frame) {
	s := p.s
	s.mu.Lock()
	s.addLocked(fr)
	s.pacedLocked()
	s.mu.Unlock()
}

// Durable returns the end of the last frame published (or the end the
// rollout had when the Publisher was made).
func (p *Publisher) Durable() int64 {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.durable
}

// Close records that this DB no longer writes the thread: from here on
// another process may, and its followers read the rollout for what comes.
// It may be called more than once.
func (p *Publisher) Close() {
	p.once.Do(func() {
		s := p.s
		s.mu.Lock()
		s.local = false
		s.changedLocked()
		s.mu.Unlock()
		s.h.release(s)
	})
}
