package projection

import (
	"io"
	"path/filepath"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// state.db keeps no item bodies: paged history, search hits and the
// index's catch-up read them from the rollout by the frame offset the
// items row names. A frame is read whole and checked (header, file id,
// payload CRC) before anything in it is used; one that is not there any
// more (the file was replaced, repaired, or frames lost to a crash and
// written over) is errFrameGone, and the caller repairs the thread's rows.

// errFrameGone is returned when the rollout does not hold the frame a row
// names.
var errFrameGone = errors.New("projection: rollout no longer holds the frame")

// itemAt names an item's shown version: the frame holding it and its seq;
// seq is the item's place.
type itemAt struct {
	seq, lastSeq uint64
	frame        int64
}

// frameSource reads frames of one rollout, plain or compressed.
type frameSource struct {
	path   string
	src    io.ReaderAt
	size   int64
	fileID uint64
	close  func()
	// the last frame decoded: items of one commit share it.
	lastOff  int64
	lastRecs []rollout.Record
}

func (s *Store) openFrames(f rolloutFile) (*frameSource, error) {
	path := filepath.Join(s.opts.Root, filepath.FromSlash(f.rel()))
	src, size, closeFn, err := rollout.OpenRead(s.opts.FS, path)
	if err != nil {
		return nil, err
	}
	fs := &frameSource{path: path, src: src, size: size, close: closeFn, lastOff: -1}
	hb := make([]byte, rollout.FileHeaderSize)
	if _, err := src.ReadAt(hb, 0); err != nil {
		closeFn()
		return nil, errors.Wrapf(errFrameGone, "%s: %v", path, err)
	}
	h, err := rollout.ParseFileHeader(hb)
	if err != nil {
		closeFn()
		return nil, errors.Wrapf(errFrameGone, "%s: %v", path, err)
	}
	fs.fileID = h.FileID
	return fs, nil
}

// records returns the records of the frame at off, checked.
func (fs *frameSource) records(off int64) ([]rollout.Record, error) {
	if off == fs.lastOff {
		return fs.lastRecs, nil
	}
	h, err := rollout.ReadFrameHeader(fs.src, off)
	if err != nil {
		return nil, errors.Wrapf(errFrameGone, "%s at %d: %v", fs.path, off, err)
	}
	if h.FileID != fs.fileID || off+rollout.FrameHeaderSize+int64(h.Length) > fs.size {
		return nil, errors.Wrapf(errFrameGone, "%s at %d", fs.path, off)
	}
	b := make([]byte, rollout.FrameHeaderSize+h.Length)
	if _, err := fs.src.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, errors.Wrapf(err, "read %s", fs.path)
	}
	_, recs, err := rollout.DecodeFrame(b, fs.fileID)
	if err != nil {
		return nil, errors.Wrapf(errFrameGone, "%s at %d: %v", fs.path, off, err)
	}
	fs.lastOff, fs.lastRecs = off, recs
	return recs, nil
}

// item returns the item record of seq in the frame at off.
func (fs *frameSource) item(off int64, seq uint64) (rollout.Item, error) {
	recs, err := fs.records(off)
	if err != nil {
		return rollout.Item{}, err
	}
	if len(recs) == 0 || seq < recs[0].Seq || seq-recs[0].Seq >= uint64(len(recs)) {
		return rollout.Item{}, errors.Wrapf(errFrameGone, "%s at %d: no seq %d", fs.path, off, seq)
	}
	rec := recs[seq-recs[0].Seq]
	if rec.Kind != rollout.KindItemAppended {
		return rollout.Item{}, errors.Wrapf(errFrameGone, "%s at %d: seq %d is %s", fs.path, off, seq, rec.Kind)
	}
	return decodeItemRecord(rec)
}

// maxPrefetch bounds the span of frames readItems reads in one go.
const maxPrefetch = 8 << 20

// prefetch reads the bytes from the frame at first to the end of the
// frame at last in one read, when that span is not too large: the frames
// of a page of history lie close together, and two reads per frame cost
// more than the bytes between them.
func (fs *frameSource) prefetch(first, last int64) {
	if last < first || last-first > maxPrefetch {
		return
	}
	h, err := rollout.ReadFrameHeader(fs.src, last)
	if err != nil {
		return // the frame's own read reports it
	}
	end := min(last+rollout.FrameHeaderSize+int64(h.Length), fs.size)
	if end-first > maxPrefetch || end <= first {
		return
	}
	b := make([]byte, end-first)
	if n, err := fs.src.ReadAt(b, first); err != nil && !(errors.Is(err, io.EOF) && n == len(b)) {
		return
	}
	fs.src = &spanReader{span: b, at: first, ReaderAt: fs.src}
}

// spanReader serves reads inside a span read beforehand from memory, and
// the rest from the file.
type spanReader struct {
	span []byte
	at   int64
	io.ReaderAt
}

func (r *spanReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.at && off+int64(len(p)) <= r.at+int64(len(r.span)) {
		return copy(p, r.span[off-r.at:]), nil
	}
	return r.ReaderAt.ReadAt(p, off)
}

// readItems reads items' shown versions from a rollout, in order.
func (s *Store) readItems(f rolloutFile, want []itemAt) ([]rollout.Item, error) {
	fs, err := s.openFrames(f)
	if err != nil {
		return nil, err
	}
	defer fs.close()
	if len(want) > 1 {
		first, last := want[0].frame, want[0].frame
		for _, w := range want[1:] {
			first, last = min(first, w.frame), max(last, w.frame)
		}
		fs.prefetch(first, last)
	}
	out := make([]rollout.Item, 0, len(want))
	for _, w := range want {
		it, err := fs.item(w.frame, w.lastSeq)
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, nil
}
