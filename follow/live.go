package follow

import (
	"io"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// ErrRolloutReplaced ends a follower whose rollout no longer holds, where
// it was, the last frame the follower read (a repair rewrote it, the
// thread was deleted and created again, or a failed write was cut back).
// Follow again with AfterSeq at the last seq seen.
var ErrRolloutReplaced = errors.New("follow: rollout replaced under the follower")

// followBatch bounds the records a read takes at once (a follower far
// behind reads in steps, and holds no more than this ahead of its client).
const followBatch = 1024

// readAhead is what a read asks the file for at a time.
const readAhead = 64 << 10

// liveReader reads the durable frames of one rollout as it grows, in the
// shape of Prometheus' wlog.LiveReader: read returns the frames that can be
// yielded now, and the next call goes on from where it stopped.
type liveReader struct {
	id     string      // the thread, for errors
	path   string      // where the rollout was opened
	src    io.ReaderAt // the open rollout (nil: none)
	file   vfs.File    // src, for a plain rollout (nil: a cold one's bytes)
	size   int64       // a cold rollout's size
	fileID uint64      // the rollout's file id (0: not known yet)
	off    int64       // the next frame to read
	last   rollout.Anchor
}

// open opens the rollout at path (cold: compressed, read whole) and checks
// that it is the one read so far: its file id, and the last frame read
// where it was. A reader that has not started takes whatever rollout is
// there. A rollout gone between the look and the open, or not whole, is
// reported by notThere.
func (r *liveReader) open(fsys vfs.FS, path string, cold bool) error {
	r.close()
	if cold {
		src, size, err := rollout.OpenCold(fsys, path)
		if err != nil {
			return err
		}
		r.src, r.size = src, size
	} else {
		f, err := fsys.Open(path)
		if err != nil {
			return err
		}
		r.src, r.file = f, f
	}
	r.path = path
	b := make([]byte, rollout.FileHeaderSize)
	if n, err := r.src.ReadAt(b, 0); n < len(b) {
		if err != nil && err != io.EOF {
			return r.failOpen(errors.Wrapf(err, "follow %s: read %s", r.id, path))
		}
		// Shorter than its header: rewritten in place under the reader
		// (rollouts are created whole under another name).
		if r.started() {
			return r.failOpen(r.replaced("it is shorter than its header"))
		}
		return r.failOpen(errors.Wrapf(errIncomplete, "follow %s: %s", r.id, path))
	}
	h, err := rollout.ParseFileHeader(b)
	if err != nil {
		return r.failOpen(errors.Wrapf(err, "follow %s: %s", r.id, path))
	}
	if r.fileID != 0 && r.fileID != h.FileID && r.started() {
		return r.failOpen(r.replaced("it is another file"))
	}
	r.fileID = h.FileID
	if r.last.Offset == 0 {
		return nil
	}
	fh, err := rollout.ReadFrameHeader(r.src, r.last.Offset)
	var ce *rollout.CorruptionError
	if err != nil && !errors.As(err, &ce) {
		return r.failOpen(err) // an I/O error, not another file
	}
	if err != nil || fh.FileID != r.fileID || fh.Seq != r.last.Seq || fh.DataCRC != r.last.DataCRC ||
		r.last.Offset+rollout.FrameHeaderSize+int64(fh.Length) != r.off {
		return r.failOpen(r.replaced("the frame at %d is not the one read", r.last.Offset))
	}
	return nil
}

// errIncomplete: the file at the rollout's path is shorter than a file
// header. Like a rollout not found there, it is looked at again at the
// next change.
var errIncomplete = errors.New("follow: rollout shorter than its header")

// notThere reports whether open found no rollout to read: gone, or not
// whole yet.
func notThere(err error) bool { return vfs.IsNotExist(err) || errors.Is(err, errIncomplete) }

// started reports whether the reader's position is of a file it read: a
// frame read, or a start past the first frame. One that has not started
// takes whatever rollout is there.
func (r *liveReader) started() bool {
	return r.last.Offset != 0 || r.off != rollout.FileHeaderSize
}

func (r *liveReader) failOpen(err error) error {
	r.close()
	return err
}

func (r *liveReader) replaced(format string, args ...any) error {
	return errors.WithHint(errors.Wrapf(ErrRolloutReplaced, "follow %s: "+format, append([]any{r.id}, args...)...),
		"follow again with AfterSeq set to the last seq seen")
}

func (r *liveReader) close() {
	if r.file != nil {
		_ = r.file.Close()
	}
	r.src, r.file, r.size = nil, nil, 0
}

// length returns the rollout's size now.
func (r *liveReader) length() (int64, error) {
	if r.file == nil {
		return r.size, nil
	}
	size, err := r.file.Size()
	if err != nil {
		return 0, errors.Wrapf(err, "follow %s: %s", r.id, r.path)
	}
	if size < r.off {
		return 0, r.replaced("the rollout is %d bytes, shorter than the frame it was followed from (%d)", size, r.off)
	}
	return size, nil
}

// read reads whole frames from r.off up to size, about limit records at
// most, and returns those known durable: every frame ending at or before
// known, and every frame before a later frame whose header records a
// durable offset past its end. It stops at the first frame that is
// neither. pending reports that a whole frame follows that is not known
// durable; more, that the read stopped at limit with frames after.
//
// A torn tail, or a frame still being written, is never returned: only
// whole frames that pass their checks are (rollout.Reader's rules).
// Damaged regions are skipped, and listed with the frame after them.
func (r *liveReader) read(size, known int64, limit int) (frames []Frame, pending, more bool, err error) {
	if size <= r.off {
		return nil, false, false, nil
	}
	rd, err := rollout.NewReader(r.src, size, rollout.ReaderOptions{Path: r.path, StartOffset: r.off, ReadAhead: readAhead})
	if err != nil {
		return nil, false, false, errors.Wrapf(err, "follow %s", r.id)
	}
	if r.fileID != 0 && rd.Header().FileID != r.fileID {
		return nil, false, false, r.replaced("it is another file")
	}
	var read []Frame
	var durables []int64 // each read frame's durable offset
	n, seen := 0, 0
	for rd.Next() {
		rec, h := rd.Record(), rd.FrameHeader()
		if k := len(read); k == 0 || read[k-1].Offset != rd.FrameOffset() {
			if n >= limit {
				more = true
				break
			}
			var damage []*rollout.CorruptionError
			if d := rd.Damage(); len(d) > seen {
				damage, seen = d[seen:len(d):len(d)], len(d)
			}
			off := rd.FrameOffset()
			read = append(read, Frame{FileID: h.FileID, Offset: off, End: off + rollout.FrameHeaderSize + int64(h.Length), DataCRC: h.DataCRC, Damage: damage})
			durables = append(durables, h.Durable)
		}
		read[len(read)-1].Records = append(read[len(read)-1].Records, rec)
		n++
	}
	if err := rd.Err(); err != nil {
		return nil, false, false, errors.Wrapf(err, "follow %s", r.id)
	}
	// Frame i is durable if it ends at or before known, or before the
	// durable offset of a frame after it: the durable frames are a prefix.
	cover, keep := known, 0
	for i := len(read) - 1; i >= 0; i-- {
		if read[i].End <= cover {
			keep = i + 1
			break
		}
		cover = max(cover, durables[i])
	}
	frames, pending = read[:keep:keep], keep < len(read)
	if keep > 0 {
		last := &frames[keep-1]
		r.off, r.last, r.fileID = last.End, last.anchor(), last.FileID
	} else {
		r.fileID = rd.Header().FileID
	}
	return frames, pending, more, nil
}

// advance moves the reader past frames taken from the stream (read by
// another reader of this file).
func (r *liveReader) advance(frames []Frame) {
	last := &frames[len(frames)-1]
	r.off, r.last, r.fileID = last.End, last.anchor(), last.FileID
}
