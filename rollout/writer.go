package rollout

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// SyncPolicy says when an append is durable enough to return.
type SyncPolicy struct {
	mode     syncMode
	interval time.Duration
}

type syncMode uint8

const (
	syncAlways syncMode = iota
	syncInterval
	syncNever
)

var (
	// SyncAlways returns from Append once the frame is on disk (fdatasync).
	// Concurrent appends share one fdatasync: group commit. The default.
	SyncAlways = SyncPolicy{mode: syncAlways}
	// SyncNever returns once the frame is written to the OS; Close syncs.
	// For tests and hosts that accept losing the last writes on a crash.
	SyncNever = SyncPolicy{mode: syncNever}
)

// SyncInterval returns once the frame is written to the OS and syncs in the
// background every d: a crash loses at most about d of acknowledged appends.
func SyncInterval(d time.Duration) SyncPolicy {
	if d <= 0 {
		return SyncAlways
	}
	return SyncPolicy{mode: syncInterval, interval: d}
}

func (p SyncPolicy) String() string {
	switch p.mode {
	case syncInterval:
		return "interval(" + p.interval.String() + ")"
	case syncNever:
		return "never"
	}
	return "always"
}

// Options configure a Writer. The zero value is ready to use.
type Options struct {
	// FS is the file system. Default: vfs.OS.
	FS vfs.FS
	// Sync is the durability policy. Default: SyncAlways.
	Sync SyncPolicy
	// CompressAbove compresses (zstd) frame payloads of at least this many
	// bytes when that saves at least an eighth. Default: 4096. Negative:
	// never compress.
	CompressAbove int
	// Now stamps records whose Time is zero. Default: time.Now.
	Now func() time.Time
	// Metrics, if set, counts what this writer writes and syncs (share one
	// among a process's writers).
	Metrics *Metrics
	// From, for Open only, names a frame the caller knows the file held
	// (the last one an index applied). If the file still holds it, Open
	// reads from the durable point that frame recorded instead of from the
	// start: a long rollout opens in the time of its tail. Everything
	// before that point was synced before the frame was written, so no
	// torn write can hide there; damage there is not reported (verify and
	// a full read do). Otherwise Open reads the whole file.
	From Anchor
	// Log, with SyncAlways, makes appends durable through a shared log
	// (see Log; the workspace journal is one) instead of an fdatasync of
	// the rollout: the frame is written to the rollout and submitted to
	// the log, and acknowledged once the log has it durable. Frames larger
	// than the log's MaxEntry are synced in the rollout as without one.
	// Default: nil (every append syncs its rollout). Ignored under
	// SyncInterval and SyncNever.
	Log *LogGroup
}

// Anchor names a frame: its offset, first seq and payload CRC
// (AppendResult's Offset, FirstSeq and DataCRC).
type Anchor struct {
	Offset  int64
	Seq     uint64
	DataCRC uint32
}

