package rollout

import (
	"bytes"
	"hash/crc32"
	"io"
	"sort"

	"github.com/cockroachdb/errors"
)

// ReaderOptions configure a Reader. The zero value reads a whole file.
type ReaderOptions struct {
	// Path names the file in errors. Default: empty.
	Path string
	// StartOffset is the offset of a frame to start at instead of the first
	// one (for example a checkpoint's frame, from the projection). It must be
	// a frame boundary: if it is not a valid frame the reader resynchronises
	// forward and reports the skipped bytes. Default: FileHeaderSize.
	StartOffset int64
	// ReadAhead is how many bytes the reader asks the source for at a time.
	// Default: 1 MiB. A caller reading only the first frame sets it small.
	ReadAhead int
	// Journal says the file is a journal segment (FileFlagJournal), not a
	// rollout. Each reader refuses the other kind of file.
	Journal bool

	// checksumsOnly checks frames (header, seq, checksum) without
	// decompressing or decoding them, and Next yields no record: Open's
	// scan for the end, at the speed of reading the file.
	checksumsOnly bool
}

// Reader iterates over the records of a rollout, in the shape of
// bufio.Scanner:
//
//	r, err := rollout.NewReader(f, size, rollout.ReaderOptions{})
//	for r.Next() {
//		rec := r.Record()
//	}
//	if err := r.Err(); err != nil { ... } // I/O errors only
//	r.Damage()   // mid-file damage skipped, each a *CorruptionError
//	r.TornTail() // non-nil if the file ends in a torn tail
//
// Damage is not an error of the iteration: the reader skips it, records it
// and goes on, so a caller gets every record that survives. Records (and
// their Body) stay valid after Next moves on.
type Reader struct {
	win  window
	path string
	hdr  FileHeader

	off     int64  // next frame offset
	end     int64  // end of the last valid frame
	lastSeq uint64 // seq of the last record of the last valid frame
	frame   int64  // offset of the frame of the current record
	frameH  FrameHeader
	recs    []Record
	next    int
	rec     Record

	damage []*CorruptionError
	ahead  *aheadIndex // frame headers after the first damage (vouchedPast)
	torn   *CorruptionError
	// fromStart says reading began at the first frame, so seq 1 comes
	// first.
	fromStart     bool
	checksumsOnly bool // see ReaderOptions
	// resyncSpent is the payload bytes checked for resync candidates that
	// failed (see payloadChecks).
	resyncSpent int64
	zeroTail    int64
	done        bool
	err         error
}

// NewReader reads the file header from src (size bytes long) and returns a
// reader positioned at the first frame (or opts.StartOffset). A file whose
// header fails its checks is a *CorruptionError: without its file id no
// frame can be trusted.
func NewReader(src io.ReaderAt, size int64, opts ReaderOptions) (*Reader, error) {
	ra := opts.ReadAhead
	if ra <= 0 {
		ra = defaultReadAhead
	}
	r := &Reader{win: window{src: src, size: size, ahead: ra}, path: opts.Path, checksumsOnly: opts.checksumsOnly}
	if size < FileHeaderSize {
		return nil, &CorruptionError{Path: opts.Path, Length: size, Reason: ReasonTruncated, Tail: true}
	}
	// Read the file header on its own: a reader that starts at an offset
	// must not read ahead from the start of the file.
	b := make([]byte, FileHeaderSize)
	if n, err := src.ReadAt(b, 0); n < FileHeaderSize {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, withPath(err, "read %s", opts.Path)
	}
	h, err := ParseFileHeader(b)
	if err != nil {
		var ce *CorruptionError
		if errors.As(err, &ce) {
			ce.Path = opts.Path
		}
		return nil, err
	}
	if isJournal := h.Flags&FileFlagJournal != 0; isJournal != opts.Journal {
		what := "a journal segment, not a rollout"
		if opts.Journal {
			what = "a rollout, not a journal segment"
		}
		return nil, errors.Wrapf(&CorruptionError{Path: opts.Path, Length: FileHeaderSize, Reason: ReasonBadFileHeader}, "%s is %s", opts.Path, what)
	}
	r.hdr = h
	r.off, r.end, r.fromStart = FileHeaderSize, FileHeaderSize, true
	if opts.StartOffset > FileHeaderSize {
		r.off, r.end, r.fromStart = min(opts.StartOffset, size), min(opts.StartOffset, size), false
	}
	return r, nil
}

