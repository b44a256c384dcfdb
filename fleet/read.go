package fleet

import (
	"context"
	"io"
	"sort"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// A Snapshot is a thread's records as its rollout's bytes (file header,
// then frames), as of Read: an io.ReaderAt of Size bytes that
// rollout.NewReader and package recovery read like a file. Frames are
// loaded as they are read, a window at a time, so a reader that starts at
// a checkpoint's offset loads only the checkpoint and what follows.
type Snapshot struct {
	ctx      context.Context
	l        *Log
	tid      int64
	header   []byte
	size     int64
	location string

	mu     sync.Mutex
	window []frameRow // consecutive frames, by offset
}

type frameRow struct {
	off  int64
	data []byte
}

// windowFrames is how many frames one load brings; windowBytes bounds it.
const (
	windowFrames = 256
	windowBytes  = 4 << 20
)

// Read opens a thread's records for reading, wherever it is (an error
// matching fs.ErrNotExist if nowhere). ctx bounds the snapshot's reads.
func (l *Log) Read(ctx context.Context, id string) (*Snapshot, error) {
	if err := rollout.ValidateThreadID(id); err != nil {
		return nil, err
	}
	s := &Snapshot{ctx: ctx, l: l}
	err := pgx.BeginTxFunc(ctx, l.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT tid, header, location FROM rolloutdb.threads WHERE ws = $1 AND id = $2`, l.ws, id).
			Scan(&s.tid, &s.header, &s.location)
		if errors.Is(err, pgx.ErrNoRows) {
			return notExist(id, "any location")
		}
		if err != nil {
			return err
		}
		s.size, _, _, err = tail(ctx, tx, s.tid, l.Path(id))
		return err
	})
	if err != nil {
		if errors.Is(err, errNotExist) {
			return nil, err
		}
		var ce *rollout.CorruptionError
		if errors.As(err, &ce) {
			return nil, err
		}
		return nil, classify(err, "read thread "+id)
	}
	return s, nil
}

// Size returns the snapshot's length in bytes.
func (s *Snapshot) Size() int64 { return s.size }

// Location returns where the thread was when read.
func (s *Snapshot) Location() string { return s.location }

// Close lets the snapshot go.
func (s *Snapshot) Close() error { return nil }

// ReadAt reads the snapshot's bytes at off.
func (s *Snapshot) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("fleet: negative offset")
	}
	n := 0
	for n < len(p) {
		at := off + int64(n)
		if at >= s.size {
			return n, io.EOF
		}
		if at < int64(len(s.header)) {
			n += copy(p[n:], s.header[at:])
			continue
		}
		f, err := s.frameAt(at)
		if err != nil {
			return n, err
		}
		n += copy(p[n:], f.data[at-f.off:])
	}
	return n, nil
}

// frameAt returns the frame holding byte at, loading a window of frames
// from it when the one held does not have it.
func (s *Snapshot) frameAt(at int64) (frameRow, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := find(s.window, at); ok {
		return f, nil
	}
	rows, err := s.l.pool.Query(s.ctx, `SELECT off, data FROM rolloutdb.frames
		WHERE tid = $1 AND off >= coalesce((SELECT max(off) FROM rolloutdb.frames WHERE tid = $1 AND off <= $2), 0) AND off < $3
		ORDER BY off LIMIT $4`, s.tid, at, s.size, windowFrames)
	if err != nil {
		return frameRow{}, classify(err, "read frames")
	}
	defer rows.Close()
	s.window = s.window[:0]
	size := 0
	for rows.Next() {
		var f frameRow
		if err := rows.Scan(&f.off, &f.data); err != nil {
			return frameRow{}, classify(err, "read frames")
		}
		if len(s.window) > 0 {
			if last := s.window[len(s.window)-1]; last.off+int64(len(last.data)) != f.off {
				// A hole: the frames read stop here, so a reader finds
				// the damage where it is.
				break
			}
		}
		s.window = append(s.window, f)
		if size += len(f.data); size >= windowBytes {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return frameRow{}, classify(err, "read frames")
	}
	if f, ok := find(s.window, at); ok {
		return f, nil
	}
	// No frame holds the byte: the thread's frames have a hole there.
	return frameRow{}, &rollout.CorruptionError{Offset: at, Reason: rollout.ReasonTruncated}
}

func find(w []frameRow, at int64) (frameRow, bool) {
	i := sort.Search(len(w), func(i int) bool { return w[i].off+int64(len(w[i].data)) > at })
	if i < len(w) && w[i].off <= at {
		return w[i], true
	}
	return frameRow{}, false
}