func (o Options) withDefaults() Options {
	if o.FS == nil {
		o.FS = vfs.OS
	}
	if o.CompressAbove == 0 {
		o.CompressAbove = 4096
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// AppendOptions qualify one append.
type AppendOptions struct {
	// IfLastSeq, when not zero, is the seq the caller expects the rollout to
	// end with. If it ends elsewhere the append fails with ErrConflict and
	// nothing is written (optimistic concurrency).
	IfLastSeq uint64
}

// AppendResult says where an acknowledged frame landed.
type AppendResult struct {
	FirstSeq, LastSeq uint64
	Offset            int64 // the frame's offset
	End               int64 // just past the frame
	// DataCRC is the frame's payload CRC: with Offset and FirstSeq it
	// identifies the frame (see ReadFrameHeader), so a reader can tell
	// later whether the file still holds it.
	DataCRC uint32
}

// OpenReport says what Open found and did.
type OpenReport struct {
	// TornTail is the torn tail cut from the end of the file, nil if none.
	TornTail *CorruptionError
	// TornSavedTo is the file holding the cut bytes ("" if none).
	TornSavedTo string
	// ZeroTail is the number of zero bytes cut from the end.
	ZeroTail int64
	// Damage is mid-file damage found (and left in place: repair is a
	// separate, explicit step). Open checks frames by checksum, so a frame
	// that checks and does not decode is not listed (a Reader reports it).
	Damage []*CorruptionError
}

// Writer appends frames to one thread's rollout. It is safe for concurrent
// use; appends are ordered by the time they take the writer's lock, and
// with SyncAlways concurrent appends share one fdatasync (of the rollout,
// or of the Log's commit). The writer alone writes and truncates its file.
//
// Failure rule: a frame that was written but not made durable is never left
// for a later frame to follow. When a write or an fsync fails, the file is
// cut back to the last offset known durable and synced before anything else
// is written; the failed appends return errors, and the writer works again
// once the cause (a full disk, say) is gone.
type Writer struct {
	path string
	f    vfs.File
	hdr  FileHeader
	opts Options
	// With SyncAlways and Options.Log: the log, the writer's group and
	// the stream the log knows the rollout by.
	log    Log
	group  *LogGroup
	stream Stream
	// created is the header frame, for a writer that made the file.
	created *createdFrame

	mu   sync.Mutex
	cond sync.Cond // on mu: waiters for the rollout's fsync

	// Where the file ends (mu).
	end     int64  // end of the frames written
	nextSeq uint64 // seq of the next record
	prev    int64  // offset of the last frame written

	// What is durable (mu).
	synced      int64  // end known durable (acknowledged): by the rollout's fsync or the log
	syncedSeq   uint64 // last seq known durable
	syncedFrame int64  // offset of the frame ending at synced
	fileSynced  int64  // end known fsynced in the rollout itself
	syncing     bool   // a leader is in the rollout's fsync (mu released)

	// With a log (mu): the ticket of the last frame submitted, and where
	// that frame ends, its last seq and offset.
	last    LogTicket
	lastEnd int64
	lastSeq uint64
	lastOff int64
	// direct is the frame written to the rollout only (larger than the
	// log's MaxEntry) while its fsync is pending (directEnd > synced): it
	// starts at directStart, after seq directSeq and the frame at
	// directPrev. Nothing is appended after it until it is durable: a
	// logged frame behind it would be acknowledged by the log's commit
	// while the frame it follows is only in the page cache.
	directStart, directEnd, directPrev int64
	directSeq                          uint64

	// Failures (mu). epoch changes every time frames past synced are
	// abandoned; cuts[e] is where epoch e was cut. A waiter from epoch e is
	// durable only if its frame ended at or before cuts[e].
	epoch   uint64
	cuts    map[uint64]int64
	lastErr error
	// recoverTo >= 0: the file must be truncated here and synced before
	// the next write.
	recoverTo   int64
	recoverSeq  uint64
	recoverPrev int64
	// broken is set when a background or closing fsync fails under
	// SyncInterval or SyncNever: records already acknowledged under that
	// policy may be lost, and their seqs must not be handed out again, so
	// the writer refuses everything until the thread is reopened.
	broken error
	// logHolds says broken was set by a failed fsync of the rollout while
	// the log holds what it acknowledged; the next call writes that back
	// and syncs again (writeBackLocked), and the writer works once the
	// cause is gone.
	logHolds bool

	closed bool
	stop   chan struct{}
	done   chan struct{}
}

// Create makes a new rollout at path for the thread in opened (which becomes
// record seq 1) and returns its writer, holding the thread's lock. The file
// appears atomically and durably: it is written and synced under a
// temporary name, then linked into place (ErrThreadExists if path exists)
// and the directory synced.
func Create(ctx context.Context, path string, opened ThreadOpened, opts Options) (*Writer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ValidateThreadID(opened.ThreadID); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	now := opts.Now()
	if opened.Created.IsZero() {
		opened.Created = now
	}
	if opened.FormatVersion == 0 {
		opened.FormatVersion = FormatVersion
	}
	rec, err := NewRecord(KindThreadOpened, "", opened)
	if err != nil {
		return nil, err
	}
	// The header record's time is the thread's creation time: now, or the
	// one the caller gave (an imported session's).
	rec.Seq, rec.Time = 1, opened.Created
	hdr := NewFileHeader(opened.ThreadID, now)
	b := hdr.Marshal()
	if b, err = encodeFrame(b, hdr.FileID, FileHeaderSize, []Record{rec}, opts.CompressAbove); err != nil {
		return nil, err
	}

	dir := filepath.Dir(path)
	tmp := filepath.Join(dir, tempFilePrefix+opened.ThreadID+"-"+strconv.FormatUint(hdr.FileID, 36))
	f, err := opts.FS.Create(tmp)
	if err != nil {
		return nil, errors.Wrapf(err, "create %s", tmp)
	}
	fail := func(err error) (*Writer, error) {
		_ = f.Close()
		_ = opts.FS.Remove(tmp)
		return nil, err
	}
	if err := f.Lock(); err != nil {
		return fail(err)
	}
	if n, err := f.WriteAt(b, 0); err != nil || n != len(b) {
		return fail(writeError(tmp, err))
	}
	if err := f.Sync(); err != nil {
		return fail(withPath(err, "sync %s", tmp))
	}
	if err := opts.FS.Link(tmp, path); err != nil {
		if errors.Is(err, syscall.EEXIST) || vfs.IsExist(err) {
			return fail(errors.WithHint(errors.Wrapf(ErrThreadExists, "%s", path), "open the existing thread instead, or choose another id"))
		}
		return fail(errors.Wrapf(err, "link %s", path))
	}
	if err := opts.FS.Remove(tmp); err != nil {
		_ = f.Close()
		return nil, errors.Wrapf(err, "remove %s", tmp)
	}
	if err := opts.FS.SyncDir(dir); err != nil {
		_ = f.Close()
		return nil, withPath(err, "sync directory %s", dir)
	}
	end := int64(len(b))
	w := newWriter(opts, path, f, hdr, end, 1, FileHeaderSize)
	fh, _ := ParseFrameHeader(b[FileHeaderSize:])
	w.created = &createdFrame{
		res: AppendResult{FirstSeq: 1, LastSeq: 1, Offset: FileHeaderSize, End: end, DataCRC: fh.DataCRC},
		rec: rec,
	}
	return w, nil
}

type createdFrame struct {
	res AppendResult
	rec Record
}

// Created returns the header frame (seq 1, the ThreadOpened record) of a
// writer that Create returned: it is durable, and a host publishes it as
// it publishes an append. ok is false for a writer that Open returned.
func (w *Writer) Created() (res AppendResult, rec Record, ok bool) {
	if w.created == nil {
		return AppendResult{}, Record{}, false
	}
	return w.created.res, w.created.rec, true
}

// Open opens the rollout at path for appending and takes the thread's lock
// (ErrThreadLocked at once if another writer holds it). threadID, if not
// empty, must match the file header (ErrThreadMismatch). It reads the whole
// file (from the anchor's durable point, given Options.From), checking
// frames by checksum without decoding them: a torn tail is cut (its bytes
// saved beside the file, see OpenReport), never reported as an error;
// mid-file damage is reported and left in place.
func Open(ctx context.Context, path, threadID string, opts Options) (*Writer, OpenReport, error) {
	var rep OpenReport
	if err := ctx.Err(); err != nil {
		return nil, rep, err
	}
	opts = opts.withDefaults()
	f, err := opts.FS.OpenRW(path)
	if err != nil {
		return nil, rep, withPath(err, "open %s", path)
	}
	fail := func(err error) (*Writer, OpenReport, error) {
		_ = f.Close()
		return nil, rep, err
	}
	if err := f.Lock(); err != nil {
		return fail(err)
	}
	restored := ""
	if g := opts.Log; g != nil && opts.Sync.mode == syncAlways {
		// Frames a closed writer of this process acknowledged through the
		// log and then failed to sync in the rollout are written back
		// first.
		id := threadID
		if hb := make([]byte, FileHeaderSize); id == "" {
			if _, err := f.ReadAt(hb, 0); err == nil {
				h, _ := ParseFileHeader(hb)
				id = h.ThreadID
			}
		}
		did, err := g.restore(ctx, id, path, f)
		if err != nil {
			return fail(err)
		}
		if did {
			restored = id
		}
	}
	size, err := f.Size()
	if err != nil {
		return fail(errors.Wrapf(err, "stat %s", path))
	}
	// The scan for the end checks each frame's header, seq and checksum
	// without decompressing or decoding it: a crash leaves a frame whose
	// checksum fails, not one that checks and does not decode. A frame
	// that checks and does not decode, with valid frames after it, is
	// mid-file damage to a full read too (the Reader never takes a frame
	// written whole for a torn write), so both end at the same frame; only
	// OpenReport.Damage does not list it. The last frame is decoded all
	// the same, and if it does not decode the scan is made again decoding
	// everything, so that it is cut as a full read would cut it.
	scan := func(from int64, checksumsOnly bool) (*Reader, error) {
		r, err := NewReader(f, size, ReaderOptions{Path: path, StartOffset: from, checksumsOnly: checksumsOnly})
		if err != nil {
			return nil, err
		}
		if threadID != "" && r.Header().ThreadID != threadID {
			return nil, errors.WithHint(
				errors.Wrapf(ErrThreadMismatch, "%s holds thread %q, not %q", path, r.Header().ThreadID, threadID),
				"the file was renamed or copied over another thread's; inspect it with rolloutctl verify")
		}
		for r.Next() {
		}
		if err := r.Err(); err != nil {
			return nil, err
		}
		if r.LastSeq() == 0 && !r.fromStart {
			// Nothing survives after the durable point (torn up to it):
			// the seq it ends at is known only from the start.
			return scanFrom(f, size, path, checksumsOnly)
		}
		return r, nil
	}
	from := durableBefore(f, size, opts.From)
	r, err := scan(from, true)
	if err != nil {
		return fail(err)
	}
	if r.LastSeq() != 0 && r.FrameOffset() >= FileHeaderSize && !frameDecodes(f, r.FrameOffset(), r.FrameHeader()) {
		if r, err = scan(from, false); err != nil {
			return fail(err)
		}
	}
	rep.Damage, rep.TornTail, rep.ZeroTail = r.Damage(), r.TornTail(), r.ZeroTail()
	end := r.End()
	if r.LastSeq() == 0 {
		// Create syncs the header frame before the file appears, so its
		// loss is never a torn write; appending now would reuse seq 1.
		return fail(errors.WithHint(errors.Wrapf(&CorruptionError{Path: path, Offset: FileHeaderSize, Length: size - FileHeaderSize, Reason: ReasonTruncated, FirstSeq: 1},
			"%s: the thread header frame is lost", path), "the rollout cannot be continued; inspect it with rolloutctl verify and restore it from a backup"))
	}
	if end < size {
		if rep.TornTail != nil {
			if rep.TornSavedTo, err = saveTail(opts.FS, f, path, end, size); err != nil {
				return fail(err)
			}
		}
		if err := f.Truncate(end); err != nil {
			return fail(withPath(err, "truncate torn tail of %s", path))
		}
	}
	// What a crashed process left in the page cache is not yet durable:
	// make it so before anything follows it.
	if err := f.Sync(); err != nil {
		return fail(withPath(err, "sync %s", path))
	}
	// So is the file's name, if the Create (or move) that gave it failed
	// at its directory sync: an append acknowledged here must not vanish
	// with the name at a power cut.
	if err := opts.FS.SyncDir(filepath.Dir(path)); err != nil {
		return fail(withPath(err, "sync directory of %s", path))
	}
	if restored != "" {
		opts.Log.restored(restored)
	}
	return newWriter(opts, path, f, r.Header(), end, r.LastSeq(), r.FrameOffset()), rep, nil
}

// scanFrom reads the whole rollout in f to its end.
func scanFrom(f io.ReaderAt, size int64, path string, checksumsOnly bool) (*Reader, error) {
	r, err := NewReader(f, size, ReaderOptions{Path: path, checksumsOnly: checksumsOnly})
	if err != nil {
		return nil, err
	}
	for r.Next() {
	}
	return r, r.Err()
}

// frameDecodes reports whether the frame at off, whose header h was read
// and checked there, decodes to its records.
func frameDecodes(f io.ReaderAt, off int64, h FrameHeader) bool {
	b := make([]byte, FrameHeaderSize+h.Length)
	if n, _ := f.ReadAt(b, off); n < len(b) {
		return false
	}
	_, _, err := DecodeFrame(b, h.FileID)
	return err == nil
}

// durableBefore is where Open may start reading given an anchor: the
// durable offset the anchor frame recorded, if the file still holds that
// frame; else 0 (the start).
func durableBefore(f io.ReaderAt, size int64, a Anchor) int64 {
	if a.Offset <= FileHeaderSize || a.Offset >= size {
		return 0
	}
	hb := make([]byte, FileHeaderSize)
	if _, err := f.ReadAt(hb, 0); err != nil {
		return 0
	}
	fh, err := ParseFileHeader(hb)
	if err != nil {
		return 0
	}
	h, err := ReadFrameHeader(f, a.Offset)
	if err != nil || h.FileID != fh.FileID || h.Seq != a.Seq || h.DataCRC != a.DataCRC ||
		h.Durable <= FileHeaderSize || h.Durable > a.Offset {
		return 0
	}
	return h.Durable
}

// saveTail copies the bytes [from,to) of f beside path before they are cut,
// for inspection.
func saveTail(fsys vfs.FS, f vfs.File, path string, from, to int64) (string, error) {
	const limit = MaxFrameSize + FrameHeaderSize
	buf := make([]byte, min(to-from, limit))
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s%s%d", path, TornSuffix, from)
		if i > 0 {
			name += "." + strconv.Itoa(i)
		}
		out, err := fsys.Create(name)
		if vfs.IsExist(err) {
			continue
		}
		if err != nil {
			return "", errors.Wrapf(err, "save torn tail of %s", path)
		}
		for off := from; off < to; {
			n := int(min(int64(len(buf)), to-off))
			if _, err := f.ReadAt(buf[:n], off); err != nil {
				_ = out.Close()
				return "", withPath(err, "read torn tail of %s", path)
			}
			if _, err := out.WriteAt(buf[:n], off-from); err != nil {
				_ = out.Close()
				return "", writeError(name, err)
			}
			off += int64(n)
		}
		err = out.Sync()
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = fsys.SyncDir(filepath.Dir(name))
		}
		if err != nil {
			return "", errors.Wrapf(err, "save torn tail of %s", path)
		}
		return name, nil
	}
}