// Header returns the file header.
func (r *Reader) Header() FileHeader { return r.hdr }

// Next advances to the next surviving record. It returns false at the end of
// the file or on an I/O error (see Err).
func (r *Reader) Next() bool {
	for r.next >= len(r.recs) {
		if r.done {
			return false
		}
		r.readFrame()
	}
	r.rec = r.recs[r.next]
	r.next++
	return true
}

// Record returns the current record.
func (r *Reader) Record() Record { return r.rec }

// FrameOffset returns the offset of the frame holding the current record.
func (r *Reader) FrameOffset() int64 { return r.frame }

// FrameHeader returns the header of the frame holding the current record,
// as it was read (and checked) with the record: a caller remembering the
// frame (its seq and DataCRC) need not read it again, which could find
// another frame there if the file changed meanwhile.
func (r *Reader) FrameHeader() FrameHeader { return r.frameH }

// Err returns the first I/O error. Damage is not an error: see Damage and
// TornTail.
func (r *Reader) Err() error { return r.err }

// Damage returns the mid-file damage skipped so far, in file order.
func (r *Reader) Damage() []*CorruptionError { return r.damage }

// TornTail returns the torn tail found at the end of the file, or nil. A
// torn tail is the residue of an interrupted write; the next writer cuts it.
func (r *Reader) TornTail() *CorruptionError { return r.torn }

// ZeroTail returns the length of zero bytes after the last frame (space the
// file system extended but that was never written): a clean end.
func (r *Reader) ZeroTail() int64 { return r.zeroTail }

// End returns the offset just past the last valid frame read so far: where a
// writer appends once the reader is done.
func (r *Reader) End() int64 { return r.end }

// LastSeq returns the seq of the last record of the last valid frame read
// (0 if none).
func (r *Reader) LastSeq() uint64 { return r.lastSeq }

// readFrame reads the frame at r.off, or handles the damage there. On return
// either r.recs holds new records, or r.done is set, or damage was recorded
// and r.off moved to the next valid frame.
func (r *Reader) readFrame() {
	spare := r.recs[:0] // handed out by value: the array is reused
	r.recs, r.next = nil, 0
	size := r.win.size
	if r.off >= size {
		r.done = true
		return
	}
	start := r.off
	if size-start < FrameHeaderSize {
		r.damaged(start, start+1, ReasonTruncated, 0, 0)
		return
	}
	b, err := r.win.get(start, FrameHeaderSize)
	if err != nil {
		r.fail(err)
		return
	}
	h, reason := ParseFrameHeader(b)
	if reason == "" && h.FileID != r.hdr.FileID {
		reason = ReasonFileID
	}
	if reason == "" && r.lastSeq != 0 && h.Seq <= r.lastSeq {
		reason = ReasonSeq
	}
	if reason != "" {
		r.damaged(start, start+1, reason, 0, 0)
		return
	}
	firstSeq, lastSeq := h.Seq, h.Seq+uint64(h.Count)-1
	frameEnd := start + FrameHeaderSize + int64(h.Length)
	if frameEnd > size {
		// The header checks but the payload runs past the end: a frame cut
		// short by a crash, unless a valid frame follows somewhere.
		r.damaged(start, start+FrameHeaderSize, ReasonTruncated, firstSeq, lastSeq)
		return
	}
	b, err = r.win.get(start+FrameHeaderSize, h.Length)
	if err != nil {
		r.fail(err)
		return
	}
	var recs []Record // reason is "" here: the header checked
	switch {
	case r.checksumsOnly:
		if crc32.Checksum(b, castagnoli) != h.DataCRC {
			reason = ReasonPayloadCRC
		}
	case h.Flags&flagZstd != 0:
		// Decompressed into a new buffer, which the records alias.
		recs, reason, _ = decodePayloadInto(&h, b, spare, r.rec.Turn)
	default:
		// Records alias the payload, so it is never reused.
		payload := make([]byte, len(b))
		copy(payload, b)
		recs, reason, _ = decodePayloadInto(&h, payload, spare, r.rec.Turn)
	}
	if reason != "" {
		// The header checked, so the frame normally ends at frameEnd and the
		// next frame is found there at once. The search starts right after
		// the header all the same, so that even a wrong length that passed
		// its checksum costs no valid frame; a frame-looking string inside
		// this payload cannot be taken for one, since it would need a seq
		// after this frame's, which did not exist when it was written.
		resume := start + FrameHeaderSize
		if r.resyncSpent > 2*r.win.size+64<<20 {
			resume = frameEnd // budget spent (a crafted file): skip exactly, stay linear
		}
		r.damaged(start, resume, reason, firstSeq, lastSeq)
		return
	}
	r.accountGap(start, firstSeq)
	r.recs, r.frame, r.frameH = recs, start, h
	r.lastSeq, r.end, r.off = lastSeq, frameEnd, frameEnd
}

