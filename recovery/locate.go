package recovery

import (
	"io"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// A state resumed with Options.Locate says where its items and exact
// histories are instead of holding them; a Locator reads them back from
// the same rollout, a turn at a time, so that a reader streams a thread's
// state in memory that does not grow with it. The rollout must be the one
// Resume read, through the same open file: appends, and a torn tail cut
// after, leave the frames it located where they were.

// Loc is where a record is: its frame's offset and its seq.
type Loc struct {
	Offset int64
	Seq    uint64
}

// Locator reads the records a located State points at. It keeps the last
// frame it decoded: a turn's records are in one frame, or a few.
type Locator struct {
	src    io.ReaderAt
	size   int64
	fileID uint64
	path   string
	off    int64 // the frame recs came from (-1: none)
	recs   []rollout.Record
}

// NewLocator reads the rollout's file header, in src of size bytes; path
// names it in errors.
func NewLocator(src io.ReaderAt, size int64, path string) (*Locator, error) {
	r, err := rollout.NewReader(src, size, rollout.ReaderOptions{Path: path})
	if err != nil {
		return nil, err
	}
	return &Locator{src: src, size: size, fileID: r.Header().FileID, path: path, off: -1}, nil
}

// Record returns the record at at, its frame checked as the reader checks
// it.
func (l *Locator) Record(at Loc) (rollout.Record, error) {
	if at.Offset != l.off {
		h, err := rollout.ReadFrameHeader(l.src, at.Offset)
		if err != nil {
			return rollout.Record{}, errors.Wrapf(err, "%s: frame at %d", l.path, at.Offset)
		}
		n := int64(rollout.FrameHeaderSize) + int64(h.Length) // bounded by the header's checks
		if at.Offset+n > l.size {
			return rollout.Record{}, errors.Newf("%s: frame at %d runs past the end of the file", l.path, at.Offset)
		}
		b := make([]byte, n)
		if m, err := l.src.ReadAt(b, at.Offset); m < len(b) {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the file is shorter than when it was resumed
			}
			return rollout.Record{}, errors.Wrapf(err, "%s: read frame at %d", l.path, at.Offset)
		}
		_, recs, err := rollout.DecodeFrame(b, l.fileID)
		if err != nil {
			return rollout.Record{}, errors.Wrapf(err, "%s: frame at %d", l.path, at.Offset)
		}
		l.off, l.recs = at.Offset, recs
	}
	for _, r := range l.recs {
		if r.Seq == at.Seq {
			return r, nil
		}
	}
	return rollout.Record{}, errors.Newf("%s: the frame at %d holds no seq %d (the file changed since it was resumed)", l.path, at.Offset, at.Seq)
}

// Items returns a located turn's items (nil if none, as Resume leaves
// them).
func (l *Locator) Items(t *Turn) ([]rollout.Item, error) {
	if len(t.ItemAt) == 0 {
		return nil, nil
	}
	items := make([]rollout.Item, len(t.ItemAt))
	for i, at := range t.ItemAt {
		rec, err := l.Record(at)
		if err != nil {
			return nil, err
		}
		if items[i], err = rec.DecodeItem(); err != nil {
			return nil, errors.Wrapf(err, "%s: item at %d", l.path, at.Offset)
		}
	}
	return items, nil
}

// History returns a located turn's model contribution, as Resume makes it:
// its exact history, or its items through b (nil: DefaultHistory).
func (l *Locator) History(t *Turn, b HistoryBuilder) ([][]byte, error) {
	if t.HistorySource == HistoryExact {
		var out [][]byte
		for _, at := range t.HistoryAt {
			rec, err := l.Record(at)
			if err != nil {
				return nil, err
			}
			var mh rollout.ModelHistory
			if err := rec.Decode(&mh); err != nil {
				return nil, errors.Wrapf(err, "%s: model history at %d", l.path, at.Offset)
			}
			out = append(out, mh.Messages...)
		}
		return out, nil
	}
	items, err := l.Items(t)
	if err != nil {
		return nil, err
	}
	if b == nil {
		b = DefaultHistory
	}
	return b(t.ID, items), nil
}

// ModelHistory hands fn, a message at a time, the model history Resume
// assembles without Locate: the checkpoint's replacement history, then each
// later turn's contribution (b as in History).
func (l *Locator) ModelHistory(st *State, b HistoryBuilder, fn func(msg []byte) error) error {
	if c := st.Report.Checkpoint; c != nil {
		rec, err := l.Record(Loc{Offset: c.Offset, Seq: c.Seq})
		if err != nil {
			return err
		}
		var cp rollout.Checkpoint
		if err := rec.Decode(&cp); err != nil {
			return errors.Wrapf(err, "%s: checkpoint at %d", l.path, c.Offset)
		}
		for _, m := range cp.ReplacementHistory {
			if err := fn(m); err != nil {
				return err
			}
		}
	}
	for _, t := range st.Turns[st.historyFrom:] {
		h, err := l.History(t, b)
		if err != nil {
			return err
		}
		for _, m := range h {
			if err := fn(m); err != nil {
				return err
			}
		}
	}
	return nil
}
