package fleet

import (
	"bytes"
	"context"
	"io"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// ErrDiverged is returned by Push for a thread whose copy in the fleet is
// not a prefix of the local rollout, nor the local rollout a prefix of it:
// the two were written apart. Nothing is changed.
var ErrDiverged = errors.New("fleet: thread diverged from the local rollout")

// PushResult says what Push did with one thread.
type PushResult struct {
	Created bool  `json:"created,omitempty"` // the fleet had no such thread
	Frames  int   `json:"frames"`            // frames copied
	Bytes   int64 `json:"bytes"`             // of frames copied
	// Ahead: the fleet's copy goes on past the local rollout (the thread
	// was appended to in the fleet since); nothing was copied.
	Ahead bool `json:"ahead,omitempty"`
}

// pushBatch bounds the frame bytes of one insert.
const pushBatch = 4 << 20

// Push copies a local rollout (src, size bytes, as rollout.OpenRead gives
// it) into the fleet as thread id at loc, byte for byte, its file header
// too, so that the thread keeps its file id. It is idempotent and
// incremental: a thread the fleet has as a prefix of the rollout gets the
// frames it lacks, one it has whole (or longer) gets nothing. A copy that
// differs is refused with ErrDiverged, a thread a live host owns with an
// *OwnerError. The rollout is copied up to its last whole frame (a torn
// tail is left); damage before that refuses the push, naming the offset.
// All of one thread is copied in one transaction.
func (l *Log) Push(ctx context.Context, id, loc string, src io.ReaderAt, size int64) (PushResult, error) {
	var res PushResult
	hb := make([]byte, rollout.FileHeaderSize)
	if _, err := src.ReadAt(hb, 0); err != nil && !(err == io.EOF && size >= rollout.FileHeaderSize) {
		return res, errors.Wrapf(err, "push %s: read the file header", id)
	}
	hdr, err := rollout.ParseFileHeader(hb)
	if err != nil {
		return res, errors.Wrapf(err, "push %s", id)
	}
	if hdr.ThreadID != id {
		return res, errors.Wrapf(rollout.ErrThreadMismatch, "push %s: the rollout's header names thread %s", id, hdr.ThreadID)
	}
	err = pgx.BeginTxFunc(ctx, l.pool, readCommitted, func(tx pgx.Tx) error {
		res = PushResult{}
		var tid, fileID int64
		var owner *string
		var ownerInc *int64
		var epoch int64
		var header []byte
		from := int64(rollout.FileHeaderSize)
		err := tx.QueryRow(ctx, `SELECT tid, file_id, header, owner, owner_inc, epoch FROM rolloutdb.threads WHERE ws = $1 AND id = $2 FOR UPDATE`,
			l.ws, id).Scan(&tid, &fileID, &header, &owner, &ownerInc, &epoch)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			res.Created = true
			if err := tx.QueryRow(ctx, `INSERT INTO rolloutdb.threads (ws, id, location, file_id, header, epoch)
				VALUES ($1, $2, $3, $4, $5, 1) RETURNING tid`, l.ws, id, loc, int64(hdr.FileID), hb).Scan(&tid); err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			oe, err := l.ownerOf(ctx, tx, id, owner, ownerInc, epoch, nil)
			if err != nil {
				return err
			}
			if oe != nil {
				return errors.WithHint(oe, "a fleet host has this thread open; push it once the host closes it")
			}
			if uint64(fileID) != hdr.FileID || !bytes.Equal(header, hb) {
				return errors.Wrapf(ErrDiverged, "push %s: the fleet's thread is another file (file id %x, local %x)", id, uint64(fileID), hdr.FileID)
			}
			end, _, last, err := tail(ctx, tx, tid, l.Path(id))
			if err != nil {
				return err
			}
			if last >= 0 {
				// The fleet's last frame must be the rollout's, at the
				// same place (or the rollout a prefix of the fleet's).
				var data []byte
				if err := tx.QueryRow(ctx, `SELECT data FROM rolloutdb.frames WHERE tid = $1 AND off = $2`, tid, last).Scan(&data); err != nil {
					return err
				}
				if end > size {
					res.Ahead = true
					return l.checkPrefix(ctx, tx, id, tid, src, size)
				}
				local := make([]byte, len(data))
				if _, err := src.ReadAt(local, last); err != nil && err != io.EOF {
					return errors.Wrapf(err, "push %s: read at %d", id, last)
				}
				if !bytes.Equal(local, data) {
					return errors.Wrapf(ErrDiverged, "push %s: the frame at %d differs", id, last)
				}
			}
			from = end
			if _, err := tx.Exec(ctx, `UPDATE rolloutdb.threads SET location = $2 WHERE tid = $1`, tid, loc); err != nil {
				return err
			}
		}
		n, b, err := copyFrames(ctx, tx, tid, hdr.FileID, src, size, from, l.Path(id))
		res.Frames, res.Bytes = n, b
		return err
	})
	if err != nil {
		var oe *OwnerError
		var ce *rollout.CorruptionError
		if errors.As(err, &oe) || errors.Is(err, ErrDiverged) || errors.As(err, &ce) {
			return PushResult{}, err
		}
		return PushResult{}, classify(err, "push thread "+id)
	}
	return res, nil
}