func newWriter(opts Options, path string, f vfs.File, hdr FileHeader, end int64, lastSeq uint64, lastFrame int64) *Writer {
	w := &Writer{
		path: path, f: f, hdr: hdr, opts: opts,
		end: end, nextSeq: lastSeq + 1, prev: lastFrame, synced: end, syncedSeq: lastSeq, syncedFrame: lastFrame, fileSynced: end,
		cuts: map[uint64]int64{}, recoverTo: -1,
	}
	w.cond.L = &w.mu
	if opts.Sync.mode == syncAlways && opts.Log != nil {
		w.group, w.log, w.stream = opts.Log, opts.Log.log, Stream{Thread: hdr.ThreadID, FileID: hdr.FileID}
		// What a writer of this file left in the log is in the file now,
		// synced (Open wrote it back, or it was there).
		w.log.Release(w.stream, end)
		w.group.add(w)
	}
	if opts.Sync.mode == syncInterval {
		w.stop, w.done = make(chan struct{}), make(chan struct{})
		go w.syncLoop(opts.Sync.interval)
	}
	return w
}

// Path returns the rollout's path.
func (w *Writer) Path() string { return w.path }

// Header returns the file header.
func (w *Writer) Header() FileHeader { return w.hdr }

// LastSeq returns the seq of the last record written.
func (w *Writer) LastSeq() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nextSeq - 1
}

