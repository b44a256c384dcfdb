package rollout

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// A Journal makes appends to many rollouts durable with one shared,
// group-committed log: the workspace journal of one writing process.
//
// Why: a rollout that grows by every append pays, at each fdatasync, for
// its data, its inode (the new size) and the flush; and 64 threads appending
// at once pay 64 of those, since an fsync covers one file. The journal's
// segments are zero-filled (or recycled) before they are used, so its
// fdatasync writes data only, and one fdatasync covers the frames of every
// thread that were written meanwhile.
//
// A writer opened with Options.Journal (and SyncAlways) writes each frame
// to its rollout exactly as before, without an fsync, and then copies it
// into the journal; the append is acknowledged once the journal frame
// holding the copy is durable. Rollouts are synced in the background, when
// a segment fills: a segment is released (kept for reuse) once every
// rollout it holds frames of is synced past them. After a crash,
// RecoverJournals writes back into the rollouts what the journal holds and
// they lack, before anything reads them for resume, writes or repairs them.
// The rollout stays the authority, in the same format: readers never look
// at the journal.
//
// Order and failure rules:
//   - A writer copies its frames into the journal under its own lock, so the
//     journal holds each thread's frames in rollout order, and journal frames
//     are written one at a time, each made durable before the next is
//     acknowledged: a durable entry implies every earlier entry of its
//     thread is durable.
//   - When a journal write or fdatasync fails, everything not yet durable is
//     abandoned: the writers of those frames are told before any waiter
//     returns, refuse further copies until they have cut their rollouts back
//     to what was acknowledged, and their appenders get ErrNotDurable; the
//     journal overwrites its unsynced region with zeros and syncs that before
//     it writes again (a failed fsync may have lost pages that could come
//     back, and replay must never find an entry that was not acknowledged).
//   - A rollout's background fsync that fails leaves acknowledged frames
//     possibly only in the journal: the writer refuses further appends, and
//     every segment from then on is kept, until the thread is reopened (its
//     frames are then written back from the journal) or the process ends
//     (RecoverJournals does it).
type Journal struct {
	fs       vfs.FS
	root     string // the data directory
	id       string
	lock     vfs.File
	opts     JournalOptions
	segSize  int64
	batchMax int // bytes of one group commit: one journal write, one fsync
	maxEntry int // rollout frames larger than this go to their rollout directly

	releaseMu sync.Mutex // one release at a time
	mu        sync.Mutex
	cond      *sync.Cond // on mu: a preparation or a leader finished
	seg       *jsegment  // being written
	spare     *jsegment  // prepared, next
	preparing bool
	sealed    []*jsegment // full, waiting for their rollouts to be synced
	free      []string    // released segment files, kept for reuse
	nextNum   uint64
	pending   []*jbatch // FIFO; the last one takes new entries
	// staging is set while a goroutine holds the stager's role, committing
	// while one commits (pump). staged are batches written to their
	// rollouts and waiting for the next commit.
	staging    bool
	committing bool
	staged     []*jbatch
	// inflight is, for each writer with frames in the commit in flight,
	// its last frame there: a cut keeps it (Writer.cutLocked).
	inflight map[*Writer]jent
	// jepoch moves when a commit fails (failErr): a batch being staged
	// then is abandoned with the rest.
	jepoch     uint64
	failErr    error
	lastCommit time.Duration
	bufs       sync.Pool // batch buffers
	scratch    []byte    // the leader's, for runs of rollout frames
	needCut    bool      // the current segment's unsynced region must be zeroed first
	dirtyEnd   int64     // end of what a failed write may have left in seg
	closed     bool

	wake chan struct{} // the maintainer: release, prepare
	stop chan struct{}
	done chan struct{}

	metrics journalCounters
}

// JournalOptions configure a Journal. The zero value is ready to use.
type JournalOptions struct {
	// FS is the file system. Default: vfs.OS.
	FS vfs.FS
	// SegmentSize is the size of a journal segment, zero-filled once when
	// made and reused afterwards. Default: 16 MiB on vfs.OS, 256 KiB on any
	// other vfs.FS (vfs.MemFS in tests). Minimum 64 KiB.
	SegmentSize int64
	// Now stamps journal frames. Default: time.Now.
	Now func() time.Time
	// OnError hears what background work could not do (a rollout sync, a
	// segment prepared or released) that no call returns. Default: none.
	OnError func(error)
}

// jsegment is one segment file in use.
type jsegment struct {
	num     uint64
	name    string
	f       vfs.File
	fileID  uint64
	written int64 // end of the frames written and synced (== synced but during a write)
	seq     uint64
	// ends is, for each writer, the end of its last frame made durable in
	// this segment: what its rollout must be synced past before the
	// segment is released.
	ends map[*Writer]int64
}

// jbatch is one group commit: entries copied in by writers until a leader
// takes it, written with one write and one fdatasync.
type jbatch struct {
	buf     []byte   // journal frames: each a 48-byte header (filled at flush) and entries
	frames  []jframe // where each frame starts in buf
	ents    []jent
	waiters int // appenders waiting on it (mu)
	// res is the commit's outcome, shared by the batch and any copy of it
	// (without): set before done is closed.
	res  *batchResult
	done chan struct{}
}