// accountGap settles which seqs were lost before a valid frame at off whose
// first seq is firstSeq. Damage right before it whose seqs were unknown
// (its header was lost) gets them; a gap with no damaged bytes to explain
// it is reported on its own (the records around it are kept).
func (r *Reader) accountGap(off int64, firstSeq uint64) {
	if n := len(r.damage); n > 0 && r.damage[n-1].Offset+r.damage[n-1].Length == off {
		d := r.damage[n-1]
		if d.FirstSeq == 0 {
			return // the seqs before this frame are unknown (read from an offset)
		}
		d.LastSeq = max(d.LastSeq, firstSeq-1)
		if d.LastSeq < d.FirstSeq {
			d.FirstSeq, d.LastSeq = 0, 0 // no record lost with these bytes
		}
		return
	}
	if r.seqKnown() && firstSeq != r.lastSeq+1 {
		r.damage = append(r.damage, &CorruptionError{Path: r.path, Offset: off, Reason: ReasonSeq, FirstSeq: r.lastSeq + 1, LastSeq: firstSeq - 1})
	}
}

// seqKnown reports whether the seq of the next record is known: the reader
// started at the first frame (seq 1) or has read a frame.
func (r *Reader) seqKnown() bool { return r.lastSeq != 0 || r.fromStart }

// damaged handles bytes at start that are not a valid frame. resume is where
// to look for the next frame: just past a frame whose length was trusted, or
// start+1 when the header itself is bad. knownFirst/knownLast are the seqs of
// a frame whose header survived (0 if not).
func (r *Reader) damaged(start, resume int64, reason Reason, knownFirst, knownLast uint64) {
	next, err := r.resync(resume, max(r.lastSeq, knownLast))
	if err != nil {
		r.fail(err)
		return
	}
	if next < 0 {
		// Nothing valid follows: a clean end padded with zeros, or a torn tail.
		zero, err := r.allZero(start)
		if err != nil {
			r.fail(err)
			return
		}
		if zero {
			r.zeroTail = r.win.size - start
			r.done = true
		} else {
			r.tornFrom(start, reason, knownFirst)
		}
		return
	}
	vouched, err := r.vouchedPast(start, next)
	if err != nil {
		r.fail(err)
		return
	}
	// A frame whose checksums hold and whose payload does not decode was
	// written whole (a torn or flipped write fails its checksum): it is
	// not a torn write, whatever vouches for it, and never the start of a
	// torn tail while valid frames follow. (A writer's bug, or a newer
	// version's encoding; cutting it would destroy what follows.) So a
	// scan by checksums alone, as Open's, ends where a full read ends.
	whole := reason == ReasonDecode
	if !vouched && !whole {
		// Valid frames follow, but none was written after the damaged bytes
		// were known durable: they were never acknowledged (under the
		// writer's policy), and the frames after them were written after
		// them. This is a crash that kept a later write and not an earlier
		// one. The whole rest is a torn tail: the next writer cuts it (and
		// keeps a copy), so readers and writers agree on a gapless prefix.
		r.tornFrom(start, reason, knownFirst)
		return
	}
	// LastSeq is settled by the next frame (accountGap) when not known.
	ce := &CorruptionError{Path: r.path, Offset: start, Length: next - start, Reason: reason, FirstSeq: r.firstLost(knownFirst), LastSeq: knownLast, AckLost: vouched}
	if zero, err := r.allZeroRange(start, next); err == nil && zero {
		ce.Reason = ReasonZeros
	}
	r.damage = append(r.damage, ce)
	if knownLast != 0 {
		// The frame's records are accounted for; a gap before the next
		// frame, if any, is reported when that frame is read.
		r.lastSeq = knownLast
	}
	r.off = next
}

