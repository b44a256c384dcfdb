package journal

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// A Journal is the workspace journal of one writing process: a Log
// (see rollout.Log) in segment files under the data directory's journal
// directory, group-committed.
//
// Why: a rollout that grows by every append pays, at each fdatasync, for
// its data, its inode (the new size) and the flush; and 64 threads
// appending at once pay 64 of those, since an fsync covers one file. The
// journal's segments are zero-filled (or recycled) before they are used,
// so its fdatasync writes data only, and one fdatasync covers the entries
// of every thread submitted meanwhile.
//
// Entries wait in a batch until a committer takes every pending batch,
// writes them to the current segment and syncs it; appenders submit into
// the next batch meanwhile, so the next commit holds everyone who came
// back during this one. The first waiter that finds no committer becomes
// it: a lone appender commits its own entry without a goroutine switch.
// A segment that fills is sealed and signals Pressure; it is released
// (kept for reuse) once every stream it holds entries of is released past
// them. After a crash, Recover writes back into the rollouts what
// the journal holds and they lack, before anything reads them.
//
// Failure rule: when a journal write or fdatasync fails, every entry not
// yet durable is abandoned (its ticket fails with ErrNotDurable), its
// stream is refused until Reset, and the segment's unsynced region is
// overwritten with zeros and synced before the journal writes again: a
// failed fsync may have lost pages that could come back, and replay must
// never find an entry that was not acknowledged.
type Journal struct {
	fs       vfs.FS
	root     string // the data directory
	id       string
	lock     vfs.File
	opts     Options
	segSize  int64
	batchMax int // bytes of one batch
	maxEntry int // rollout frames larger than this are not taken

	releaseMu sync.Mutex // one release at a time

	mu         sync.Mutex
	cond       *sync.Cond // on mu: a preparation or a commit finished
	seg        *jsegment  // being written (the committer's)
	spare      *jsegment  // prepared, next
	preparing  bool
	sealed     []*jsegment // full, waiting for their streams' release
	free       []string    // released segment files, kept for reuse
	nextNum    uint64
	pending    []*jbatch // FIFO; the last one takes new entries
	committing bool      // a goroutine holds the committer's role
	streams    map[rollout.Stream]*jstream
	bufs       sync.Pool // batch buffers
	needCut    bool      // the current segment's unsynced region must be zeroed first
	dirtyEnd   int64     // end of what a failed write may have left in seg
	closed     bool

	pressure chan struct{} // to the writers' owner: sync and release
	wake     chan struct{} // the maintainer: release, prepare
	stop     chan struct{}
	done     chan struct{}

	metrics journalCounters
}

// jstream is what the journal knows of one stream (mu).
type jstream struct {
	failed   bool            // entries abandoned: Submit refuses until Reset
	durable  rollout.LogMark // the last entry made durable
	released int64           // the rollout is synced through here
	segs     int             // segments (sealed or current) holding its entries
}

// Options configure a Journal. The zero value is ready to use.
type Options struct {
	// FS is the file system. Default: vfs.OS.
	FS vfs.FS
	// SegmentSize is the size of a journal segment, zero-filled once when
	// made and reused afterwards. Default: 16 MiB on vfs.OS, 256 KiB on any
	// other vfs.FS (vfs.MemFS in tests). Minimum 64 KiB.
	SegmentSize int64
	// Now stamps journal frames. Default: time.Now.
	Now func() time.Time
	// OnError hears what background work could not do (a segment prepared
	// or released) that no call returns. Default: none.
	OnError func(error)
}

// jsegment is one segment file in use.
type jsegment struct {
	num     uint64
	name    string
	f       vfs.File
	fileID  uint64
	written int64 // end of the frames written and synced
	seq     uint64
	// ends is, for each stream, the end of its last entry made durable in
	// this segment: what its rollout must be released past before the
	// segment is.
	ends map[rollout.Stream]int64
}