type batchResult struct{ err error }

type jframe struct{ start, count int }

type jent struct {
	w         *Writer
	off, prev int64  // where the rollout frame goes, after which frame
	end       int64  // the rollout frame's end
	pos, n    int    // where the frame is in the batch's buffer
	seq, last uint64 // its first and last records' seqs
	now       int64  // the entry's time (a rebuild of the buffer keeps it)
	epoch     uint64 // the writer's epoch when it was copied in
}

func newBatch() *jbatch { return &jbatch{done: make(chan struct{}), res: &batchResult{}} }

// add appends an entry (a frame of w's, for off, after prev) to b.
func (b *jbatch) add(w *Writer, frame []byte, off, prev, now int64, epoch uint64) {
	n := entryEnvelopeSize(w.hdr.ThreadID, len(frame))
	if k := len(b.frames); k == 0 || len(b.buf)-b.frames[k-1].start+n > maxJournalFrame || b.frames[k-1].count == MaxRecordsPerFrame {
		b.frames = append(b.frames, jframe{start: len(b.buf)})
		b.buf = append(b.buf, make([]byte, FrameHeaderSize)...)
	}
	b.buf = appendEntry(b.buf, now, w.hdr.ThreadID, w.hdr.FileID, off, prev, frame)
	b.frames[len(b.frames)-1].count++
	seq := binary.LittleEndian.Uint64(frame[28:])
	last := seq + uint64(binary.LittleEndian.Uint16(frame[10:])) - 1
	b.ents = append(b.ents, jent{w: w, off: off, prev: prev, end: off + int64(len(frame)), pos: len(b.buf) - len(frame), n: len(frame), seq: seq, last: last, now: now, epoch: epoch})
}

// dropKey names a writer's frames of one epoch: a failure drops them
// from an offset on, and only them (frames the writer copied in after
// cutting back are of a later epoch).
type dropKey struct {
	w     *Writer
	epoch uint64
}

// without returns b's entries but those dropped (a writer's frames of an
// epoch, from an offset on), in a new buffer.
func (b *jbatch) without(drop map[dropKey]int64) *jbatch {
	nb := &jbatch{done: b.done, res: b.res, waiters: b.waiters}
	for _, e := range b.ents {
		if from, ok := drop[dropKey{e.w, e.epoch}]; ok && e.off >= from {
			continue
		}
		nb.add(e.w, b.buf[e.pos:e.pos+e.n], e.off, e.prev, e.now, e.epoch)
	}
	return nb
}

func (b *jbatch) empty() bool { return len(b.ents) == 0 }

// journalCounters are what Metrics reports.
type journalCounters struct {
	commits, entries, bytes atomic.Int64
	syncNanos               atomic.Int64
	rolloutWriteNanos       atomic.Int64 // the leader writing rollout frames
	rolloutSyncs            atomic.Int64
	segmentsMade, recycled  atomic.Int64
	failures                atomic.Int64
	syncLatency             histogram // µs
	groupSize               histogram // entries made durable by one fdatasync
}

// JournalMetrics is a snapshot of a journal's counters.
type JournalMetrics struct {
	Commits           int64 // group commits: journal writes, each with one fdatasync
	Entries           int64 // rollout frames made durable through the journal
	Bytes             int64 // bytes written to segments
	SyncNanos         int64 // time spent in the journal's fdatasyncs
	RolloutWriteNanos int64 // time the leader spent writing frames to rollouts
	RolloutSyncs      int64 // background fdatasyncs of rollouts (to release segments)
	SegmentsMade      int64 // segments zero-filled
	SegmentsReused    int64 // segments recycled
	Failures          int64 // failed journal writes or syncs
	SegmentsInUse     int   // current, sealed and spare segments
	SealedUnsynced    int   // full segments waiting for their rollouts' sync
	EntriesInFlight   int   // entries copied in, not yet durable
	// SyncLatency is the journal's fdatasyncs' latency in µs; GroupSize
	// the frames each of them made durable (group commit).
	SyncLatency, GroupSize Histogram
}