// firstLost is the first seq lost in damage at the reader's position: the
// one after the last read, or the damaged frame's own first seq when that
// is all that is known.
func (r *Reader) firstLost(knownFirst uint64) uint64 {
	if r.seqKnown() && (knownFirst == 0 || r.lastSeq+1 < knownFirst) {
		return r.lastSeq + 1
	}
	return knownFirst
}

// tornFrom ends the read with a torn tail from start to the end of the file.
func (r *Reader) tornFrom(start int64, reason Reason, knownFirst uint64) {
	r.torn = &CorruptionError{Path: r.path, Offset: start, Length: r.win.size - start, Reason: reason, FirstSeq: r.firstLost(knownFirst), Tail: true}
	r.done = true
}

// vouchedPast reports whether a frame at or after next records a durable
// offset past start: whether the damaged bytes at start had been made
// durable (and acknowledged) before they were damaged. The frames after the
// first damage are indexed once (headers only, hopping by length) so that
// every damage region is answered from a suffix maximum: linear in the file.
func (r *Reader) vouchedPast(start, next int64) (bool, error) {
	if r.ahead == nil {
		if err := r.indexAhead(next); err != nil {
			return false, err
		}
	}
	a := r.ahead
	i := sort.Search(len(a.pos), func(i int) bool { return a.pos[i] >= next })
	return i < len(a.pos) && a.maxDurable[i] > start, nil
}

// aheadIndex holds, for the frame headers from the first damage on, their
// offsets and the largest durable offset recorded at or after each.
type aheadIndex struct {
	pos        []int64
	maxDurable []int64
}

func (r *Reader) indexAhead(from int64) error {
	a := &aheadIndex{}
	var durable []int64
	size := r.win.size
	for pos := from; size-pos >= FrameHeaderSize; {
		b, err := r.win.get(pos, FrameHeaderSize)
		if err != nil {
			return err
		}
		h, reason := ParseFrameHeader(b)
		if reason == "" && h.FileID == r.hdr.FileID && pos+FrameHeaderSize+int64(h.Length) <= size {
			a.pos = append(a.pos, pos)
			durable = append(durable, h.Durable)
			pos += FrameHeaderSize + int64(h.Length)
			continue
		}
		next, err := r.nextMagic(pos + 1)
		if err != nil || next < 0 {
			if err != nil {
				return err
			}
			break
		}
		pos = next
	}
	a.maxDurable = make([]int64, len(durable))
	m := int64(0)
	for i := len(durable) - 1; i >= 0; i-- {
		m = max(m, durable[i])
		a.maxDurable[i] = m
	}
	r.ahead = a
	return nil
}

// nextMagic returns the offset of the next sync word at or after from, or -1.
func (r *Reader) nextMagic(from int64) (int64, error) {
	const chunk = 256 << 10
	size := r.win.size
	for pos := from; size-pos >= int64(len(frameMagic)); {
		n := int(min(chunk, size-pos))
		b, err := r.win.get(pos, n)
		if err != nil {
			return -1, err
		}
		if i := bytes.Index(b, frameMagic[:]); i >= 0 {
			return pos + int64(i), nil
		}
		if n < chunk {
			return -1, nil
		}
		pos += int64(n - len(frameMagic) + 1)
	}
	return -1, nil
}