// End returns the offset where the next frame will be written.
func (w *Writer) End() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.end
}

// Append writes recs as one frame: all of them or none survive a crash. It
// sets each record's Seq, and Time where it is zero. It returns once the
// frame is durable under the writer's SyncPolicy; an error means the
// records are not acknowledged (with ErrNotDurable they were written, then
// cut again).
func (w *Writer) Append(ctx context.Context, recs []Record, opt AppendOptions) (AppendResult, error) {
	p, err := w.Write(ctx, recs, opt)
	if err != nil {
		return AppendResult{}, err
	}
	return w.Wait(p)
}

// Pending is a frame written but not yet acknowledged: Wait acknowledges
// it.
type Pending struct {
	res    AppendResult
	epoch  uint64
	ticket LogTicket // the log's, if the frame was submitted to one
}

// NewPending makes the Pending of a log that writes frames itself (see
// PrepareFrame): the frame's result once acknowledged, and the ticket
// that acknowledges it.
func NewPending(res AppendResult, t LogTicket) Pending { return Pending{res: res, ticket: t} }

// Result returns the frame's AppendResult, valid once it is acknowledged.
func (p Pending) Result() AppendResult { return p.res }

// Ticket returns the ticket that acknowledges the frame (nil if none).
func (p Pending) Ticket() LogTicket { return p.ticket }

// frameBufs are encoding buffers: a frame is encoded outside the writer's
// lock into one of them, written (and submitted to the log, which copies
// it), and the buffer is put back.
var frameBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// Write is the first half of Append: it writes recs as one frame (setting
// Seq and Time as Append does) and returns without waiting for durability.
// Nothing it wrote is acknowledged until Wait returns nil. A caller that
// must order its frames (one turn's records) holds its own lock across
// Write only, so that other appenders join the same fsync while it waits
// (and prepares the frame first, with Prepare, so that the encoding is
// not under its lock either).
//
// The frame's payload (envelopes, compression, CRC) is encoded before the
// writer's lock is taken; under it only the header is sealed (seq, durable
// offset), the frame written and, with a log, submitted to it.
func (w *Writer) Write(ctx context.Context, recs []Record, opt AppendOptions) (Pending, error) {
	p, err := w.Prepare(recs)
	if err != nil {
		return Pending{}, err
	}
	defer p.Release()
	return w.WritePrepared(ctx, p, opt)
}

// Prepared is a frame encoded for one writer, not yet written: its
// records have their Time; Seq is set when it is written.
type Prepared struct {
	recs  []Record
	frame []byte
	h     FrameHeader
	buf   *[]byte
}

// Prepare encodes recs as a frame for this writer (stamping Time where it
// is zero): the costly part of an append, done outside any lock. The
// Prepared is written with WritePrepared, and released after.
func (w *Writer) Prepare(recs []Record) (*Prepared, error) {
	return PrepareFrame(recs, w.opts.CompressAbove, w.opts.Now())
}

