package rolloutdb

import (
	"context"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// FollowEnd is why a follower stopped without an error.
type FollowEnd string

const (
	// FollowArchived: the thread was archived; every record before the
	// archive was yielded.
	FollowArchived FollowEnd = "archived"
)

// FollowOptions say where a follower starts.
type FollowOptions struct {
	// AfterSeq: the follower yields the records whose seq is greater
	// (0: every record, the header first). A host resuming a client's
	// view passes the last seq the client saw.
	AfterSeq uint64
	// PollInterval is how often a follower of a thread another process
	// writes looks at the rollout when the file system cannot notify it
	// of changes (and, as a safety net, every 8 intervals when it can).
	// Default: 100ms. A thread this DB writes is never polled.
	PollInterval time.Duration
}

// followBatch bounds the records read ahead of the caller.
const followBatch = 1024

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
// Close is called or the DB is closed (ErrClosed). A record is yielded
// once it is durable: for a thread this DB writes, once its append was
// acknowledged (under Options.Sync); for one another process writes, once
// a later frame's header records the file durable past it (its writer's
// journal or fsync made it so) or the follower has synced the rollout
// itself (fdatasync), so a crash of that process cannot take back what
// was yielded (one exception, on that process's failure path: a frame it
// wrote, then failed to make durable when its journal's write failed, and
// cut, may have been synced and yielded first). A torn tail is never yielded (only whole, checked
// frames are read). Damaged records are skipped, as replay skips them (Damage
// lists the regions).
//
// A Follower is not safe for concurrent use; Close may be called from any
// goroutine.
type Follower struct {
	db      *DB
	id      string
	ctx     context.Context
	cancel  context.CancelFunc
	hub     *hub
	poll    time.Duration
	watch   *dirWatch // nil: polling, or not needed (a thread this DB writes)
	noWatch bool      // watching failed: poll

	after  uint64
	fileID uint64
	// The rollout as last opened, kept open between steps; reopened when
	// the hub says the thread moved (moves), or at every step when nothing
	// notifies.
	file     vfs.File    // a plain rollout (nil: cold, or not open)
	src      io.ReaderAt // what is read: file, or a cold rollout's bytes
	srcSize  int64       // a cold rollout's size
	path     string
	archived bool
	moves    uint64
	// What the last step of another process's file did: cut, it stopped
	// short of what was durable (a read-ahead's worth); shared, it kept
	// frames new to the hub for the thread's other followers here.
	cut, shared bool
	off         int64          // the next frame to read
	anchor      rollout.Anchor // the last frame read (Offset 0: none yet)
	damage      []*rollout.CorruptionError

	// Read ahead: records read from the file (buf), then frames kept in
	// the hub (mem, shared with the hub and never copied: a copy of every
	// record for each of 64 followers was most of what the process
	// allocated), of which the records after memAfter, from mi, ri on.
	buf      []rollout.Record
	mem      []hubFrame
	mi, ri   int
	memAfter uint64
	rec      rollout.Record
	span     spanReader // another process's file: what the step reads
	err      error
	end      FollowEnd
	done     bool

	closeOnce sync.Once
	closed    chan struct{}
	cmu       sync.Mutex // inNext, and the file and watch once closed
	inNext    bool
	reopen    bool // look where the rollout is at the next step
}

// Follow starts following a thread, active or archived. It fails at once
// if the thread has no rollout.
func (db *DB) Follow(ctx context.Context, id string, o FollowOptions) (*Follower, error) {
	if err := rollout.ValidateThreadID(id); err != nil {
		return nil, err
	}
	if _, err := db.rolloutPath(id); err != nil {
		return nil, err
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 100 * time.Millisecond
	}
	f := &Follower{db: db, id: id, hub: db.hubFor(id), poll: o.PollInterval, after: o.AfterSeq, off: rollout.FileHeaderSize, closed: make(chan struct{})}
	f.hub.follow(1)
	db.counters.followers.Add(1)
	f.ctx, f.cancel = context.WithCancel(ctx)
	// A thread far along need not be read from its start. Following a
	// thread this DB writes from its last record on (the usual "from
	// now"), the follower starts where the last acknowledged frame ended;
	// else the projection's anchor is a frame boundary the file holds, at
	// or before AfterSeq.
	if end, seq := f.hub.tail(); f.inProcess() && end > 0 && o.AfterSeq >= seq {
		f.off = end
	} else if a, ok := db.state.Anchor(ctx, id); ok && o.AfterSeq > 0 && a.Seq <= o.AfterSeq+1 && a.Offset > rollout.FileHeaderSize && db.holdsFrame(id, a) {
		f.off = a.Offset
	}
	return f, nil
}

// holdsFrame reports whether the thread's rollout holds the frame a
// names, where it names it (the projection's anchor may be ahead of a
// rollout a crash or a repair left shorter or different).
func (db *DB) holdsFrame(id string, a rollout.Anchor) bool {
	path, err := db.rolloutPath(id)
	if err != nil {
		return false
	}
	src, _, closeSrc, err := rollout.OpenRead(db.fs, path)
	if err != nil {
		return false
	}
	defer closeSrc()
	h, err := rollout.ReadFrameHeader(src, a.Offset)
	return err == nil && h.Seq == a.Seq && h.DataCRC == a.DataCRC
}

// Next waits for the next record and reports whether there is one.
func (f *Follower) Next() bool {
	if !f.isClosed() && f.pop() {
		return true // read ahead: no step, no lock
	}
	f.cmu.Lock()
	f.inNext = true
	f.cmu.Unlock()
	defer func() {
		f.cmu.Lock()
		f.inNext = false
		if f.isClosed() {
			f.release()
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
			f.stop(nil) // after the records read with it
			continue
		}
		var tick <-chan time.Time
		var t *time.Timer
		if !f.inProcess() {
			d := f.poll
			if f.watch != nil {
				d *= 8 // a safety net: notification does the work
			}
			t = time.NewTimer(d)
			tick = t.C
		}
		select {
		case <-wake:
		case <-tick:
			f.reopen = true // the safety net: a notification may have been lost
		case <-f.closed:
			f.stop(nil)
		case <-f.db.done:
			f.stop(errors.Wrapf(ErrClosed, "follow %s", f.id))
		case <-f.ctx.Done():
			f.stop(f.ctx.Err())
		}
		if t != nil {
			t.Stop()
		}
	}
}

// pop moves to the next record read ahead, if there is one.
func (f *Follower) pop() bool {
	if len(f.buf) > 0 {
		f.rec, f.buf = f.buf[0], f.buf[1:]
		return true
	}
	for f.mi < len(f.mem) {
		recs := f.mem[f.mi].recs
		for f.ri < len(recs) {
			rec := recs[f.ri]
			f.ri++
			if rec.Seq > f.memAfter {
				f.rec = rec
				return true
			}
		}
		f.mi, f.ri = f.mi+1, 0
	}
	f.mem = nil
	return false
}

// Record returns the record Next found. It stays valid after Next moves on.
func (f *Follower) Record() rollout.Record { return f.rec }

// Err is why the follower stopped: nil when it ended (End) or was closed.
func (f *Follower) Err() error { return f.err }

// End is how the thread ended, if it did without an error.
func (f *Follower) End() FollowEnd { return f.end }

// Damage lists the damaged regions the follower skipped.
func (f *Follower) Damage() []*rollout.CorruptionError { return f.damage }

// Close stops the follower; a Next waiting returns false.
func (f *Follower) Close() error {
	f.closeOnce.Do(func() {
		close(f.closed)
		f.cancel()
		f.hub.follow(-1)
		f.db.releaseHub(f.id, f.hub)
		f.db.counters.followers.Add(-1)
	})
	f.cmu.Lock()
	if !f.inNext {
		f.release() // else the Next that runs does, as it returns
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

// release (cmu held, no Next running) closes the rollout and gives back
// the directory watch.
func (f *Follower) release() {
	f.closeFile()
	if f.watch != nil {
		f.db.unwatchDirs()
		f.watch = nil
	}
}

func (f *Follower) stop(err error) {
	if !f.done {
		f.release()
		f.buf, f.mem = nil, nil // a stopped follower yields nothing more
		f.done, f.err = true, err
		if errors.Is(err, context.Canceled) {
			select {
			case <-f.closed:
				f.err = nil // closed, not failed
			default:
			}
		}
	}
}

// inProcess reports whether this DB writes the thread: then what it
// acknowledged bounds what is read, and nothing is polled.
func (f *Follower) inProcess() bool {
	f.db.mu.Lock()
	t := f.db.threads[f.id]
	f.db.mu.Unlock()
	return t != nil && !t.archived.Load()
}

// step reads what became durable since the last step; it reports whether
// it found records. Done in Next's goroutine only; the file it keeps open
// is closed when Next ends.
func (f *Follower) step() (bool, <-chan struct{}, error) {
	// The wake-up is taken before looking: no change is missed.
	inProcess := f.inProcess()
	var wake <-chan struct{}
	if inProcess {
		var frames []hubFrame
		frames, wake = f.hub.take(f.after, followBatch)
		// From memory: what this DB acknowledged; or nothing new, if the
		// follower is at the durable end (frames acknowledged out of
		// order leave the memory short of it: the file has them).
		if len(frames) > 0 || frames != nil && f.off >= f.hub.durable() {
			return f.takeFrames(frames), wake, nil
		}
	} else {
		// Another process writes it: what a follower of this process
		// read of the file is kept in the hub too, and one follower at a
		// time reads the file, so that a thread's followers here read
		// each frame once between them.
		frames, w := f.hub.take(f.after, followBatch)
		wake = w
		if len(frames) > 0 {
			if f.sameFile(frames) {
				return f.takeFrames(frames), wake, nil
			}
			// Kept frames of another file (a repair's): the file says what
			// happened; the wake-up is taken before it is looked at.
			frames, wake = nil, f.hub.waitCh()
		}
		// Caught up with what the followers here read: the file is
		// looked at again only once something may have changed since a
		// follower looked (the directory watch reported a write, a move,
		// or a look at an unvouched tail is due), and by one follower;
		// the others wait for what it finds. 64 followers each looking
		// at the file at each wake-up, one after another, was most of
		// their processor time.
		// (Not a follower of an archived thread: no write will come to
		// tell it that it reached the end.)
		caughtUp := frames != nil && f.watch != nil && f.src != nil && !f.reopen && !f.archived && f.moves == f.hub.moved()
		if caughtUp && f.hub.looked.Load() >= f.hub.gen.Load() {
			return false, wake, nil
		}
		if !caughtUp {
			f.hub.readMu.Lock()
		} else if !f.hub.readMu.TryLock() {
			return false, wake, nil // the holder wakes the others as it unlocks
		}
		if hook := f.db.private.readLocked; hook != nil {
			hook(f)
		}
		if frames, _ := f.hub.take(f.after, followBatch); len(frames) > 0 && f.sameFile(frames) {
			// Read by the follower that held the lock before: nothing is
			// looked at, so a follower that found the lock taken (held
			// here) and waits to be woken must be, to look itself.
			f.hub.unlockRead(false)
			return f.takeFrames(frames), wake, nil
		}
		gen := f.hub.gen.Load()
		f.hub.looks.Add(1)
		f.cut, f.shared = false, false
		found, err := f.stepFile(false)
		// A follower closed during its look (by its client, from another
		// goroutine) kept nothing for the others (Close lowered the
		// follower count first): the look is theirs still to make.
		if err == nil && !f.cut && !f.isClosed() {
			if gen > f.hub.looked.Load() {
				f.hub.looked.Store(gen) // readMu orders the stores
			}
		}
		if f.cut {
			f.hub.gen.Add(1) // more is durable: a caught-up follower reads on
		}
		f.hub.unlockRead(f.shared)
		return found, wake, err
	}
	found, err := f.stepFile(inProcess)
	return found, wake, err
}

// unlockRead releases the read lock of another process's file and wakes
// the followers waiting for its holder: with what it kept (shared), or to
// look themselves at a notice no look covered yet. A follower that found
// the lock taken waits for this wake-up, not the notice's; so every
// release wakes them while a notice is owed, whatever the holder did (in
// CI, a holder that only took frames another had read left one waiting
// for the safety net). After the unlock: a notice between the look and
// the unlock is seen.
func (h *hub) unlockRead(shared bool) {
	h.readMu.Unlock()
	if shared || h.looked.Load() < h.gen.Load() {
		h.wakeAll()
	}
}

// sameFile: the kept frames are of the file this follower read (a repair
// writes a new one; the follower must find that out from the file).
func (f *Follower) sameFile(frames []hubFrame) bool {
	return f.fileID == 0 || frames[0].fileID == f.fileID
}

// stepFile reads the rollout from where the follower is up to what is
// durable.
func (f *Follower) stepFile(inProcess bool) (bool, error) {
	// The directory watch only while another process may write: this
	// DB's own appends wake the follower themselves, and a watch would
	// add an event per write.
	switch {
	case inProcess && f.watch != nil:
		f.db.unwatchDirs()
		f.watch = nil
	case !inProcess && f.watch == nil && f.db.fs == vfs.OS && !f.noWatch:
		if f.watch = f.db.watchDirs(); f.watch == nil {
			f.noWatch = true // the file system cannot notify: poll
		}
	}
	if err := f.open(inProcess); err != nil || f.src == nil {
		return false, err
	}
	size := f.srcSize
	if f.file != nil {
		var err error
		if size, err = f.file.Size(); err != nil {
			return false, err
		}
	}
	if size < f.off {
		return false, errors.Wrapf(ErrRolloutReplaced, "follow %s: the rollout is %d bytes, shorter than the frame it was followed from (%d)", f.id, size, f.off)
	}
	bound := size
	src := f.src
	switch {
	case inProcess && !f.archived:
		bound = min(size, f.hub.durable())
	case f.file != nil && bound > f.off:
		// What was written since the last step, in one read: the frame
		// headers looked at below and the frames read were a read each
		// (a fifth of the processor samples of a process following with
		// 64 followers).
		if err := f.span.fill(f.file, f.off, size); err != nil {
			return false, errors.Wrapf(err, "follow %s", f.id) // the error names the read and the path
		}
		src = &f.span
		// Another process writes it (or nobody does). A frame is durable
		// once a later frame says so (each frame header records how far
		// its writer knew the file durable: the journal or an fsync had
		// made it so), or once synced here, whoever wrote it. A tail no
		// later frame vouches for is synced once the file has not grown
		// for tailWait: while the writer streams, no follower syncs.
		var err error
		if bound, err = f.confirmed(src, bound); err != nil {
			return false, err
		}
	}
	found := false
	if bound > f.off {
		var err error
		// Kept for the others only if there are others.
		publish := !inProcess && f.file != nil && f.hub.followers.Load() > 1
		found, err = f.read(src, bound, f.path, publish)
		if err != nil {
			f.span.done()
			return false, err
		}
	}
	f.span.done()
	if !found && f.archived && f.off >= size {
		f.end = FollowArchived
	}
	return found, nil
}

// tailWait is how long another process's thread's file must have stopped
// growing before a follower syncs the tail no later frame vouched for. A
// follower's own wait of 2 ms made the followers of a writer that streamed
// sync its file at every pause of its disk, 3 times in 10 appends, and
// each sync made the writer's next pause. tailMaxWait bounds the wait
// when no frame vouches for another while the file grows (a writer under
// SyncNever, or damage before the tail): once no follower has found a frame
// vouched for in that long, one syncs.
const (
	tailWait    = 10 * time.Millisecond
	tailMaxWait = 50 * time.Millisecond
)

// quiet reports how long the file has been size bytes (as followers saw
// it).
func (h *hub) quiet(size int64) time.Duration {
	now := time.Now().UnixNano()
	if h.seenSize.Swap(size) != size {
		h.grownAt.Store(now)
		return 0
	}
	return time.Duration(now - h.grownAt.Load())
}

// confirmed returns how far, up to size, the file is known durable: by
// the frames' own durable offsets, by a sync of this process, or by one it
// makes now for a tail that waited long enough. Until then, the hub's
// retry has its followers look again.
func (f *Follower) confirmed(src io.ReaderAt, size int64) (int64, error) {
	// A sync counts for the file it was made on: the thread's file may
	// have been replaced (deleted and created again, repaired) before the
	// directory watch told the hub (or with no watch at all), and the old
	// file's sync must not vouch for the new one's frames.
	id := f.span.id // the file open now, whatever the follower read before
	known := f.hub.synced(id)
	// Frame ends from f.off on, and the furthest durable offset they record.
	// At most a read-ahead's worth of frames: a follower far behind reads
	// in steps, and each looks at its own stretch only.
	lastEnd, vouched := f.off, int64(0)
	var ends []int64
	damaged := false
	for off := f.off; off < size && len(ends) < followBatch; {
		h, err := rollout.ReadFrameHeader(src, off)
		end := off + rollout.FrameHeaderSize + int64(h.Length)
		if err != nil || h.FileID != f.fileIDOr(h.FileID) || end > size {
			// The tail being written, or damage (the reader judges): a
			// whole header that is bad, or of another file. A look that
			// stops at damage is cut, so that the next one syncs past it
			// (followers caught up with what this look kept would otherwise
			// wait for a write that may never come).
			damaged = size-off >= rollout.FrameHeaderSize && (err != nil || h.FileID != f.fileIDOr(h.FileID))
			break
		}
		vouched = max(vouched, h.Durable)
		ends = append(ends, end)
		lastEnd, off = end, end
	}
	if lastEnd == f.off {
		if size-f.off < rollout.FrameHeaderSize {
			return f.off, nil // a frame being written: nothing whole yet
		}
		// A frame not whole yet, or damage: what follows is yielded only
		// once synced here (the reader skips damage; nothing vouches for
		// the frames after it).
		ends, lastEnd = []int64{size}, size
	}
	ok := max(known, vouched)
	bound := f.off
	for _, e := range ends {
		if e <= ok {
			bound = e
		}
	}
	now := time.Now().UnixNano()
	if bound > f.off {
		f.hub.vouchedAt.Store(now) // the writer vouches: it streams
	} else {
		f.hub.vouchedAt.CompareAndSwap(0, now) // the first look: the wait starts
	}
	if bound > f.off && len(ends) == followBatch {
		// A stretch cut short with frames after it, which will vouch for
		// its last ones at the next step.
		f.cut = true
		return bound, nil
	}
	if bound == lastEnd {
		if damaged && bound > f.off {
			f.cut = true // stopped at damage: the next look syncs past it
		}
		return bound, nil // all vouched for
	}
	quiet, waited := f.hub.quiet(size), time.Duration(now-f.hub.vouchedAt.Load())
	if quiet < tailWait && waited < tailMaxWait {
		f.hub.retryAfter(min(tailWait-quiet, tailMaxWait-waited))
		return bound, nil
	}
	if err := f.hub.syncTo(f.file, id, lastEnd); err != nil {
		return f.off, errors.Wrapf(err, "follow %s", f.id) // the error names the sync and the path
	}
	if (len(ends) == followBatch || damaged) && lastEnd < size {
		f.cut = true // frames after the batch synced: the next step reads on
	}
	// What is yielded is what the file held when it was synced: the span
	// was read before, and a writer that failed may have cut and rewritten
	// its tail since.
	f.span.drop()
	// The sync is progress too: tailMaxWait counts again from here. Else a
	// follower that then found one frame at a time, each vouched for
	// only by the next, synced at every step: up to 90 syncs in 500
	// appends of BenchmarkFollow once a pause of the writer began it, each
	// a flush of the writer's file while it streams.
	f.hub.vouchedAt.Store(time.Now().UnixNano())
	return lastEnd, nil
}

// spanMax bounds what a step reads of another process's file at once (a
// follower far behind reads the rest a read at a time); a buffer over
// spanKeep is not kept between steps.
const (
	spanMax  = 1 << 20
	spanKeep = 256 << 10
)

// spanReader serves the reads of a follower's step of another process's
// file from what it read of it at once: the stretch written since the
// last step, and the file header (read once per open file: it never
// changes). Reads outside them go to the file.
type spanReader struct {
	file vfs.File
	base int64
	b    []byte
	head []byte
	id   uint64 // the file's id, from head (0: not read)
}

// fill reads [off, size) of file, at most spanMax bytes of it.
func (s *spanReader) fill(file vfs.File, off, size int64) error {
	if s.file != file {
		s.reset()
		s.file = file
	}
	if s.head == nil {
		head := make([]byte, rollout.FileHeaderSize)
		if n, _ := file.ReadAt(head, 0); n == len(head) {
			s.head = head
			if h, err := rollout.ParseFileHeader(head); err == nil {
				s.id = h.FileID
			}
		}
	}
	n := min(size-off, spanMax)
	if int64(cap(s.b)) < n {
		s.b = make([]byte, n)
	}
	k, err := file.ReadAt(s.b[:n], off)
	if err != nil && err != io.EOF {
		s.b = s.b[:0]
		return err
	}
	s.base, s.b = off, s.b[:k] // short: the file was cut; reads past it go to the file
	return nil
}

func (s *spanReader) reset() { *s = spanReader{b: s.b[:0]} }

// drop forgets the stretch read: reads go to the file.
func (s *spanReader) drop() { s.b = s.b[:0] }

// done: the step is over; a large buffer is let go.
func (s *spanReader) done() {
	if cap(s.b) > spanKeep {
		s.b = nil
	}
	s.b = s.b[:0]
}

func (s *spanReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= s.base && off+int64(len(p)) <= s.base+int64(len(s.b)) {
		return copy(p, s.b[off-s.base:]), nil
	}
	if off == 0 && len(p) <= len(s.head) {
		return copy(p, s.head), nil
	}
	return s.file.ReadAt(p, off)
}

// fileIDOr is the file id the follower read, or id before it read any.
func (f *Follower) fileIDOr(id uint64) uint64 {
	if f.fileID != 0 {
		return f.fileID
	}
	return id
}

// open (re)opens the rollout where it is now when it may have moved, and
// checks that it still holds the last frame read.
func (f *Follower) open(inProcess bool) error {
	moves := f.hub.moved()
	if f.src != nil && moves == f.moves && !f.reopen && (inProcess || f.watch != nil) {
		return nil
	}
	f.reopen = false
	f.closeFile()
	f.moves = moves
	path, err := f.db.rolloutPath(f.id)
	if errors.Is(err, projection.ErrNotFound) {
		return errors.Wrapf(ErrThreadDeleted, "follow %s after seq %d", f.id, f.after)
	}
	if err != nil {
		return err
	}
	f.path = path
	f.archived = !strings.HasPrefix(path, filepath.Join(f.db.root, rollout.ActiveDir)+string(filepath.Separator))
	if strings.HasSuffix(path, rollout.ColdExt) {
		src, size, _, err := rollout.OpenRead(f.db.fs, path)
		if vfs.IsNotExist(err) {
			return nil // moved between the look and the open: look again
		}
		if err != nil {
			return err
		}
		f.src, f.srcSize = src, size
	} else {
		file, err := f.db.fs.Open(path)
		if vfs.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		f.file, f.src = file, file
	}
	if f.anchor.Offset != 0 {
		h, err := rollout.ReadFrameHeader(f.src, f.anchor.Offset)
		var ce *rollout.CorruptionError
		if err != nil && !errors.As(err, &ce) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			return err // an I/O error, not another file
		}
		if err != nil || h.FileID != f.fileID || h.Seq != f.anchor.Seq || h.DataCRC != f.anchor.DataCRC ||
			f.anchor.Offset+rollout.FrameHeaderSize+int64(h.Length) != f.off {
			return errors.WithHint(errors.Wrapf(ErrRolloutReplaced, "follow %s: the frame at %d is not the one read", f.id, f.anchor.Offset),
				"follow again with AfterSeq set to the last seq seen")
		}
	}
	return nil
}

func (f *Follower) closeFile() {
	if f.file != nil {
		_ = f.file.Close()
	}
	f.span.reset()
	f.file, f.src, f.srcSize = nil, nil, 0
}

// takeFrames takes frames from the hub's memory of what this DB
// acknowledged; false if there were none.
func (f *Follower) takeFrames(frames []hubFrame) bool {
	f.mem, f.mi, f.ri, f.memAfter = frames, 0, 0, f.after
	for _, fr := range frames {
		f.after = max(f.after, fr.recs[len(fr.recs)-1].Seq)
		f.off, f.anchor = fr.end, rollout.Anchor{Offset: fr.off, Seq: fr.recs[0].Seq, DataCRC: fr.crc}
		f.fileID = fr.fileID
	}
	return len(frames) > 0
}

// read reads whole frames from f.off up to bound (durable), at most
// followBatch records ahead of the caller; with publish, the frames read
// are kept in the hub for the thread's other followers.
func (f *Follower) read(src io.ReaderAt, bound int64, path string, publish bool) (bool, error) {
	o := rollout.ReaderOptions{Path: path, StartOffset: f.off}
	if _, ok := src.(*spanReader); ok {
		// In memory already: a small window, reused, instead of one
		// allocated as large as the stretch at every step.
		o.ReadAhead = 16 << 10
	}
	r, err := rollout.NewReader(src, bound, o)
	if err != nil {
		return false, err
	}
	f.fileID = r.Header().FileID
	found := false
	var frames []hubFrame
	var frame []rollout.Record
	for r.Next() {
		rec, h := r.Record(), r.FrameHeader()
		if rec.Seq > f.after {
			f.buf = append(f.buf, rec)
			f.after = rec.Seq
			found = true
		}
		if publish {
			frame = append(frame, rec)
		}
		if rec.Seq == h.Seq+uint64(h.Count)-1 { // the frame's last record
			f.off = r.FrameOffset() + rollout.FrameHeaderSize + int64(h.Length)
			f.anchor = rollout.Anchor{Offset: r.FrameOffset(), Seq: h.Seq, DataCRC: h.DataCRC}
			if publish && len(frame) == int(h.Count) {
				frames = append(frames, hubFrame{recs: frame, off: r.FrameOffset(), end: f.off, crc: h.DataCRC, fileID: f.fileID})
			}
			frame = nil
			if len(f.buf) >= followBatch {
				break
			}
		}
	}
	if f.hub.published(frames, f.moves) > 0 {
		f.shared = true
	}
	if f.off < bound {
		f.cut = true // a read-ahead's worth
	}
	if err := r.Err(); err != nil {
		return found, err
	}
	for _, d := range r.Damage() {
		if d.Offset < f.off {
			f.damage = append(f.damage, d)
		}
	}
	return found, nil
}

// hub tells a thread's followers in this process that something changed:
// an acknowledged append (with the durable end it reached, and its
// records, kept while the thread has followers), a move or a delete (from
// the lifecycle calls, or the directory watch for other processes), a
// write another process made.
type hub struct {
	end       atomic.Int64  // durable end acknowledged in this process
	moves     atomic.Uint64 // moves, deletes and replacements seen
	followers atomic.Int32
	users     int // open threads and followers holding it (db.hubMu)

	// Followers read the kept frames and the wake-up without a lock: an
	// appender that waited for one behind 64 followers taking theirs, all
	// woken at once, lost a fifth of its rate (issue 14's figure). fmu
	// orders the writers of log (the appender, followers publishing what
	// they read); pmu the appender's pacing of the wake-up.
	fmu  sync.Mutex
	log  atomic.Pointer[hubLog]
	wake atomic.Pointer[chan struct{}] // closed at the next change; nil while no one waits

	pmu   sync.Mutex
	woke  time.Time // when an append last woke the followers
	timer bool      // a wake-up is due from a timer

	syncMu   sync.Mutex
	fsynced  int64        // what a follower synced of the file (since the last move)
	syncedID uint64       // the id of the file fsynced is of
	syncs    atomic.Int64 // the syncs followers made

	// The size followers last saw the file at, and when it was first seen
	// at that size: a tail is synced by a follower only once the file has
	// stopped growing for tailWait. vouchedAt: when a follower last found
	// frames vouched for that it had waited for (unix ns).
	seenSize  atomic.Int64
	grownAt   atomic.Int64
	vouchedAt atomic.Int64

	readMu sync.Mutex // one follower at a time reads another process's rollout

	// gen counts the notices that another process's file may have
	// changed (a write the watch reported, a move, a retry due); looked
	// is the gen before the last look of a follower here that read all
	// that was durable. A follower caught up with the kept frames looks
	// at the file only while looked < gen.
	gen, looked atomic.Uint64
	looks       atomic.Int64 // the followers' looks at the file (tests count them)
	rmu         sync.Mutex
	retryAt     time.Time   // when the retry timer is due
	retryT      *time.Timer // a look at an unvouched tail, due at retryAt

	tmu     sync.Mutex
	tailEnd int64  // the end of the last frame acknowledged in order,
	tailSeq uint64 // and its last seq: where a follower from now starts
}

// tail returns the end and last seq of the last frame acknowledged (0, 0:
// none known).
func (h *hub) tail() (int64, uint64) {
	h.tmu.Lock()
	defer h.tmu.Unlock()
	return h.tailEnd, h.tailSeq
}

func (h *hub) setTail(end int64, seq uint64) {
	h.tmu.Lock()
	if end > h.tailEnd {
		h.tailEnd, h.tailSeq = end, seq
	}
	h.tmu.Unlock()
}

// hubLog is the latest acknowledged frames, consecutive, as followers see
// them: published whole. A frame is only ever added past the end of every
// log published before (into the array's spare room, or a new array), and
// the oldest are dropped by slicing, never by clearing, so a log once
// published never changes under its reader.
type hubLog struct {
	frames []hubFrame
	held   int // records in frames
}

// list returns the log's frames (none for a nil log).
func (l *hubLog) list() []hubFrame {
	if l == nil {
		return nil
	}
	return l.frames
}

// addLocked (fmu held) publishes the log with fr added (after the frames
// that it follows on from, else alone), the oldest dropped past
// hubRecords.
func (h *hub) addLocked(fr hubFrame) {
	var frames []hubFrame
	held := 0
	if l := h.log.Load(); l != nil {
		frames, held = l.frames, l.held
	}
	if n := len(frames); n > 0 {
		last := frames[n-1]
		if last.recs[len(last.recs)-1].Seq+1 != fr.recs[0].Seq || fr.fileID != last.fileID || fr.off != last.end {
			frames, held = nil, 0
		}
	}
	frames = append(frames, fr)
	held += len(fr.recs)
	drop := 0
	for held > hubRecords && len(frames)-drop > 1 {
		held -= len(frames[drop].recs)
		drop++
	}
	h.log.Store(&hubLog{frames: frames[drop:], held: held})
}

// waitCh returns the wake-up to wait on: closed at the next change.
func (h *hub) waitCh() <-chan struct{} {
	for {
		if p := h.wake.Load(); p != nil {
			return *p
		}
		ch := make(chan struct{})
		if h.wake.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

// wakeAll closes the wake-up, if anyone waits on it.
func (h *hub) wakeAll() {
	if p := h.wake.Swap(nil); p != nil {
		close(*p)
	}
}

// hubFrame is one acknowledged frame, as the writer had it.
type hubFrame struct {
	recs     []rollout.Record
	off, end int64
	crc      uint32
	fileID   uint64
}

// hubRecords bounds the records a hub keeps for its followers.
const hubRecords = 2048

// hubFor returns a thread's hub for a user (an open thread, a follower),
// who gives it back with releaseHub: a hub lives while it has users, so
// that a DB that has written many threads keeps hubs for those open or
// followed only.
func (db *DB) hubFor(id string) *hub {
	db.hubMu.Lock()
	defer db.hubMu.Unlock()
	if db.hubs == nil {
		db.hubs = map[string]*hub{}
	}
	h := db.hubs[id]
	if h == nil {
		h = &hub{}
		db.hubs[id] = h
	}
	h.users++
	return h
}

// releaseHub gives back a hub hubFor handed out.
func (db *DB) releaseHub(id string, h *hub) {
	db.hubMu.Lock()
	defer db.hubMu.Unlock()
	if h.users--; h.users == 0 && db.hubs[id] == h {
		delete(db.hubs, id)
	}
}

// hubOf returns a thread's hub if it has one.
func (db *DB) hubOf(id string) *hub {
	db.hubMu.Lock()
	defer db.hubMu.Unlock()
	return db.hubs[id]
}

// pokeHub tells a thread's followers that its rollout may have moved, been
// deleted or replaced.
func (db *DB) pokeHub(id string) {
	if h := db.hubOf(id); h != nil {
		h.moves.Add(1)
		h.gen.Add(1)
		h.syncMu.Lock()
		h.fsynced = 0
		h.syncMu.Unlock()
		h.clear()
		h.advance(0)
	}
}

func (h *hub) follow(n int32) {
	if h.followers.Add(n) == 0 {
		h.clear()
	}
}

// clear forgets the kept frames.
func (h *hub) clear() {
	h.fmu.Lock()
	h.log.Store(nil)
	h.fmu.Unlock()
}

func (h *hub) durable() int64 { return h.end.Load() }

func (h *hub) moved() uint64 { return h.moves.Load() }

func (h *hub) raise(end int64) {
	for {
		old := h.end.Load()
		if end <= old || h.end.CompareAndSwap(old, end) {
			return
		}
	}
}

// advance records a durable end (0: none, only a change) and wakes the
// waiting followers.
func (h *hub) advance(end int64) {
	h.raise(end)
	h.wakeAll()
}

// acked records an acknowledged frame: its end is durable, and while the
// thread has followers its records are kept for them, so that they read
// no file. A frame that does not follow the last one kept (appends
// acknowledged out of order, a frame written past this hub) starts the
// memory over: followers read the file for what it lacks. An appender
// with no followers only stores the end; no lock it takes is one a
// follower takes.
func (h *hub) acked(res rollout.AppendResult, fileID uint64, recs []rollout.Record) {
	h.raise(res.End)
	h.setTail(res.End, res.LastSeq)
	if h.followers.Load() == 0 || len(recs) == 0 {
		return
	}
	h.fmu.Lock()
	h.addLocked(hubFrame{recs: recs, off: res.Offset, end: res.End, crc: res.DataCRC, fileID: fileID})
	h.fmu.Unlock()
	h.paced()
}

// published keeps frames a follower read of another process's thread
// (whole, durable) for the thread's other followers in this process, as
// acked keeps what this DB acknowledged. Frames the memory has already
// are passed over; one that does not follow on from the last kept starts
// it over. moves is the hub's count of moves when the follower opened the
// file it read: frames read of a file since moved, deleted or replaced
// are not kept (pokeHub counts the move, then clears what is kept; a
// look that began before it must not fill it again with the old file's
// frames, which a new follower would take as the thread's).
func (h *hub) published(frames []hubFrame, moves uint64) (added int) {
	if len(frames) == 0 || h.followers.Load() < 2 {
		return 0
	}
	h.fmu.Lock()
	defer h.fmu.Unlock()
	if h.moves.Load() != moves {
		return 0
	}
	for _, fr := range frames {
		if kept := h.log.Load().list(); len(kept) > 0 {
			last := kept[len(kept)-1]
			if fr.recs[len(fr.recs)-1].Seq <= last.recs[len(last.recs)-1].Seq && fr.fileID == last.fileID {
				continue
			}
		}
		h.addLocked(fr)
		added++
	}
	return added
}

// written wakes the followers, paced, for a write another process made
// (from the directory watch).
func (h *hub) written() {
	h.gen.Add(1)
	h.paced()
}

// retryAfter has the followers look at the file again after d (one of
// them: a look at an unvouched tail), unless a look is due sooner.
func (h *hub) retryAfter(d time.Duration) {
	h.rmu.Lock()
	defer h.rmu.Unlock()
	at := time.Now().Add(d)
	if h.retryAt.After(time.Now()) && !h.retryAt.After(at) {
		return // one is due sooner
	}
	if h.retryT != nil {
		h.retryT.Stop()
	}
	h.retryAt = at
	h.retryT = time.AfterFunc(d, func() {
		h.gen.Add(1)
		h.wakeAll()
	})
}

// paced wakes the followers now, or arranges for a timer to wake them
// once wakeInterval has passed since the last time.
func (h *hub) paced() {
	if h.wake.Load() == nil {
		return // no one waits
	}
	every := wakeInterval(h.followers.Load())
	h.pmu.Lock()
	now := time.Now()
	if now.Sub(h.woke) >= every {
		h.woke = now
		h.pmu.Unlock()
		h.wakeAll()
		return
	}
	if h.wake.Load() != nil && !h.timer {
		// Woken a moment ago: the next wake-up waits out the interval,
		// from a timer, not from the appender.
		h.timer = true
		time.AfterFunc(every-now.Sub(h.woke), func() {
			h.pmu.Lock()
			h.timer, h.woke = false, time.Now()
			h.pmu.Unlock()
			h.wakeAll()
		})
	}
	h.pmu.Unlock()
}

// wakeInterval is how often, at most, appends wake a thread's followers.
// Each wake-up of a follower costs the appenders (on two processors, more
// than an append), so while appends come faster, the followers take them
// in batches: 500µs apart for one follower, 250µs more for each other,
// at most 20ms (64 followers: 16ms).
func wakeInterval(followers int32) time.Duration {
	return min(max(500*time.Microsecond, time.Duration(followers)*250*time.Microsecond), 20*time.Millisecond)
}

// take returns the kept frames after seq after, up to about max records,
// if they follow on from it: empty (not nil) when the last one kept is
// after's, nil when the memory does not reach back to it; and the channel
// closed at the next change.
func (h *hub) take(after uint64, max int) ([]hubFrame, <-chan struct{}) {
	// The wake-up first: a frame added after the look below closes it.
	wake := h.waitCh()
	frames := h.log.Load().list()
	// The first frame ending after it (frames are in seq order).
	i := sort.Search(len(frames), func(i int) bool {
		recs := frames[i].recs
		return recs[len(recs)-1].Seq > after
	})
	if i == len(frames) {
		if n := len(frames); n > 0 && frames[n-1].recs[len(frames[n-1].recs)-1].Seq == after {
			return []hubFrame{}, wake // caught up: nothing new, nothing to read elsewhere
		}
		return nil, wake
	}
	if frames[i].recs[0].Seq > after+1 {
		return nil, wake
	}
	j, n := i, 0
	for ; j < len(frames) && n < max; j++ {
		n += len(frames[j].recs)
	}
	return frames[i:j:j], nil // the log never changes: no copy
}

// synced is how far a follower of this process synced the file with
// this id (0 for another file, or one whose id is not known).
func (h *hub) synced(id uint64) int64 {
	h.syncMu.Lock()
	defer h.syncMu.Unlock()
	if id == 0 || id != h.syncedID {
		return 0
	}
	return h.fsynced
}

// syncTo makes the file (with this id) durable through bound, unless a
// follower of this process did so already.
func (h *hub) syncTo(file vfs.File, id uint64, bound int64) error {
	h.syncMu.Lock()
	defer h.syncMu.Unlock()
	if id != 0 && id == h.syncedID && h.fsynced >= bound {
		return nil
	}
	h.syncs.Add(1)
	if err := file.Sync(); err != nil {
		return err
	}
	h.fsynced, h.syncedID = bound, id
	return nil
}

// reset: a writer opened the thread; what the file holds is durable.
func (h *hub) reset(end int64, lastSeq uint64) {
	h.end.Store(end)
	h.tmu.Lock()
	h.tailEnd, h.tailSeq = end, lastSeq
	h.tmu.Unlock()
	h.clear()
	h.advance(0)
}

// dirWatch is the DB's one notification of changes to the thread
// directories (one inotify instance, however many followers), shared by
// the followers of threads other processes write.
type dirWatch struct {
	n    dirNotifier
	refs int
}

// watchDirs starts (or shares) the directory watch; nil if the file
// system cannot notify (the followers poll then).
func (db *DB) watchDirs() *dirWatch {
	db.hubMu.Lock()
	defer db.hubMu.Unlock()
	if db.dirs != nil {
		db.dirs.refs++
		return db.dirs
	}
	n, err := db.private.newDirNotifier([]string{filepath.Join(db.root, rollout.ActiveDir), filepath.Join(db.root, rollout.ArchivedDir)})
	if err != nil {
		db.logger().Warn("rolloutdb: no file-change notification; followers poll", "err", err.Error())
		return nil
	}
	db.dirs = &dirWatch{n: n, refs: 1}
	go db.dispatch(n)
	return db.dirs
}

func (db *DB) unwatchDirs() {
	db.hubMu.Lock()
	defer db.hubMu.Unlock()
	if db.dirs == nil {
		return
	}
	if db.dirs.refs--; db.dirs.refs == 0 {
		_ = db.dirs.n.close()
		db.dirs = nil
	}
}

// threadOfName is the thread a file in a thread directory belongs to:
// "<id>.rollout" and the files beside it ("<id>.rollout.zst", ".torn-",
// ".orig-"), and ".tmp-<id>-<random>": a writer that created its rollout
// keeps the file it created under that name, and the notification names
// the file by it. Thread ids hold no dots.
func threadOfName(name string) string {
	if rest, ok := strings.CutPrefix(name, ".tmp-"); ok {
		if i := strings.LastIndexByte(rest, '-'); i > 0 {
			return rest[:i]
		}
		return ""
	}
	if id, _, ok := strings.Cut(name, "."); ok && id != "" {
		return id
	}
	return ""
}

// Events are taken in rounds: dispatch waits dispatchEvery after a round,
// then takes every event that has come, and wakes each thread's followers
// once for all the writes of a round. A writer in another process makes
// an event per write; while dispatch waits, nothing reads them, and the
// kernel merges the writes to one file into the event queued first
// (notifyLinux; elsewhere fsnotify's reader holds one event and the
// kernel merges what follows it). Writes to many files are not merged: a
// round takes all that came, so that the kernel's queue does not
// overflow behind the wait.
//
// 1.5 ms, not 500 µs: with the fsnotify reader, one follower of another
// process's thread read 0.918x its writer's rate without followers when
// woken every 500 µs, 0.941x every 1.5 ms (means of 8 and 9 runs, in a
// benchmark that then paused before follower rounds only: compare the
// two, not the figures), for 0.4 ms more latency (p50 0.7 ms to 1.1 ms;
// BenchmarkFollow, docs/BENCHMARKS.md).
const dispatchEvery = 1500 * time.Microsecond

// dispatchIdle: the pause after a round that woke no follower (writes to
// threads no follower here follows, for watchers only).
const dispatchIdle = 20 * time.Millisecond

// dispatch wakes the followers of the threads the events name, and tells
// watchers.
func (db *DB) dispatch(n dirNotifier) {
	written := map[string]bool{}
	for {
		evs, overflow, ok := n.wait()
		if !ok {
			return
		}
		if overflow {
			db.overflowed()
		}
		for _, ev := range evs {
			db.event(ev, written)
		}
		// The next round comes when the followers written to want waking
		// again: a thread's followers are woken at most every
		// wakeInterval (16 ms for 64 of them), and a round between costs
		// the writer as much for nothing.
		pause := dispatchIdle
		for id := range written {
			if h := db.hubOf(id); h != nil {
				h.written()
				if n := h.followers.Load(); n > 0 {
					pause = min(pause, max(dispatchEvery, wakeInterval(n)))
				}
			}
			delete(written, id)
		}
		time.Sleep(pause)
	}
}

// event takes one notification: watchers are told at once, a write is
// noted in written (its followers are woken at the round's end), anything
// else makes the thread's followers look where its rollout is.
func (db *DB) event(ev fsEvent, written map[string]bool) {
	id := threadOfName(filepath.Base(ev.Name))
	if id == "" {
		return
	}
	db.notifyFS(id, ev)
	if ev.Op == opWrite {
		written[id] = true
	} else {
		db.pokeHub(id) // created, removed, renamed: look where it is
	}
}

// overflowed: the kernel dropped events; every follower looks where its
// rollout is now, and watchers are told to re-read the list.
func (db *DB) overflowed() {
	db.notify("", ThreadsMissed)
	db.hubMu.Lock()
	ids := make([]string, 0, len(db.hubs))
	for id := range db.hubs {
		ids = append(ids, id)
	}
	db.hubMu.Unlock()
	for _, id := range ids {
		db.pokeHub(id)
	}
}