// resync finds the next offset >= from holding a frame whose header checks,
// belongs to this file, moves the seq forward past minSeq, and whose
// payload checks: a frame that would be read. It returns -1 if there is
// none. Candidates are sync words; the header CRC rejects almost every
// false one, and the file id and seq reject a frame-looking byte string
// copied from this file or another (a frame embedded in a payload).
// Requiring the payload too means a damaged frame is never taken as the end
// of a damaged region: the region runs to a frame that will be read, so a
// torn tail spanning several frames is one torn tail.
//
// Checking payloads costs their length. A crafted file of overlapping
// headers that check but whose payloads do not could make that quadratic,
// so the bytes checked for failed candidates are budgeted (twice the file
// size plus 64 MiB per reader); past the budget a header that checks is
// accepted, and that frame is then reported as damage of its own.
func (r *Reader) resync(from int64, minSeq uint64) (int64, error) {
	size := r.win.size
	for pos := from; ; {
		cand, err := r.nextMagic(pos)
		if err != nil || cand < 0 || size-cand < FrameHeaderSize {
			return -1, err
		}
		hb, err := r.win.get(cand, FrameHeaderSize)
		if err != nil {
			return -1, err
		}
		h, reason := ParseFrameHeader(hb)
		if reason == "" && h.FileID == r.hdr.FileID && h.Seq > minSeq &&
			cand+FrameHeaderSize+int64(h.Length) <= size {
			ok, err := r.payloadChecks(cand, &h)
			if err != nil {
				return -1, err
			}
			if ok {
				return cand, nil
			}
		}
		pos = cand + 1
	}
}

// payloadChecks reports whether the payload of the frame at off matches its
// CRC, within the reader's budget for failed checks.
func (r *Reader) payloadChecks(off int64, h *FrameHeader) (bool, error) {
	if r.resyncSpent > 2*r.win.size+64<<20 {
		return true, nil // budget spent: trust the header
	}
	p, err := r.win.get(off+FrameHeaderSize, h.Length)
	if err != nil {
		return false, err
	}
	if crc32.Checksum(p, castagnoli) == h.DataCRC {
		return true, nil
	}
	r.resyncSpent += int64(h.Length)
	return false, nil
}

func (r *Reader) allZero(from int64) (bool, error) { return r.allZeroRange(from, r.win.size) }

func (r *Reader) allZeroRange(from, to int64) (bool, error) {
	const chunk = 256 << 10
	for pos := from; pos < to; {
		n := int(min(chunk, to-pos))
		b, err := r.win.get(pos, n)
		if err != nil {
			return false, err
		}
		if !allZero(b) {
			return false, nil
		}
		pos += int64(n)
	}
	return true, nil
}

func (r *Reader) fail(err error) {
	r.err = withPath(err, "read %s", r.path)
	r.done = true
}

// window is a read-ahead buffer over an io.ReaderAt of known size: frames
// are small and many, so reading them one ReadAt each would be syscall
// bound.
type window struct {
	src   io.ReaderAt
	size  int64
	ahead int
	buf   []byte
	off   int64
}

const defaultReadAhead = 1 << 20

// get returns n bytes at off; the caller checked off+n <= size. The slice is
// valid until the next call.
func (w *window) get(off int64, n int) ([]byte, error) {
	if off >= w.off && off+int64(n) <= w.off+int64(len(w.buf)) {
		return w.buf[off-w.off : off-w.off+int64(n)], nil
	}
	want := int(min(max(int64(n), int64(w.ahead)), w.size-off))
	if cap(w.buf) < want {
		w.buf = make([]byte, want)
	}
	w.buf = w.buf[:want]
	got, err := w.src.ReadAt(w.buf, off)
	if got < n {
		w.buf, w.off = w.buf[:0], 0
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	w.buf, w.off = w.buf[:got], off
	return w.buf[:n], nil
}