// PrepareFrame encodes recs as a frame's payload (stamping Time where it
// is zero with now, compressing a payload over compressAbove bytes; 0
// never), for a log that writes frames itself rather than through a
// Writer. Seal numbers the records and gives the frame its header.
func PrepareFrame(recs []Record, compressAbove int, now time.Time) (*Prepared, error) {
	for i := range recs {
		if recs[i].Time.IsZero() {
			recs[i].Time = now
		}
	}
	bp := frameBufs.Get().(*[]byte)
	frame, h, err := encodePayload((*bp)[:0], recs, compressAbove)
	p := &Prepared{recs: recs, frame: frame, h: h, buf: bp}
	if err != nil {
		p.Release()
		return nil, err
	}
	return p, nil
}

// Seal numbers the frame's records from seq and writes its header, for
// the rollout of file id fileID whose acknowledged end is durable. It
// returns the whole frame: its bytes are the Prepared's, valid until
// Release, and the same a Writer would have written at that place.
func (p *Prepared) Seal(fileID, seq uint64, durable int64) []byte {
	for i := range p.recs {
		p.recs[i].Seq = seq + uint64(i)
	}
	p.h.FileID, p.h.Seq, p.h.Durable = fileID, seq, durable
	p.h.Put(p.frame)
	return p.frame
}

// Records returns the frame's records (numbered once sealed).
func (p *Prepared) Records() []Record { return p.recs }

// Size returns the frame's length in bytes, header included.
func (p *Prepared) Size() int { return len(p.frame) }

// DataCRC returns the frame's payload CRC (AppendResult.DataCRC).
func (p *Prepared) DataCRC() uint32 { return p.h.DataCRC }

// Release gives the Prepared's buffer back (after WritePrepared, or if it
// is not written).
func (p *Prepared) Release() {
	if p.buf == nil {
		return
	}
	if cap(p.frame) <= 1<<20 {
		*p.buf = p.frame[:0] // keep small scratch; let a rare large one go
	}
	frameBufs.Put(p.buf)
	p.buf, p.frame = nil, nil
}