// OpenJournal starts a new journal for this process in root's journal
// directory: a fresh id, its lock held until Close, and its first segment
// ready (zero-filled, or reused from the journal's free list). Dead
// journals are RecoverJournals' business: call it first.
func OpenJournal(ctx context.Context, root string, opts JournalOptions) (*Journal, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts.FS == nil {
		opts.FS = vfs.OS
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SegmentSize == 0 {
		opts.SegmentSize = 256 << 10
		if opts.FS == vfs.OS {
			opts.SegmentSize = 16 << 20
		}
	}
	opts.SegmentSize = min(max(opts.SegmentSize, 64<<10), 1<<30)
	j := &Journal{
		fs: opts.FS, root: root, id: NewID(), opts: opts, segSize: opts.SegmentSize, nextNum: 1,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	j.cond = sync.NewCond(&j.mu)
	// A group commit fits half a segment: a fresh segment always has room
	// for one. A rollout frame bigger than a quarter goes to its rollout
	// directly (writing it twice would cost more than its own fsync).
	j.batchMax = int(min(j.segSize/2, 8<<20))
	j.maxEntry = j.batchMax/2 - 256
	dir := filepath.Join(root, JournalDir)
	if err := j.fs.MkdirAll(dir); err != nil {
		return nil, errors.Wrapf(err, "create %s", dir)
	}
	lockPath := filepath.Join(dir, j.id+journalLockExt)
	lock, err := j.fs.Create(lockPath)
	if err != nil {
		return nil, errors.Wrapf(err, "create %s", lockPath)
	}
	if err := lock.Lock(); err != nil {
		_ = lock.Close()
		return nil, err
	}
	j.lock = lock
	seg, err := j.prepare()
	if err == nil {
		// The lock file's name and the segment's are durable before
		// anything is acknowledged through them.
		err = j.fs.SyncDir(dir)
	}
	if err != nil {
		_ = lock.Close()
		_ = j.fs.Remove(lockPath)
		return nil, err
	}
	j.seg = seg
	j.pending = []*jbatch{j.newBatch()}
	go j.maintain()
	return j, nil
}

// ID returns the journal's id (its files are journal/<id>.*).
func (j *Journal) ID() string { return j.id }

// Metrics returns the journal's counters.
func (j *Journal) Metrics() JournalMetrics {
	m := &j.metrics
	out := JournalMetrics{
		Commits: m.commits.Load(), Entries: m.entries.Load(), Bytes: m.bytes.Load(), SyncNanos: m.syncNanos.Load(),
		RolloutWriteNanos: m.rolloutWriteNanos.Load(),
		RolloutSyncs:      m.rolloutSyncs.Load(), SegmentsMade: m.segmentsMade.Load(), SegmentsReused: m.recycled.Load(),
		Failures: m.failures.Load(), SyncLatency: m.syncLatency.snapshot(), GroupSize: m.groupSize.snapshot(),
	}
	j.mu.Lock()
	out.SealedUnsynced = len(j.sealed)
	out.SegmentsInUse = len(j.sealed) + 1
	if j.spare != nil {
		out.SegmentsInUse++
	}
	for _, b := range j.pending {
		out.EntriesInFlight += len(b.ents)
	}
	for _, b := range j.staged {
		out.EntriesInFlight += len(b.ents)
	}
	j.mu.Unlock()
	return out
}

// errJournalFailed refuses a writer's frame while the writer has not yet
// cut back what a failed journal write abandoned.
var errJournalFailed = errors.New("rollout: the journal failed to make earlier frames durable; the thread's rollout is being cut back")

// submit copies a rollout frame (written at off, after the frame at prev)
// into the journal and returns the batch that will make it durable. The
// caller holds w.mu: entries of one writer enter the journal in rollout
// order.
func (j *Journal) submit(w *Writer, frame []byte, off, prev int64) (*jbatch, error) {
	now := j.opts.Now().UnixNano()
	n := entryEnvelopeSize(w.hdr.ThreadID, len(frame))
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case j.closed:
		return nil, errors.Wrap(ErrClosed, "journal closed")
	case w.jfailed:
		return nil, errJournalFailed
	}
	b := j.pending[len(j.pending)-1]
	if !b.empty() && len(b.buf)+n+FrameHeaderSize > j.batchMax {
		b = j.newBatch()
		j.pending = append(j.pending, b)
	}
	b.add(w, frame, off, prev, now, w.epoch) // w.mu is held
	return b, nil
}

// maxJournalFrame bounds one journal frame's payload (MaxFrameSize is the
// format's limit; smaller frames keep a reader's allocations small).
const maxJournalFrame = 4 << 20

// wait returns once b is durable (nil) or abandoned (its error). A waiter
// that finds no stager running becomes it: a lone appender writes and
// commits its own frame without a goroutine switch.
func (j *Journal) wait(b *jbatch) error {
	select {
	case <-b.done:
		return b.res.err
	default:
	}
	j.mu.Lock()
	b.waiters++
	run := !j.staging
	if run {
		j.staging = true
	}
	j.mu.Unlock()
	if run {
		j.pump(b)
	}
	<-b.done
	return b.res.err
}

// The journal has two roles, each held by one goroutine at a time: the
// stager takes pending batches and writes their frames into their
// rollouts (writeRollouts), the committer writes what is staged to the
// journal with one fdatasync (commit). While a commit's fdatasync runs the
// stager keeps taking what appenders copy in, so the next commit holds
// everyone who came back meanwhile, and rollout writes never wait for the
// disk's flush nor delay it.
//
// pump runs the roles (staging set by the caller) until there is nothing
// for it to do, or, for an appender (own set), until its own batch is
// done: then the role passes to another goroutine if work remains, so no
// appender is kept serving others.
func (j *Journal) pump(own *jbatch) {
	j.mu.Lock()
	for {
		if own != nil && own.isDone() {
			if len(j.staged) > 0 || !j.pending[0].empty() {
				go j.pump(nil) // staging stays set: it is the stager now
			} else {
				j.staging = false
				j.cond.Broadcast()
			}
			j.mu.Unlock()
			return
		}
		if !j.committing && len(j.staged) > 0 {
			batches := j.takeStaged()
			j.committing = true
			if !j.pending[0].empty() {
				go j.pump(nil) // stages meanwhile
			} else {
				j.staging = false
			}
			j.mu.Unlock()
			j.commit(batches)
			j.mu.Lock()
			j.committing = false
			j.cond.Broadcast()
			if j.staging || (len(j.staged) == 0 && j.pending[0].empty()) {
				j.mu.Unlock()
				return // another goroutine stages (and commits), or nothing is left
			}
			j.staging = true
			continue
		}
		b := j.pending[0]
		if b.empty() {
			// Nothing to stage. A commit in flight takes the role back when
			// it is done, if something is staged by then.
			j.staging = false
			j.cond.Broadcast()
			j.mu.Unlock()
			return
		}
		if len(j.pending) == 1 {
			j.pending[0] = j.newBatch()
		} else {
			j.pending = j.pending[1:]
		}
		epoch := j.jepoch
		j.mu.Unlock()
		b = j.writeRollouts(b, epoch)
		j.mu.Lock()
		switch {
		case j.jepoch != epoch:
			// A commit failed while this batch was being staged: it goes
			// with everything else that was not durable then.
			err := j.failErr
			j.mu.Unlock()
			j.abandonTaken([]*jbatch{b}, err)
			j.mu.Lock()
		case b.empty():
			close(b.done) // every frame of it failed to reach its rollout
		default:
			j.staged = append(j.staged, b)
		}
	}
}

func (b *jbatch) isDone() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// commit writes staged batches to the journal, makes them durable with one
// fdatasync (two if a segment fills on the way), and wakes their waiters;
// on failure it abandons them and everything not yet durable.
func (j *Journal) commit(batches []*jbatch) {
	t0 := time.Now()
	n, err := j.flush(batches)
	// The first n are durable (a segment that filled was synced before a
	// later step failed): they are acknowledged before the rest is
	// abandoned, so the writers' cuts keep them.
	for _, b := range batches[:n] {
		j.complete(b)
	}
	j.mu.Lock()
	j.inflight = nil
	j.mu.Unlock()
	if err != nil {
		j.abandon(batches[n:], err)
	}
	j.mu.Lock()
	j.lastCommit = time.Since(t0)
	j.mu.Unlock()
	for _, b := range batches {
		if cap(b.buf) <= 4<<20 {
			buf := b.buf[:0]
			j.bufs.Put(&buf)
		}
	}
}

// takeStaged takes the staged batches for a commit (mu held), leaving out
// frames their writers cut since they were staged: none may become durable
// in the journal after its writer gave it up, or a replay would find it
// where the writer put another. What it takes is in flight: a cut from now
// keeps it (inflight), so the check holds until the commit ends.
func (j *Journal) takeStaged() []*jbatch {
	batches := j.staged[:0:0]
	for _, b := range j.staged {
		stale := false
		for _, e := range b.ents {
			if !e.w.keptByCuts(e.end, e.epoch) {
				stale = true
				break
			}
		}
		if stale {
			nb := &jbatch{done: b.done, res: b.res, waiters: b.waiters}
			for _, e := range b.ents {
				if e.w.keptByCuts(e.end, e.epoch) {
					nb.add(e.w, b.buf[e.pos:e.pos+e.n], e.off, e.prev, e.now, e.epoch)
				}
			}
			if nb.empty() {
				close(b.done) // the waiters' writers say what became of them
				continue
			}
			b = nb
		}
		batches = append(batches, b)
	}
	j.staged = nil
	j.inflight = map[*Writer]jent{}
	for _, b := range batches {
		for _, e := range b.ents {
			if e.end > j.inflight[e.w].end {
				j.inflight[e.w] = e
			}
		}
	}
	return batches
}

// newBatch makes the next batch, on a buffer of an earlier one.
func (j *Journal) newBatch() *jbatch {
	b := newBatch()
	if p, ok := j.bufs.Get().(*[]byte); ok {
		b.buf = *p
	}
	return b
}

// writeRollouts writes the batch's frames into their rollouts, before
// the journal has them: a frame in the journal is always in its rollout
// too (in the page cache at least), and each rollout receives its frames
// in order, as one write per run of them. A writer whose write fails is
// dropped from that frame on, here and in the batches pending after: its
// frames from there are never journaled, and it cuts them back (so a
// failed append leaves nothing behind). It returns the batch to journal.
//
// A frame whose writer has cut back since it was copied in (its epoch
// moved: a failure abandoned it) is not written: the write and the
// writer's cut are ordered by the writer's lock, so a stale frame never
// lands over what the writer writes after its cut.
func (j *Journal) writeRollouts(b *jbatch, epoch uint64) *jbatch {
	defer func(t0 time.Time) { j.metrics.rolloutWriteNanos.Add(int64(time.Since(t0))) }(time.Now())
	var drop map[dropKey]int64
	var errs map[dropKey]error
	scratch := j.scratch[:0]
	for i := 0; i < len(b.ents); {
		w, key := b.ents[i].w, dropKey{b.ents[i].w, b.ents[i].epoch}
		k := i + 1
		for k < len(b.ents) && b.ents[k].w == w && b.ents[k].epoch == key.epoch && b.ents[k].off == b.ents[k-1].end {
			k++
		}
		if _, dropped := drop[key]; dropped {
			i = k
			continue
		}
		var buf []byte
		if k == i+1 {
			e := b.ents[i]
			buf = b.buf[e.pos : e.pos+e.n]
		} else {
			scratch = scratch[:0]
			for _, e := range b.ents[i:k] {
				scratch = append(scratch, b.buf[e.pos:e.pos+e.n]...)
			}
			buf = scratch
		}
		if err := w.writeJournaled(b.ents[i].epoch, b.ents[i].off, buf, b.ents[k-1].off, b.ents[k-1].last); err != nil {
			if drop == nil {
				drop, errs = map[dropKey]int64{}, map[dropKey]error{}
			}
			drop[key], errs[key] = b.ents[i].off, err
		}
		i = k
	}
	if cap(scratch) <= 4<<20 {
		j.scratch = scratch
	}
	if drop == nil {
		return b
	}
	// The writers are told (they cut back and refuse more until they have)
	// before any of this batch's waiters returns.
	_ = epoch
	j.mu.Lock()
	for key := range drop {
		if !errors.Is(errs[key], errStaleFrame) {
			key.w.jfailed = true
		}
	}
	// A pending batch left empty is done (its waiters' frames are cut, as
	// their writers' epochs say); new frames must never join a batch
	// already done, so the last one is replaced by a fresh one.
	var keep, emptied []*jbatch
	for _, pb := range j.pending {
		if nb := pb.without(drop); nb.empty() {
			emptied = append(emptied, pb)
		} else {
			keep = append(keep, nb)
		}
	}
	if len(keep) == 0 {
		keep = []*jbatch{j.newBatch()}
	}
	j.pending = keep
	rest := b.without(drop) // (under mu: waiters is)
	j.mu.Unlock()
	for key, from := range drop {
		if errors.Is(errs[key], errStaleFrame) {
			continue // the writer cut back already
		}
		for _, e := range b.ents {
			if e.w == key.w && e.epoch == key.epoch && e.off == from {
				key.w.rolloutWriteFailed(e.off, e.seq, e.prev, e.epoch, errs[key])
				break
			}
		}
	}
	for _, eb := range emptied {
		close(eb.done)
	}
	return rest
}

// flush writes batches to the current segment and syncs it: one write
// per batch, one fdatasync for all (plus one for a segment that fills on
// the way: it is synced before the next takes over). It returns how many
// of the batches, from the first, are durable: all of them, or on an
// error those a filled segment's sync covered. Only the committer touches
// j.seg's offsets.
func (j *Journal) flush(batches []*jbatch) (int, error) {
	if j.needCut {
		if err := j.cut(); err != nil {
			return 0, err
		}
	}
	type placed struct {
		seg *jsegment
		b   *jbatch
	}
	var done []placed
	pos := j.seg.written // where the next batch goes; seg.written stays the synced end
	// The segment's frame seqs move only with what is synced: a failed
	// write's frames are zeroed (cut) and their seqs given again.
	seqAt := j.seg.seq
	durable := 0
	fail := func(err error) (int, error) {
		j.seg.seq = seqAt
		return durable, err
	}
	group := 0 // frames placed since the last sync
	sync := func(seg *jsegment, end int64) error {
		t0 := time.Now()
		if err := seg.f.Sync(); err != nil {
			return withPath(err, "sync journal %s", seg.name)
		}
		j.metrics.syncNanos.Add(int64(time.Since(t0)))
		j.metrics.syncLatency.observeSince(t0)
		j.metrics.groupSize.observe(int64(group))
		group = 0
		j.metrics.commits.Add(1)
		j.mu.Lock()
		seg.written = end
		for _, p := range done {
			if p.seg != seg {
				continue
			}
			for _, e := range p.b.ents {
				if e.end > seg.ends[e.w] {
					seg.ends[e.w] = e.end
				}
			}
		}
		j.mu.Unlock()
		return nil
	}
	for _, b := range batches {
		if pos+int64(len(b.buf)) > j.segSize {
			if pos > j.seg.written {
				if err := sync(j.seg, pos); err != nil {
					return fail(err)
				}
			}
			durable = len(done)
			if err := j.rotate(); err != nil {
				return durable, err
			}
			pos, seqAt = j.seg.written, j.seg.seq
		}
		seg := j.seg
		for i, fr := range b.frames {
			end := len(b.buf)
			if i+1 < len(b.frames) {
				end = b.frames[i+1].start
			}
			payload := b.buf[fr.start+FrameHeaderSize : end]
			h := FrameHeader{Count: fr.count, Length: len(payload), RawLen: len(payload), FileID: seg.fileID, Seq: seg.seq, Durable: seg.written,
				DataCRC: crc32.Checksum(payload, castagnoli)}
			h.put(b.buf[fr.start:])
			seg.seq += uint64(fr.count)
		}
		j.dirtyEnd = max(j.dirtyEnd, pos+int64(len(b.buf)))
		if n, err := seg.f.WriteAt(b.buf, pos); err != nil || n != len(b.buf) {
			return fail(writeError(seg.name, err))
		}
		pos += int64(len(b.buf))
		done = append(done, placed{seg, b})
		j.metrics.entries.Add(int64(len(b.ents)))
		j.metrics.bytes.Add(int64(len(b.buf)))
		group += len(b.ents)
	}
	if err := sync(j.seg, pos); err != nil {
		return fail(err)
	}
	j.mu.Lock()
	half := j.seg.written >= j.segSize/2 && j.spare == nil && !j.preparing
	j.mu.Unlock()
	if half {
		j.poke()
	}
	return len(batches), nil
}

// complete makes a committed batch's frames count as durable for their
// writers, then wakes the batch's waiters.
func (j *Journal) complete(b *jbatch) {
	for i, e := range b.ents {
		if i+1 < len(b.ents) && b.ents[i+1].w == e.w {
			continue // the last of a run says it for all of it
		}
		e.w.journalDurable(e.epoch, e.end, e.last, e.off)
	}
	close(b.done)
}

// abandon fails batches whose commit failed, and everything staged or
// pending after them: none of it may become durable now, since writers cut
// their rollouts back to what was acknowledged. A batch being staged at
// this moment follows (the journal's epoch moved). Each writer concerned
// is told before any waiter returns.
func (j *Journal) abandon(batches []*jbatch, err error) {
	j.metrics.failures.Add(1)
	nd := &notDurable{"rollout: journal write failed; frames not acknowledged", err}
	j.mu.Lock()
	all := append(append(slices.Clone(batches), j.staged...), j.pending...)
	// Their writers copy nothing more in until they have cut back: a
	// frame copied in now would follow one of theirs that is gone.
	for _, ab := range all {
		for _, e := range ab.ents {
			e.w.jfailed = true
		}
	}
	j.staged = nil
	j.pending = []*jbatch{j.newBatch()}
	j.needCut = true
	j.jepoch++
	j.failErr = nd
	// Frames a failed write put in the segment must not be replayed: the
	// part of the segment past its synced end is zeroed before the next
	// write (cut), and so is the rest of this commit's segment.
	j.mu.Unlock()
	j.abandonTaken(all, nd)
}

// abandonTaken fails batches no longer in the journal's queues.
func (j *Journal) abandonTaken(batches []*jbatch, nd error) {
	// Every writer concerned is told, even one already failed by a
	// rollout write (its cut for that is then moot: the epoch moved).
	j.mu.Lock()
	var ws []*Writer
	for _, ab := range batches {
		for _, e := range ab.ents {
			e.w.jfailed = true
			if !slices.Contains(ws, e.w) {
				ws = append(ws, e.w)
			}
		}
	}
	j.mu.Unlock()
	for _, w := range ws {
		w.journalFailed(nd)
	}
	for _, ab := range batches {
		ab.res.err = nd
		close(ab.done)
	}
}

// clearFailed lets a writer copy frames in again, once it has cut back
// (called with w.mu held).
func (j *Journal) clearFailed(w *Writer) {
	j.mu.Lock()
	w.jfailed = false
	j.mu.Unlock()
}

// cut overwrites what a failed write may have left past the durable end of
// the current segment with zeros and syncs it, so that none of it can be
// found by a replay (leader only).
func (j *Journal) cut() error {
	seg := j.seg
	if j.dirtyEnd > seg.written {
		zeros := make([]byte, min(j.dirtyEnd-seg.written, zeroChunk))
		for off := seg.written; off < j.dirtyEnd; {
			n := int(min(int64(len(zeros)), j.dirtyEnd-off))
			if _, err := seg.f.WriteAt(zeros[:n], off); err != nil {
				return writeError(seg.name, err)
			}
			off += int64(n)
		}
	}
	if err := seg.f.Sync(); err != nil {
		return withPath(err, "sync journal %s", seg.name)
	}
	j.needCut, j.dirtyEnd = false, seg.written
	return nil
}

// rotate seals the current segment and makes the spare current (waiting
// for one being prepared, or preparing one now). Leader only.
func (j *Journal) rotate() error {
	j.mu.Lock()
	for j.preparing {
		j.cond.Wait()
	}
	next := j.spare
	j.spare = nil
	if next == nil {
		j.preparing = true
		j.mu.Unlock()
		var err error
		next, err = j.prepare()
		j.mu.Lock()
		j.preparing = false
		j.cond.Broadcast()
		if err != nil {
			j.mu.Unlock()
			return err
		}
	}
	j.sealed = append(j.sealed, j.seg)
	j.seg = next
	j.dirtyEnd = next.written
	j.mu.Unlock()
	j.poke()
	return nil
}

// prepare makes the next segment: a released one reused (a new header and
// file id; its old frames stay, read as a torn tail), or a new one
// zero-filled to its full size, so that writes into it never change the
// file's size or allocation and its fdatasync writes data only. The file
// is synced and its name made durable before it is used.
func (j *Journal) prepare() (*jsegment, error) {
	j.mu.Lock()
	num := j.nextNum
	j.nextNum++
	var reuse string
	if len(j.free) > 0 {
		reuse, j.free = j.free[0], j.free[1:]
	}
	j.mu.Unlock()
	dir := filepath.Join(j.root, JournalDir)
	name := filepath.Join(dir, segmentName(j.id, num))
	hdr := newFileHeader(segmentStem(j.id, num), j.opts.Now())
	hdr.Flags = FileFlagJournal
	var f vfs.File
	var err error
	if reuse != "" {
		if err = j.fs.Rename(reuse, name); err == nil {
			f, err = j.fs.OpenRW(name)
		}
		if err == nil {
			if _, err = f.WriteAt(hdr.marshal(), 0); err == nil {
				err = f.Sync()
			}
		}
		if err == nil {
			j.metrics.recycled.Add(1)
		}
	} else {
		tmp := name + journalTmpExt
		f, err = j.fs.Create(tmp)
		if err == nil {
			err = zeroFill(f, j.segSize)
			if err == nil {
				_, err = f.WriteAt(hdr.marshal(), 0)
			}
			if err == nil {
				err = f.Sync()
			}
			if err == nil {
				err = j.fs.Rename(tmp, name)
			}
			if err != nil {
				_ = j.fs.Remove(tmp)
			}
		}
		if err == nil {
			j.metrics.segmentsMade.Add(1)
		}
	}
	if err == nil {
		err = j.fs.SyncDir(dir)
	}
	if err != nil {
		if f != nil {
			_ = f.Close()
		}
		return nil, errors.WithHint(errors.Wrapf(err, "prepare journal segment %s", name),
			"the journal needs a new segment (the disk may be full): nothing more is acknowledged until it has one")
	}
	return &jsegment{num: num, name: name, f: f, fileID: hdr.FileID, written: FileHeaderSize, seq: 1, ends: map[*Writer]int64{}}, nil
}

// zeroChunk is the size of each write of zeros: one page. Larger writes
// let the kernel cache the segment in large folios (ext4 does, in recent
// kernels), and then every small journal write dirties, and its fdatasync
// writes, a whole folio: 1 MiB writes of zeros made each 1 KiB append
// write 1 MiB.
const zeroChunk = 4096

func zeroFill(f vfs.File, size int64) error {
	zeros := make([]byte, min(size, zeroChunk))
	for off := int64(0); off < size; {
		n := int(min(int64(len(zeros)), size-off))
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		off += int64(n)
	}
	return nil
}

func (j *Journal) poke() {
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// maintain is the journal's background goroutine: it releases sealed
// segments once their rollouts are synced, and prepares the next segment
// while the current one still has room.
func (j *Journal) maintain() {
	defer close(j.done)
	for {
		select {
		case <-j.stop:
			return
		case <-j.wake:
		}
		if err := j.release(); err != nil && j.opts.OnError != nil {
			j.opts.OnError(err)
		}
		j.mu.Lock()
		want := j.spare == nil && !j.preparing && !j.closed && j.seg.written >= j.segSize/2
		if want {
			j.preparing = true
		}
		j.mu.Unlock()
		if want {
			seg, err := j.prepare()
			j.mu.Lock()
			j.preparing = false
			if err == nil {
				j.spare = seg
			}
			j.cond.Broadcast()
			j.mu.Unlock()
			if err != nil && j.opts.OnError != nil {
				j.opts.OnError(err)
			}
		}
	}
}

// release syncs the rollouts of the oldest sealed segments and releases
// each whose frames are all in synced rollouts, in order. A writer that
// cannot be synced stops it there (the segments are kept). One release
// runs at a time.
func (j *Journal) release() error {
	j.releaseMu.Lock()
	defer j.releaseMu.Unlock()
	for {
		j.mu.Lock()
		if len(j.sealed) == 0 {
			j.mu.Unlock()
			return nil
		}
		seg := j.sealed[0]
		ends := make([]jent, 0, len(seg.ends))
		for w, end := range seg.ends {
			ends = append(ends, jent{w: w, end: end})
		}
		j.mu.Unlock()
		for _, e := range ends {
			if err := e.w.syncFileTo(e.end); err != nil {
				return errors.Wrapf(err, "journal segment %s kept", seg.name)
			}
		}
		j.mu.Lock()
		j.sealed = j.sealed[1:]
		keep := len(j.free) < 2 && !j.closed
		if keep {
			j.free = append(j.free, seg.name)
		}
		j.mu.Unlock()
		err := seg.f.Close()
		if !keep {
			err = errors.CombineErrors(err, j.fs.Remove(seg.name))
		}
		if err != nil {
			return errors.Wrapf(err, "release journal segment %s", seg.name)
		}
	}
}

// pinned lists the closed writers of a thread whose frames the journal
// still holds and their rollout may lack (a failed rollout sync).
func (j *Journal) pinned(thread string) []*Writer {
	j.mu.Lock()
	var cands []*Writer
	for _, seg := range append(slices.Clone(j.sealed), j.seg) {
		for w := range seg.ends {
			if w.hdr.ThreadID == thread && !slices.Contains(cands, w) {
				cands = append(cands, w)
			}
		}
	}
	j.mu.Unlock()
	// Asked outside j.mu: a writer's lock is never taken under it.
	var out []*Writer
	for _, w := range cands {
		if w.needsRestore() {
			out = append(out, w)
		}
	}
	return out
}

// restore writes back into a thread's rollout (open as f, locked by the
// caller) the frames of it this journal holds, if a closed writer of it
// left some only here (its rollout's fsync failed): before the thread is
// read again in this process.
func (j *Journal) restore(ctx context.Context, thread, path string, f vfs.File) error {
	ws := j.pinned(thread)
	if len(ws) == 0 {
		return nil
	}
	if err := j.writeBack(ctx, thread, path, f); err != nil {
		return err
	}
	for _, w := range ws {
		w.markRestored()
	}
	j.poke()
	return nil
}

// writeBack writes every frame of a thread that the journal holds (its
// durable part) into the rollout open as f, where the rollout lacks it or
// holds it damaged; the caller syncs f.
func (j *Journal) writeBack(ctx context.Context, thread, path string, f vfs.File) error {
	j.mu.Lock()
	var segs []segRange
	for _, seg := range append(slices.Clone(j.sealed), j.seg) {
		segs = append(segs, segRange{path: seg.name, stem: segmentStem(j.id, seg.num), size: seg.written})
	}
	j.mu.Unlock()
	rp := newReplayer(j.fs, j.root, nil)
	rp.only, rp.onlyPath, rp.onlyFile = thread, path, f
	for _, s := range segs {
		if err := rp.segment(ctx, j.id, s); err != nil {
			return err
		}
	}
	if err := rp.finish(); err != nil {
		return err
	}
	if len(rp.rep.Problems) > 0 {
		p := rp.rep.Problems[0]
		return errors.Newf("rollout %s: frames acknowledged through the journal could not be written back: %s", path, p.Reason)
	}
	return nil
}

// Close makes every rollout the journal holds frames of durable on its
// own and removes the journal's files. Writers are closed first (their
// Close syncs their rollout); entries still pending are made durable
// first. If some rollout could not be synced, the journal's files are kept
// for RecoverJournals and the error says so.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true // submit refuses from now on
	for j.staging || j.committing || j.preparing || !j.pending[0].empty() || len(j.staged) > 0 {
		if !j.staging && (!j.pending[0].empty() || (len(j.staged) > 0 && !j.committing)) {
			j.staging = true
			j.mu.Unlock()
			j.pump(nil)
			j.mu.Lock()
			continue
		}
		j.cond.Wait()
	}
	j.sealed = append(j.sealed, j.seg)
	spare := j.spare
	j.spare = nil
	j.mu.Unlock()
	close(j.stop)
	<-j.done
	err := j.release()
	if spare != nil {
		_ = spare.f.Close()
	}
	j.mu.Lock()
	j.free = nil
	kept := len(j.sealed) > 0
	for _, seg := range j.sealed {
		_ = seg.f.Close()
	}
	j.mu.Unlock()
	if !kept {
		err = errors.CombineErrors(err, removeJournalFiles(j.fs, j.root, j.id))
	}
	err = errors.CombineErrors(err, j.lock.Close())
	if kept {
		return errors.WithHint(errors.Newf("rollout: journal %s kept: some rollout it holds frames of could not be synced", j.id),
			"the next open of the workspace writes them back (RecoverJournals)")
	}
	return err
}

// removeJournalFiles removes every file of journal jid (segments, ones
// being prepared, then its lock file) and syncs the directory.
func removeJournalFiles(fsys vfs.FS, root, jid string) error {
	dir := filepath.Join(root, JournalDir)
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return errors.Wrapf(err, "list %s", dir)
	}
	var lock string
	for _, n := range names {
		id, _, kind, ok := parseJournalName(n)
		if !ok || id != jid {
			continue
		}
		if kind == journalLockExt {
			lock = n
			continue
		}
		if err := fsys.Remove(filepath.Join(dir, n)); err != nil && !vfs.IsNotExist(err) {
			return errors.Wrapf(err, "remove %s", n)
		}
	}
	if lock != "" {
		if err := fsys.Remove(filepath.Join(dir, lock)); err != nil && !vfs.IsNotExist(err) {
			return errors.Wrapf(err, "remove %s", lock)
		}
	}
	return errors.Wrapf(fsys.SyncDir(dir), "sync %s", dir)
}

func (j *Journal) String() string {
	return "journal " + j.id + " (" + strconv.FormatInt(j.segSize, 10) + " B segments)"
}