// jbatch is a group of entries submitted until a committer takes it,
// written with one write; it is the ticket of each of its entries.
type jbatch struct {
	j      *Journal
	buf    []byte   // journal frames: each a 48-byte header (filled at flush) and entries
	frames []jframe // where each frame starts in buf
	ents   []jent
	err    error // the commit's outcome, set before done is closed
	done   chan struct{}
}

type jframe struct{ start, count int }

type jent struct {
	s         rollout.Stream
	off, end  int64  // where the rollout frame is, and its end
	seq, last uint64 // its first and last records' seqs
}

// add appends an entry to b.
func (b *jbatch) add(e rollout.LogEntry, now int64) {
	frame := e.Frame
	n := entryEnvelopeSize(e.Stream.Thread, len(frame))
	if k := len(b.frames); k == 0 || len(b.buf)-b.frames[k-1].start+n > maxJournalFrame || b.frames[k-1].count == rollout.MaxRecordsPerFrame {
		b.frames = append(b.frames, jframe{start: len(b.buf)})
		b.buf = append(b.buf, make([]byte, rollout.FrameHeaderSize)...)
	}
	b.buf = appendEntry(b.buf, now, e.Stream.Thread, e.Stream.FileID, e.Offset, e.Prev, frame)
	b.frames[len(b.frames)-1].count++
	seq := binary.LittleEndian.Uint64(frame[28:])
	last := seq + uint64(binary.LittleEndian.Uint16(frame[10:])) - 1
	b.ents = append(b.ents, jent{s: e.Stream, off: e.Offset, end: e.Offset + int64(len(frame)), seq: seq, last: last})
}

func (b *jbatch) empty() bool { return len(b.ents) == 0 }

func (b *jbatch) isDone() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// Wait returns once the batch is durable (nil) or abandoned (its error).
// A waiter that finds no committer becomes it.
func (b *jbatch) Wait() error {
	if b.isDone() {
		return b.err
	}
	j := b.j
	j.mu.Lock()
	run := !j.committing
	if run {
		j.committing = true
	}
	j.mu.Unlock()
	if run {
		j.pump(b)
	}
	<-b.done
	return b.err
}

// journalCounters are what Metrics reports.
type journalCounters struct {
	commits, entries, bytes atomic.Int64
	syncNanos               atomic.Int64
	segmentsMade, recycled  atomic.Int64
	failures                atomic.Int64
	syncLatency             rollout.Recorder // µs
	groupSize               rollout.Recorder // entries made durable by one fdatasync
}

// Metrics is a snapshot of a journal's counters.
type Metrics struct {
	Commits         int64 // group commits: journal writes, each with one fdatasync
	Entries         int64 // rollout frames made durable through the journal
	Bytes           int64 // bytes written to segments
	SyncNanos       int64 // time spent in the journal's fdatasyncs
	SegmentsMade    int64 // segments zero-filled
	SegmentsReused  int64 // segments recycled
	Failures        int64 // failed journal writes or syncs
	SegmentsInUse   int   // current, sealed and spare segments
	SealedUnsynced  int   // full segments waiting for their rollouts' sync
	EntriesInFlight int   // entries submitted, not yet durable
	// SyncLatency is the journal's fdatasyncs' latency in µs; GroupSize
	// the frames each of them made durable (group commit).
	SyncLatency, GroupSize rollout.Histogram
}