// WritePrepared writes a prepared frame: Write's second part.
func (w *Writer) WritePrepared(ctx context.Context, p *Prepared, opt AppendOptions) (Pending, error) {
	if err := ctx.Err(); err != nil {
		return Pending{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	res, t, err := w.writeLocked(p.frame, p.h, p.recs, opt)
	return Pending{res: res, epoch: w.epoch, ticket: t}, err
}

// Wait returns once the frame Write wrote is durable under the writer's
// SyncPolicy (at once under SyncInterval and SyncNever), with Append's
// result and errors.
func (w *Writer) Wait(p Pending) (AppendResult, error) {
	if w.opts.Sync.mode != syncAlways {
		return p.res, nil
	}
	if p.ticket != nil {
		lerr := p.ticket.Wait() // outside the writer's lock
		w.mu.Lock()
		defer w.mu.Unlock()
		// A cut since says at most what of this epoch can still count:
		// frames past it are gone. Within it, a logged frame is durable if
		// the log made it so, or if the rollout's own fsync covered it.
		switch {
		case !w.survivesLocked(p.res.End, p.epoch):
			return AppendResult{}, &notDurable{fmt.Sprintf("rollout %s: not durable, cut at %d", w.path, w.cuts[p.epoch]), w.lastErr}
		case lerr == nil:
			w.ackLocked(p.res.End, p.res.LastSeq, p.res.Offset)
			return p.res, nil
		case p.res.End <= w.synced:
			// The rollout was synced past it. The log refuses the stream
			// until Reset; with nothing of it in flight or unsynced,
			// nothing is to be cut first.
			if p.ticket == w.last && w.end == w.synced {
				w.log.Reset(w.stream)
			}
			return p.res, nil
		}
		// Still in the file, and abandoned by the log: cut it, and
		// whatever follows it, whether or not a cut since kept it (a cut
		// for a frame written to the rollout only keeps what precedes it).
		w.logFailedLocked(lerr)
		return AppendResult{}, lerr
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.waitLocked(p.res.End, p.epoch); err != nil {
		if w.log != nil && w.directEnd == p.res.End && w.directEnd == w.end && w.synced < w.directEnd && w.survivesLocked(p.res.End, p.epoch) {
			// A frame written to the rollout only whose append fails must
			// not stay for a later sync or write-back to make durable (the
			// caller retries it).
			w.cutLocked(w.directStart, w.directSeq, w.directPrev, err)
		}
		return AppendResult{}, err
	}
	return p.res, nil
}

// logFailedLocked handles the log abandoning frames of this writer: every
// frame past what is durable (in the log or the rollout) is cut back
// before the next write, and the log takes the stream's frames again.
// The log abandons an entry only with every later one, so nothing past
// the cut can become durable in it.
func (w *Writer) logFailedLocked(err error) {
	m := w.log.Reset(w.stream)
	w.ackLocked(m.End, m.Seq, m.Frame)
	if w.end > w.synced {
		w.cutLocked(w.synced, w.syncedSeq, w.syncedFrame, err)
	}
	w.cond.Broadcast()
}

// ackLocked records that the file is durable through end (a frame ending
// there, starting at frame, with last seq seq).
func (w *Writer) ackLocked(end int64, seq uint64, frame int64) {
	if end > w.synced {
		w.synced, w.syncedSeq, w.syncedFrame = end, seq, frame
	}
}

func (w *Writer) writeLocked(frame []byte, h FrameHeader, recs []Record, opt AppendOptions) (AppendResult, LogTicket, error) {
	direct := w.log == nil || len(frame) > w.log.MaxEntry()
	// Every wait below releases the lock: what it waited for is looked at
	// again from the top.
	for {
		if w.closed {
			return AppendResult{}, nil, ErrClosed
		}
		if err := w.writeBackLocked(); err != nil {
			return AppendResult{}, nil, err
		}
		if err := w.recoverWhenIdleLocked(); err != nil {
			return AppendResult{}, nil, errors.WithHint(errors.Wrapf(err, "rollout %s: recover from earlier failure", w.path),
				"the last write failed and the file could not be cut back yet; free disk space or fix the device, then retry")
		}
		if w.log != nil && w.directEnd > w.synced {
			// Nothing follows a frame written to the rollout only until it
			// is durable (see directEnd).
			if err := w.waitLocked(w.directEnd, w.epoch); err != nil && w.directEnd > w.synced {
				return AppendResult{}, nil, err
			}
			continue
		}
		break
	}
	last := w.nextSeq - 1
	if opt.IfLastSeq != 0 && opt.IfLastSeq != last {
		return AppendResult{}, nil, errors.Wrapf(ErrConflict, "rollout %s: expected last seq %d, it is %d", w.path, opt.IfLastSeq, last)
	}
	for i := range recs {
		recs[i].Seq = w.nextSeq + uint64(i)
	}
	h.FileID, h.Seq, h.Durable = w.hdr.FileID, w.nextSeq, w.synced
	h.Put(frame)
	start := w.end
	if n, err := w.f.WriteAt(frame, start); err != nil || n != len(frame) {
		// Cut the partial frame before anything else is written. Frames
		// before it wait for durability and are covered by the cut's sync
		// (or abandoned if that fails).
		w.markRecover(start, w.nextSeq-1, w.prev)
		_ = w.recoverWhenIdleLocked() // if it fails, it is retried before the next write
		return AppendResult{}, nil, writeError(w.path, err)
	}
	end, lastSeq := start+int64(len(frame)), w.nextSeq+uint64(len(recs))-1
	var t LogTicket
	switch {
	case !direct:
		var err error
		t, err = w.log.Submit(LogEntry{Stream: w.stream, Offset: start, Prev: w.prev, Frame: frame})
		if err != nil {
			// The frame is in the file and not in the log: it is cut before
			// anything follows it. If the log refused because it abandoned
			// earlier frames of this writer, they are cut too.
			if errors.Is(err, ErrNotDurable) {
				w.end, w.nextSeq, w.prev = end, lastSeq+1, start
				w.logFailedLocked(err)
			} else {
				w.markRecover(start, w.nextSeq-1, w.prev)
				_ = w.recoverWhenIdleLocked()
			}
			return AppendResult{}, nil, &notDurable{fmt.Sprintf("rollout %s: frame not acknowledged", w.path), err}
		}
		w.last, w.lastEnd, w.lastSeq, w.lastOff = t, end, lastSeq, start
	case w.log != nil:
		w.directStart, w.directEnd, w.directSeq, w.directPrev = start, end, w.nextSeq-1, w.prev
	}
	w.end, w.nextSeq, w.prev = end, lastSeq+1, start
	return AppendResult{FirstSeq: recs[0].Seq, LastSeq: lastSeq, Offset: start, End: end, DataCRC: h.DataCRC}, t, nil
}

// Sync makes everything appended so far durable, whatever the policy.
func (w *Writer) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if w.broken != nil {
		return w.brokenError()
	}
	w.waitLogLocked()
	if err := w.waitLocked(w.end, w.epoch); err != nil {
		return err
	}
	if w.broken != nil {
		return w.brokenError()
	}
	return nil
}

// waitLogLocked waits (mu released meanwhile) for the log to make the
// last submitted frame durable, and counts it durable if it is. What is
// left past it (a frame written to the rollout only) is then for
// waitLocked's fsync of the rollout.
func (w *Writer) waitLogLocked() {
	t, end, seq, off, epoch := w.last, w.lastEnd, w.lastSeq, w.lastOff, w.epoch
	if t == nil || w.synced >= end {
		return
	}
	w.mu.Unlock()
	err := t.Wait()
	w.mu.Lock()
	switch {
	case err == nil && w.survivesLocked(end, epoch):
		w.ackLocked(end, seq, off)
	case err != nil && w.survivesLocked(end, epoch) && end > w.synced:
		w.logFailedLocked(err)
	}
}

func (w *Writer) brokenError() error {
	if w.log != nil {
		return errors.WithHint(&notDurable{fmt.Sprintf("rollout %s: its fsync failed; what was acknowledged is safe in the workspace journal, but the thread takes no more appends", w.path), w.broken},
			"close and reopen the thread: its frames are written back from the journal first")
	}
	return errors.WithHint(&notDurable{fmt.Sprintf("rollout %s: an fsync failed; records acknowledged under sync policy %s may be lost", w.path, w.opts.Sync), w.broken},
		"close and reopen the thread: the writer continues from what is on disk")
}

// NotDurable returns an error that says msg and matches both ErrNotDurable
// and cause with errors.Is (the standard library's as cockroachdb's): a
// Log's error for an entry it abandoned.
func NotDurable(msg string, cause error) error { return &notDurable{msg, cause} }

// notDurable is ErrNotDurable with its cause.
type notDurable struct {
	msg   string
	cause error
}

func (e *notDurable) Error() string {
	if e.cause == nil {
		return e.msg
	}
	return e.msg + ": " + e.cause.Error()
}

func (e *notDurable) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrNotDurable}
	}
	return []error{ErrNotDurable, e.cause}
}

// waitLocked waits (mu held) until the file is durable through end, leading
// an fsync when none is running. Frames written while one fsync runs are
// covered by the next: that is the group commit.
func (w *Writer) waitLocked(end int64, epoch uint64) error {
	for {
		if !w.survivesLocked(end, epoch) {
			return &notDurable{fmt.Sprintf("rollout %s: not durable, cut at %d", w.path, w.cuts[epoch]), w.lastErr}
		}
		if w.synced >= end {
			return nil // durable before anything broke (a cut never goes below synced)
		}
		if w.broken != nil {
			return w.brokenError()
		}
		if !w.syncing {
			w.syncStepLocked()
			continue
		}
		w.cond.Wait()
	}
}