// checkPrefix checks that every frame of the local rollout is the fleet's
// at the same offset (the fleet's copy went on past it).
func (l *Log) checkPrefix(ctx context.Context, tx pgx.Tx, id string, tid int64, src io.ReaderAt, size int64) error {
	rows, err := tx.Query(ctx, `SELECT off, data FROM rolloutdb.frames WHERE tid = $1 AND off < $2 ORDER BY off`, tid, size)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var off int64
		var data []byte
		if err := rows.Scan(&off, &data); err != nil {
			return err
		}
		local := make([]byte, len(data))
		if n, _ := src.ReadAt(local, off); n < len(local) {
			return nil // the rollout's torn tail: what it holds whole agrees
		}
		if !bytes.Equal(local, data) {
			return errors.Wrapf(ErrDiverged, "push %s: the frame at %d differs", id, off)
		}
	}
	return rows.Err()
}

// copyFrames inserts the rollout's whole frames from offset from on,
// checking each (rollout.DecodeFrame), a batch at a time.
func copyFrames(ctx context.Context, tx pgx.Tx, tid int64, fileID uint64, src io.ReaderAt, size, from int64, path string) (int, int64, error) {
	var offs, seqs []int64
	var data [][]byte
	batch, frames, total := 0, 0, int64(0)
	flush := func() error {
		if len(offs) == 0 {
			return nil
		}
		_, err := tx.Exec(ctx, `INSERT INTO rolloutdb.frames (tid, off, seq, epoch, data)
			SELECT $1, f.off, f.seq, 1, f.data FROM unnest($2::bigint[], $3::bigint[], $4::bytea[]) AS f(off, seq, data)`,
			tid, offs, seqs, data)
		offs, seqs, data, batch = offs[:0], seqs[:0], data[:0], 0
		return err
	}
	for off := from; off+rollout.FrameHeaderSize <= size; {
		h, err := rollout.ReadFrameHeader(src, off)
		if err != nil {
			var ce *rollout.CorruptionError
			if errors.As(err, &ce) && (ce.Reason == rollout.ReasonZeros || ce.Reason == rollout.ReasonTruncated) {
				break // a torn or unwritten tail: the whole frames are copied
			}
			return 0, 0, errors.Wrapf(err, "push %s at %d", path, off)
		}
		n := int64(rollout.FrameHeaderSize + h.Length)
		if off+n > size {
			break // torn
		}
		b := make([]byte, n)
		if _, err := src.ReadAt(b, off); err != nil && err != io.EOF {
			return 0, 0, errors.Wrapf(err, "push %s: read at %d", path, off)
		}
		if _, _, err := rollout.DecodeFrame(b, fileID); err != nil {
			return 0, 0, errors.Wrapf(err, "push %s: frame at %d", path, off)
		}
		offs, seqs, data = append(offs, off), append(seqs, int64(h.Seq)), append(data, b)
		batch += len(b)
		frames++
		total += n
		off += n
		if batch >= pushBatch {
			if err := flush(); err != nil {
				return 0, 0, err
			}
		}
	}
	return frames, total, flush()
}

// List returns the ids of the workspace's threads at loc, sorted.
func (l *Log) List(ctx context.Context, loc string) ([]string, error) {
	rows, err := l.pool.Query(ctx, `SELECT id FROM rolloutdb.threads WHERE ws = $1 AND location = $2 ORDER BY id`, l.ws, loc)
	if err != nil {
		return nil, classify(err, "list threads")
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, classify(err, "list threads")
}