// Open starts a new journal for this process in root's journal
// directory: a fresh id, its lock held until Close, and its first segment
// ready (zero-filled, or reused from the journal's free list). Dead
// journals are Recover's business: call it first.
func Open(ctx context.Context, root string, opts Options) (*Journal, error) {
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
		fs: opts.FS, root: root, id: rollout.NewID(), opts: opts, segSize: opts.SegmentSize, nextNum: 1,
		streams:  map[rollout.Stream]*jstream{},
		pressure: make(chan struct{}, 1), wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	j.cond = sync.NewCond(&j.mu)
	// A batch fits half a segment: a fresh segment always has room for
	// one. A rollout frame bigger than a quarter is not taken (MaxEntry):
	// writing it twice would cost more than its rollout's own fsync.
	j.batchMax = int(min(j.segSize/2, 8<<20))
	j.maxEntry = j.batchMax/2 - 256
	dir := filepath.Join(root, Dir)
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
func (j *Journal) Metrics() Metrics {
	m := &j.metrics
	out := Metrics{
		Commits: m.commits.Load(), Entries: m.entries.Load(), Bytes: m.bytes.Load(), SyncNanos: m.syncNanos.Load(),
		SegmentsMade: m.segmentsMade.Load(), SegmentsReused: m.recycled.Load(),
		Failures: m.failures.Load(), SyncLatency: m.syncLatency.Snapshot(), GroupSize: m.groupSize.Snapshot(),
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
	j.mu.Unlock()
	return out
}

// MaxEntry returns the largest rollout frame the journal takes.
func (j *Journal) MaxEntry() int { return j.maxEntry }

// Pressure is signalled when a segment is sealed: the writers' owner
// syncs their rollouts and releases them (LogGroup does).
func (j *Journal) Pressure() <-chan struct{} { return j.pressure }

// errStreamFailed refuses a stream's entry after the journal abandoned
// earlier ones, until its writer has cut them back (Reset).
var errStreamFailed = errors.New("journal: the journal failed to make earlier frames of this rollout durable; it is being cut back")

// Submit copies an entry into the pending batch and returns the batch as
// its ticket. The caller submits a stream's entries in rollout order.
func (j *Journal) Submit(e rollout.LogEntry) (rollout.LogTicket, error) {
	if len(e.Frame) > j.maxEntry || len(e.Frame) < rollout.FrameHeaderSize {
		return nil, errors.Newf("journal: entry of %d bytes (at most %d)", len(e.Frame), j.maxEntry)
	}
	now := j.opts.Now().UnixNano()
	n := entryEnvelopeSize(e.Stream.Thread, len(e.Frame))
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil, errors.Wrap(rollout.ErrClosed, "journal closed")
	}
	if st := j.streams[e.Stream]; st != nil && st.failed {
		return nil, rollout.NotDurable("rollout: frame not journaled", errStreamFailed)
	}
	b := j.pending[len(j.pending)-1]
	if !b.empty() && len(b.buf)+n+rollout.FrameHeaderSize > j.batchMax {
		b = j.newBatch()
		j.pending = append(j.pending, b)
	}
	b.add(e, now)
	return b, nil
}

// Reset lets a stream submit again after its entries were abandoned, and
// returns its last durable entry.
func (j *Journal) Reset(s rollout.Stream) rollout.LogMark {
	j.mu.Lock()
	defer j.mu.Unlock()
	st := j.streams[s]
	if st == nil {
		return rollout.LogMark{}
	}
	st.failed = false
	m := st.durable
	if st.segs <= 0 {
		delete(j.streams, s) // nothing of it is held: forget it
	}
	return m
}

// Release records that the stream's rollout is synced through end, and
// wakes the maintainer to release segments no stream needs.
func (j *Journal) Release(s rollout.Stream, end int64) {
	j.mu.Lock()
	st := j.streams[s]
	if st != nil && end > st.released {
		st.released = end
	}
	j.mu.Unlock()
	if st != nil {
		j.poke()
	}
}

// maxJournalFrame bounds one journal frame's payload (MaxFrameSize is the
// format's limit; smaller frames keep a reader's allocations small).
const maxJournalFrame = 4 << 20

// pump runs the committer's role (committing set by the caller): it takes
// every pending batch and commits it, until nothing is pending or, for an
// appender (own set), until its own batch is done. Then the role passes
// to a goroutine if work remains, so no appender is kept serving others.
func (j *Journal) pump(own *jbatch) {
	j.mu.Lock()
	for {
		if own != nil && own.isDone() {
			if !j.pending[0].empty() {
				go j.pump(nil) // committing stays set: it is the committer now
			} else {
				j.committing = false
				j.cond.Broadcast()
			}
			j.mu.Unlock()
			return
		}
		if j.pending[0].empty() {
			j.committing = false
			j.cond.Broadcast()
			j.mu.Unlock()
			return
		}
		batches := j.pending
		j.pending = []*jbatch{j.newBatch()}
		j.mu.Unlock()
		j.commit(batches)
		j.mu.Lock()
		j.cond.Broadcast()
	}
}

// commit writes batches to the journal, makes them durable with one
// fdatasync (two if a segment fills on the way), and wakes their waiters;
// on failure it abandons them and everything pending.
func (j *Journal) commit(batches []*jbatch) {
	n, err := j.flush(batches)
	// The first n are durable (a segment that filled was synced before a
	// later step failed): they count before the rest is abandoned, so the
	// writers' cuts keep them.
	for _, b := range batches[:n] {
		j.complete(b)
	}
	if err != nil {
		j.abandon(batches[n:], err)
	}
	for _, b := range batches {
		if cap(b.buf) <= 4<<20 {
			buf := b.buf[:0]
			j.bufs.Put(&buf)
		}
	}
}

// newBatch makes the next batch, on a buffer of an earlier one.
func (j *Journal) newBatch() *jbatch {
	b := &jbatch{j: j, done: make(chan struct{})}
	if p, ok := j.bufs.Get().(*[]byte); ok {
		b.buf = *p
	}
	return b
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
		j.metrics.syncLatency.ObserveSince(t0)
		j.metrics.groupSize.Observe(int64(group))
		group = 0
		j.metrics.commits.Add(1)
		j.mu.Lock()
		seg.written = end
		for _, p := range done {
			if p.seg != seg {
				continue
			}
			for _, e := range p.b.ents {
				if end, ok := seg.ends[e.s]; !ok {
					seg.ends[e.s] = e.end
					j.stream(e.s).segs++
				} else if e.end > end {
					seg.ends[e.s] = e.end
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
			payload := b.buf[fr.start+rollout.FrameHeaderSize : end]
			h := rollout.FrameHeader{Count: fr.count, Length: len(payload), RawLen: len(payload), FileID: seg.fileID, Seq: seg.seq, Durable: seg.written,
				DataCRC: crc32.Checksum(payload, castagnoli)}
			h.Put(b.buf[fr.start:])
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

// stream returns what the journal knows of s, made on first use (mu).
func (j *Journal) stream(s rollout.Stream) *jstream {
	st := j.streams[s]
	if st == nil {
		st = &jstream{}
		j.streams[s] = st
	}
	return st
}

// complete records a committed batch's entries as their streams' durable
// marks, then wakes the batch's waiters: a failure after this cuts back
// no further than these.
func (j *Journal) complete(b *jbatch) {
	j.mu.Lock()
	for _, e := range b.ents {
		if st := j.stream(e.s); e.end > st.durable.End {
			st.durable = rollout.LogMark{End: e.end, Frame: e.off, Seq: e.last}
		}
	}
	j.mu.Unlock()
	close(b.done)
}

// abandon fails batches whose commit failed, and every batch pending
// after them: none of it may become durable now, since writers cut their
// rollouts back to what was durable. Their streams are refused until
// Reset, and the segment's unsynced region is zeroed before the next
// write (cut).
func (j *Journal) abandon(batches []*jbatch, err error) {
	j.metrics.failures.Add(1)
	nd := rollout.NotDurable("journal: write failed; frames not acknowledged", err)
	j.mu.Lock()
	all := append(slices.Clone(batches), j.pending...)
	for _, ab := range all {
		for _, e := range ab.ents {
			j.stream(e.s).failed = true
		}
	}
	j.pending = []*jbatch{j.newBatch()}
	j.needCut = true
	j.mu.Unlock()
	// Zeroed before any append hears of its failure: a process killed
	// after its writer cut back (the page cache surviving), or a failed
	// fsync that did write some pages, must leave no abandoned entry for
	// a replay to bring back. If the cut fails too, the next commit
	// tries it first.
	_ = j.cut()
	for _, ab := range all {
		ab.err = nd
		close(ab.done)
	}
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
	select {
	case j.pressure <- struct{}{}:
	default:
	}
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
	dir := filepath.Join(j.root, Dir)
	name := filepath.Join(dir, segmentName(j.id, num))
	hdr := rollout.NewFileHeader(segmentStem(j.id, num), j.opts.Now())
	hdr.Flags = rollout.FileFlagJournal
	var f vfs.File
	var err error
	if reuse != "" {
		if err = j.fs.Rename(reuse, name); err == nil {
			f, err = j.fs.OpenRW(name)
		}
		if err == nil {
			if _, err = f.WriteAt(hdr.Marshal(), 0); err == nil {
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
				_, err = f.WriteAt(hdr.Marshal(), 0)
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
	return &jsegment{num: num, name: name, f: f, fileID: hdr.FileID, written: rollout.FileHeaderSize, seq: 1, ends: map[rollout.Stream]int64{}}, nil
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

// release releases every sealed segment whose streams are all released
// past their entries there, in any order: a stream held for good (a
// thread closed unsynced, never reopened) keeps its segments only. One
// release runs at a time.
func (j *Journal) release() error {
	j.releaseMu.Lock()
	defer j.releaseMu.Unlock()
	for {
		j.mu.Lock()
		i := slices.IndexFunc(j.sealed, j.releasable)
		if i < 0 {
			j.mu.Unlock()
			return nil
		}
		seg := j.sealed[i]
		j.sealed = slices.Delete(j.sealed, i, i+1)
		j.drop(seg)
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

// releasable reports whether every stream of seg is released past its
// entries there (mu).
func (j *Journal) releasable(seg *jsegment) bool {
	for s, end := range seg.ends {
		if st := j.streams[s]; st == nil || st.released < end {
			return false
		}
	}
	return true
}

// drop forgets seg's streams, and a stream no segment holds entries of
// (unless it waits for its Reset), once seg is released (mu).
func (j *Journal) drop(seg *jsegment) {
	for s := range seg.ends {
		if st := j.streams[s]; st != nil {
			if st.segs--; st.segs <= 0 && !st.failed {
				delete(j.streams, s)
			}
		}
	}
}

// WriteBack writes every frame of a thread that the journal holds (its
// durable part) into the rollout open as f, where the rollout lacks it or
// holds it damaged; the caller syncs f.
func (j *Journal) WriteBack(ctx context.Context, thread, path string, f vfs.File) error {
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

// Close commits what is pending and removes the journal's files if every
// stream is released past its entries. Writers are closed first (a
// Writer's Close syncs its rollout and releases it). If some stream is
// not released (its rollout could not be synced), the journal's files are
// kept for Recover and the error says so.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true // Submit refuses from now on
	for j.committing || j.preparing || !j.pending[0].empty() {
		if !j.committing && !j.pending[0].empty() {
			j.committing = true
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
	var held string
	if kept {
		for s, end := range j.sealed[0].ends { // (the first one still held)
			if st := j.streams[s]; st == nil || st.released < end {
				held = fmt.Sprintf("thread %s (file %x) has entries through %d", s.Thread, s.FileID, end)
				if st != nil {
					held += fmt.Sprintf(", its rollout synced through %d", st.released)
				}
				break
			}
		}
	}
	for _, seg := range j.sealed {
		_ = seg.f.Close()
	}
	j.mu.Unlock()
	if !kept {
		err = errors.CombineErrors(err, removeJournalFiles(j.fs, j.root, j.id))
	}
	err = errors.CombineErrors(err, j.lock.Close())
	if kept {
		return errors.WithHint(errors.Newf("journal: %s kept: some rollout it holds frames of could not be synced: %s", j.id, held),
			"the next open of the workspace writes them back (Recover)")
	}
	return err
}

// removeJournalFiles removes every file of journal jid (segments, ones
// being prepared, then its lock file) and syncs the directory.
func removeJournalFiles(fsys vfs.FS, root, jid string) error {
	dir := filepath.Join(root, Dir)
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