// syncStepLocked runs one fsync of the rollout (or the pending recovery)
// as the leader.
func (w *Writer) syncStepLocked() {
	w.syncing = true
	var err error
	if w.recoverTo >= 0 {
		err = w.recoverLocked()
	} else {
		err = w.fsyncLocked()
	}
	w.syncing = false
	if err != nil {
		w.failLocked(err)
	}
	w.cond.Broadcast()
}

// fsyncLocked fsyncs the rollout through what is written (mu released
// meanwhile; the caller set syncing), counts it durable and releases it
// in the log.
func (w *Writer) fsyncLocked() error {
	target, targetSeq, targetFrame, epoch := w.end, w.nextSeq-1, w.prev, w.epoch
	f := w.f
	w.mu.Unlock()
	t0 := time.Now()
	err := f.Sync()
	w.observeSync(t0, err)
	w.mu.Lock()
	if err != nil {
		return withPath(err, "sync %s", w.path)
	}
	w.syncedToLocked(epoch, target, targetSeq, targetFrame)
	return nil
}

// failLocked handles a failed fsync (or cut). Only one fsync runs at a time
// (the syncing flag), so synced is still what it was before the failed one.
func (w *Writer) failLocked(err error) {
	if w.opts.Sync.mode != syncAlways {
		// Records past synced were acknowledged under a policy that
		// accepts losing them, but their seqs were handed out: cutting them
		// and reusing the seqs would make a caller's seq name other
		// content. Stop instead; reopening continues from what is on disk.
		w.broken = err
		return
	}
	if w.log != nil && !errors.Is(err, ErrNotDurable) {
		// A failed fsync (or cut) of the rollout itself. What lies past
		// the last good fsync is the log's: frames acknowledged by its
		// commits, which the rollout may have lost (the kernel may drop the
		// pages) and the writer writes back from it (writeBackLocked), and
		// frames still on their way through it. Those are not cut: the log could still make
		// them durable after the writer gave them up, and a replay would
		// then find them where the writer put other frames. Only a frame
		// written to the rollout only, which the log does not hold, is cut
		// (its append fails; it is the last frame: nothing is appended
		// after it until it is durable).
		if w.directEnd > w.synced && w.directEnd == w.end {
			w.cutLocked(w.directStart, w.directSeq, w.directPrev, err)
		}
		w.broken, w.logHolds = err, true
		return
	}
	// The kernel may have dropped the unsynced pages: nothing past synced
	// can be trusted. Abandon it (its appenders get ErrNotDurable) and cut
	// it before the next write.
	w.cutLocked(w.synced, w.syncedSeq, w.syncedFrame, err)
}

// cutLocked abandons everything written past to (the frame ending there
// starts at prev, its last seq is seq): its appenders get ErrNotDurable
// (a waiter of an earlier epoch counts only what ended at or before to)
// and the file is cut back to to before the next write (recoverLocked).
// With a log, the caller knows that nothing past to can become durable in
// it (logFailedLocked), or that the log holds nothing past to (a frame
// written to the rollout only, or one the log refused).
func (w *Writer) cutLocked(to int64, seq uint64, prev int64, err error) {
	if w.directEnd > to {
		w.directStart, w.directEnd = 0, 0
	}
	if w.lastEnd > to {
		w.last = nil // given up: nothing waits on it again (Sync, Close)
	}
	w.cuts[w.epoch] = to
	w.epoch++
	w.fileSynced = min(w.fileSynced, to) // what is past to goes
	w.lastErr = err
	w.markRecover(to, seq, prev)
	w.end, w.nextSeq, w.prev = to, seq+1, prev
}

// survivesLocked reports whether a frame ending at end, written in epoch,
// is still in the rollout as written (w.mu held).
func (w *Writer) survivesLocked(end int64, epoch uint64) bool {
	for e := epoch; e < w.epoch; e++ {
		if end > w.cuts[e] {
			return false
		}
	}
	return end <= w.end
}

// writeBackLocked is a no-op for a working writer. One broken by a failed
// fsync of its rollout (with a log) writes back from the log what the
// rollout may have lost and syncs it again; if that works, so does the
// writer. Any other broken writer stays broken (brokenError).
func (w *Writer) writeBackLocked() error {
	for w.broken != nil && w.logHolds && w.syncing {
		w.cond.Wait()
	}
	if w.broken == nil {
		return nil
	}
	if !w.logHolds {
		return w.brokenError()
	}
	if w.last != nil && w.synced < w.lastEnd {
		// A frame still on its way through the log: the write-back reads
		// only what the log holds durable, and the fsync after it counts
		// everything written, so the frame is waited for first (it is
		// acknowledged, or cut).
		w.waitLogLocked()
		return w.writeBackLocked()
	}
	w.syncing = true
	target, targetSeq, targetFrame, epoch := w.end, w.nextSeq-1, w.prev, w.epoch
	f := w.f
	w.mu.Unlock()
	err := w.log.WriteBack(context.Background(), w.hdr.ThreadID, w.path, f)
	if err == nil {
		err = f.Sync()
	}
	w.mu.Lock()
	w.syncing = false
	w.cond.Broadcast()
	if err != nil {
		return errors.CombineErrors(w.brokenError(), err)
	}
	w.broken, w.logHolds = nil, false
	w.syncedToLocked(epoch, target, targetSeq, targetFrame)
	return nil
}

// recoverWhenIdleLocked runs a pending cut as the only fsync in flight: it
// waits for a running leader first, so that two fsyncs never race for one
// writeback error.
func (w *Writer) recoverWhenIdleLocked() error {
	if w.recoverTo < 0 {
		return nil // the common case: appends do not wait for a running fsync
	}
	for w.syncing {
		w.cond.Wait()
	}
	if w.recoverTo < 0 {
		return nil // the leader did it
	}
	if w.broken != nil {
		return w.brokenError()
	}
	err := w.recoverLocked()
	if err != nil {
		w.failLocked(err)
	}
	w.cond.Broadcast()
	return err
}

func (w *Writer) markRecover(to int64, seq uint64, prev int64) {
	if w.recoverTo < 0 || to < w.recoverTo {
		w.recoverTo, w.recoverSeq, w.recoverPrev = to, seq, prev
	}
}

// recoverLocked cuts the file back to recoverTo and syncs it, so that no
// unacknowledged bytes remain for a later frame to follow.
func (w *Writer) recoverLocked() error {
	if w.recoverTo < 0 {
		return nil
	}
	if err := w.f.Truncate(w.recoverTo); err != nil {
		return errors.Wrapf(err, "truncate %s to %d", w.path, w.recoverTo)
	}
	if err := w.f.Sync(); err != nil {
		return withPath(err, "sync %s", w.path)
	}
	w.end, w.nextSeq, w.prev = w.recoverTo, w.recoverSeq+1, w.recoverPrev
	w.ackLocked(w.end, w.nextSeq-1, w.prev)
	w.fileSynced = w.end
	w.recoverTo = -1
	w.releaseLocked()
	w.cond.Broadcast()
	return nil
}

// syncFile makes the rollout itself durable through what is written, and
// releases it in the log (the LogGroup, when the log asks). A broken
// writer writes back from the log first; a closed one has nothing left to do.
func (w *Writer) syncFile() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		switch {
		case w.closed:
			return nil
		case w.broken != nil:
			if err := w.writeBackLocked(); err != nil {
				return err
			}
			continue
		case w.syncing:
			w.cond.Wait()
			continue
		case w.recoverTo >= 0:
			if err := w.recoverWhenIdleLocked(); err != nil {
				return err
			}
			continue
		case w.fileSynced >= w.end:
			w.releaseLocked()
			return nil
		}
		w.syncing = true
		err := w.fsyncLocked()
		w.syncing = false
		w.cond.Broadcast()
		if err != nil {
			w.failLocked(err)
			return w.brokenError()
		}
		return nil
	}
}

// syncedToLocked records an fsync that covered the file through target
// (as written when it began, in epoch) and releases it in the log. A cut
// while it ran leaves only what the cut kept, and acknowledges nothing:
// the frames past the cut are given up.
func (w *Writer) syncedToLocked(epoch uint64, target int64, seq uint64, frame int64) {
	if w.epoch != epoch {
		w.fileSynced = max(w.fileSynced, min(target, w.end))
	} else {
		w.fileSynced = max(w.fileSynced, target)
		w.ackLocked(target, seq, frame)
	}
	w.releaseLocked()
}

// releaseLocked tells the log that the rollout is synced through
// fileSynced (a frame the log holds past it stays the log's). It is
// said again whenever the log may need it: the log forgets a stream it
// holds nothing of, and may be told before it holds what it is told of
// (a rollout fsync that overtook the log's commit).
func (w *Writer) releaseLocked() {
	if w.log != nil {
		w.log.Release(w.stream, w.fileSynced)
	}
}

func (w *Writer) syncLoop(d time.Duration) {
	defer close(w.done)
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.mu.Lock()
			if !w.closed && w.broken == nil && !w.syncing && (w.synced < w.end || w.recoverTo >= 0) {
				w.syncStepLocked()
			}
			w.mu.Unlock()
		}
	}
}

// Close syncs what was appended and releases the thread's lock. With a
// log it also syncs the rollout itself and releases it there, so that the
// log no longer needs its frames; if that fails, the group remembers the
// thread, and its next writer in this process writes them back first.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	var err error
	if werr := w.writeBackLocked(); werr != nil {
		err = werr
	} else {
		w.waitLogLocked()
		err = w.waitLocked(w.end, w.epoch)
		if rerr := w.recoverWhenIdleLocked(); err == nil {
			err = rerr // leave no unacknowledged bytes behind a clean close
		}
		if err == nil && w.log != nil && w.fileSynced < w.end {
			for w.syncing {
				w.cond.Wait()
			}
			if serr := w.f.Sync(); serr != nil {
				w.failLocked(errors.Wrapf(serr, "sync %s", w.path))
				err = w.brokenError()
			} else {
				w.fileSynced = w.end
				w.releaseLocked()
			}
		}
		if w.broken != nil && err == nil {
			err = w.brokenError()
		}
	}
	unsynced := w.fileSynced < w.synced
	if !unsynced {
		if t := w.last; t != nil {
			// Its commit may still be on its way (a rollout fsync
			// acknowledged it first): the log must hold the stream for
			// the release to count, or it keeps the entries for good.
			w.mu.Unlock()
			_ = t.Wait()
			w.mu.Lock()
		}
		w.releaseLocked()
	}
	w.cond.Broadcast()
	w.mu.Unlock()
	if w.group != nil {
		w.group.remove(w, unsynced)
	}
	if w.stop != nil {
		close(w.stop)
		<-w.done
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}

func writeError(path string, err error) error { return vfs.WriteError(path, err) }

// observeSync counts a rollout fdatasync in Options.Metrics.
func (w *Writer) observeSync(t0 time.Time, err error) {
	if m := w.opts.Metrics; m != nil {
		m.syncs.ObserveSince(t0)
		if err != nil {
			m.failures.Add(1)
		}
	}
}
