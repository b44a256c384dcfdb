package pgindex

import (
	"context"
	"io"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The index keeps no item bodies: paged history, search hits and the
// preview read them from the log through the Source, by the frame offset
// the items row names. A frame is read whole and checked (header, file
// id, payload CRC) before anything in it is used; one the log no longer
// holds there is errFrameGone, and the caller projects the thread again.

// errFrameGone is returned when the log does not hold the frame a row
// names.
var errFrameGone = errors.New("pgindex: the log no longer holds the frame")

// itemAt names an item's shown version: the frame holding it and its seq;
// seq is the item's place.
type itemAt struct {
	seq, lastSeq uint64
	frame        int64
}

func scanItemsAt(rows pgx.Rows) ([]itemAt, error) {
	defer rows.Close()
	var out []itemAt
	for rows.Next() {
		var it itemAt
		var seq, last int64
		if err := rows.Scan(&seq, &last, &it.frame); err != nil {
			return nil, err
		}
		it.seq, it.lastSeq = uint64(seq), uint64(last)
		out = append(out, it)
	}
	return out, rows.Err()
}

// frameSource reads frames of one thread's snapshot.
type frameSource struct {
	path   string
	snap   Snapshot
	fileID uint64
	// the last frame decoded: items of one commit share it.
	lastOff  int64
	lastRecs []rollout.Record
}

func (s *Store) openFrames(ctx context.Context, id string) (*frameSource, error) {
	snap, err := s.src.Read(ctx, id)
	if err != nil {
		return nil, err
	}
	fs := &frameSource{path: s.src.Path(id), snap: snap, lastOff: -1}
	hb := make([]byte, rollout.FileHeaderSize)
	if _, err := snap.ReadAt(hb, 0); err != nil && !errors.Is(err, io.EOF) {
		_ = snap.Close()
		return nil, errors.Wrapf(errFrameGone, "%s: %v", fs.path, err)
	}
	h, err := rollout.ParseFileHeader(hb)
	if err != nil {
		_ = snap.Close()
		return nil, errors.Wrapf(errFrameGone, "%s: %v", fs.path, err)
	}
	fs.fileID = h.FileID
	return fs, nil
}

func (fs *frameSource) close() { _ = fs.snap.Close() }

// records returns the records of the frame at off, checked.
func (fs *frameSource) records(off int64) ([]rollout.Record, error) {
	if off == fs.lastOff {
		return fs.lastRecs, nil
	}
	h, err := rollout.ReadFrameHeader(fs.snap, off)
	if err != nil {
		return nil, errors.Wrapf(errFrameGone, "%s at %d: %v", fs.path, off, err)
	}
	if h.FileID != fs.fileID || off+rollout.FrameHeaderSize+int64(h.Length) > fs.snap.Size() {
		return nil, errors.Wrapf(errFrameGone, "%s at %d", fs.path, off)
	}
	b := make([]byte, rollout.FrameHeaderSize+h.Length)
	if _, err := fs.snap.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, errors.Wrapf(err, "read %s", fs.path)
	}
	_, recs, err := rollout.DecodeFrame(b, fs.fileID)
	if err != nil {
		return nil, errors.Wrapf(errFrameGone, "%s at %d: %v", fs.path, off, err)
	}
	fs.lastOff, fs.lastRecs = off, recs
	return recs, nil
}

// record returns the record of seq in the frame at off.
func (fs *frameSource) record(off int64, seq uint64) (rollout.Record, error) {
	recs, err := fs.records(off)
	if err != nil {
		return rollout.Record{}, err
	}
	if len(recs) == 0 || seq < recs[0].Seq || seq-recs[0].Seq >= uint64(len(recs)) {
		return rollout.Record{}, errors.Wrapf(errFrameGone, "%s at %d: no seq %d", fs.path, off, seq)
	}
	return recs[seq-recs[0].Seq], nil
}

// item returns the item record of seq in the frame at off.
func (fs *frameSource) item(off int64, seq uint64) (rollout.Item, error) {
	rec, err := fs.record(off, seq)
	if err != nil {
		return rollout.Item{}, err
	}
	if rec.Kind != rollout.KindItemAppended {
		return rollout.Item{}, errors.Wrapf(errFrameGone, "%s at %d: seq %d is %s", fs.path, off, seq, rec.Kind)
	}
	return rec.DecodeItem()
}

// readItems reads items' shown versions of a thread, in order.
func (s *Store) readItems(ctx context.Context, id string, want []itemAt) ([]rollout.Item, error) {
	fs, err := s.openFrames(ctx, id)
	if err != nil {
		return nil, err
	}
	defer fs.close()
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

// Turns returns the visible turns from..to (ordinals, 1-based, inclusive)
// with their items: the turns and the items' places from the index, each
// item's shown version read from the log (the frames named, each
// checked). The thread's row is caught up first; if a frame a row names
// is gone, the thread is projected again and the page read again.
func (s *Store) Turns(ctx context.Context, thread string, from, to int64) ([]projection.TurnInfo, error) {
	for attempt := 0; ; attempt++ {
		th, err := s.freshThread(ctx, thread)
		if err != nil {
			return nil, err
		}
		out, err := s.turnsPage(ctx, th, from, to)
		if attempt == 0 && errors.Is(err, errFrameGone) {
			if err := s.reproject(ctx, thread); err != nil {
				return nil, err
			}
			continue
		}
		return out, err
	}
}

func (s *Store) turnsPage(ctx context.Context, th *threadRow, from, to int64) ([]projection.TurnInfo, error) {
	from = max(from, 1)
	if to < from {
		return []projection.TurnInfo{}, nil
	}
	out := []projection.TurnInfo{}
	var spans []*turnRow
	var want []itemAt
	var owner []int
	// One read transaction: the turns and items rows agree.
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+turnCols+` FROM rolloutdb.index_turns WHERE tid = $1 AND ordinal BETWEEN $2 AND $3 ORDER BY ordinal`,
			th.TID, from, to)
		if err != nil {
			return err
		}
		for rows.Next() {
			t, err := scanTurn(rows)
			if err != nil {
				rows.Close()
				return err
			}
			ti := projection.TurnInfo{Ordinal: t.Ordinal, ID: t.ID, Status: t.Status, Model: t.Model, StartedAt: time.Unix(0, t.StartedAt).UTC(),
				Usage: t.Usage, ExactHistory: t.ExactHistory > 0, StartOffset: t.StartOffset, Items: []rollout.Item{}}
			if ti.Status == "" {
				ti.Status = projection.TurnStatusOpen
			}
			if t.EndSeq != 0 {
				e := time.Unix(0, t.EndedAt).UTC()
				ti.EndedAt = &e
			}
			out = append(out, ti)
			spans = append(spans, t)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(spans) == 0 {
			return err
		}
		// One query for the items of every turn on the page: the span from
		// the first turn's instance to the last record of any, each item
		// kept by the turn it belongs to (a rolled-back turn's lie between).
		byInstance := make(map[int64]int, len(spans))
		lo, hi := int64(spans[0].Instance), int64(spans[0].LastSeq)
		for i, t := range spans {
			byInstance[int64(t.Instance)] = i
			lo, hi = min(lo, int64(t.Instance)), max(hi, int64(t.LastSeq))
		}
		irows, err := tx.Query(ctx, `SELECT seq, last_seq, frame, turn FROM rolloutdb.index_items WHERE tid = $1 AND seq BETWEEN $2 AND $3 ORDER BY seq`,
			th.TID, lo, hi)
		if err != nil {
			return err
		}
		defer irows.Close()
		for irows.Next() {
			var it itemAt
			var seq, last, turn int64
			if err := irows.Scan(&seq, &last, &it.frame, &turn); err != nil {
				return err
			}
			i, ok := byInstance[turn]
			if !ok || uint64(seq) < spans[i].Instance || uint64(seq) > spans[i].LastSeq {
				continue
			}
			it.seq, it.lastSeq = uint64(seq), uint64(last)
			want = append(want, it)
			owner = append(owner, i)
		}
		return irows.Err()
	})
	if err != nil {
		return nil, errors.Wrap(err, "pgindex: read turns")
	}
	if len(want) == 0 {
		return out, nil
	}
	items, err := s.readItems(ctx, th.ID, want)
	if err != nil {
		return nil, err
	}
	for k, it := range items {
		out[owner[k]].Items = append(out[owner[k]].Items, it)
	}
	return out, nil
}

// reproject projects a thread again from the start of its frames (its
// rows named a frame the log no longer holds).
func (s *Store) reproject(ctx context.Context, id string) error {
	return s.withSlot(ctx, func() error {
		return s.write(ctx, "project thread "+id+" again", func(t *txn) error {
			rows, err := s.lockRows(ctx, t, []string{id}, []string{projection.LocationActive})
			if err != nil {
				return err
			}
			l := rows[id]
			if !l.exists {
				return s.drop(ctx, t, l.row)
			}
			l.row.FileID = 0 // another file: the catch-up starts from scratch
			_, err = s.catchUp(ctx, t, l.row)
			return ignoreGone(err)
		})
	})
}

// TurnIDs lists a thread's visible turns' ids, oldest first: what Turns
// would list, without reading a frame.
func (s *Store) TurnIDs(ctx context.Context, thread string) ([]string, error) {
	th, err := s.freshThread(ctx, thread)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT turn_id FROM rolloutdb.index_turns WHERE tid = $1 AND ordinal IS NOT NULL ORDER BY ordinal`, th.TID)
	if err != nil {
		return nil, errors.Wrap(err, "pgindex: read turn ids")
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if out == nil {
		out = []string{}
	}
	return out, errors.Wrap(err, "pgindex: read turn ids")
}

// Checkpoints lists a thread's checkpoint records, oldest first.
func (s *Store) Checkpoints(ctx context.Context, thread string) ([]projection.Checkpoint, error) {
	th, err := s.freshThread(ctx, thread)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT seq, frame_offset, checkpoint_id, covered_turn, trigger, tokens_before, tokens_after
		FROM rolloutdb.index_checkpoints WHERE tid = $1 ORDER BY seq`, th.TID)
	if err != nil {
		return nil, errors.Wrap(err, "pgindex: read checkpoints")
	}
	defer rows.Close()
	out := []projection.Checkpoint{}
	for rows.Next() {
		var c projection.Checkpoint
		var seq int64
		if err := rows.Scan(&seq, &c.Offset, &c.ID, &c.CoveredTurn, &c.Trigger, &c.TokensBefore, &c.TokensAfter); err != nil {
			return nil, errors.Wrap(err, "pgindex: read checkpoints")
		}
		c.Seq = uint64(seq)
		out = append(out, c)
	}
	return out, errors.Wrap(rows.Err(), "pgindex: read checkpoints")
}

// ArtifactRefs lists every artifact referenced by a record of any
// thread (rolled back or not), after a full Refresh: what GC must keep.
func (s *Store) ArtifactRefs(ctx context.Context) ([]projection.ArtifactRef, error) {
	if err := s.Refresh(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT thread_id, seq, path, size, sha256 FROM rolloutdb.index_artifact_refs
		WHERE ws = $1 ORDER BY path, thread_id, seq`, s.ws)
	if err != nil {
		return nil, errors.Wrap(err, "pgindex: read artifact refs")
	}
	defer rows.Close()
	out := []projection.ArtifactRef{}
	for rows.Next() {
		var a projection.ArtifactRef
		var seq int64
		if err := rows.Scan(&a.Thread, &seq, &a.Path, &a.Size, &a.SHA256); err != nil {
			return nil, errors.Wrap(err, "pgindex: read artifact refs")
		}
		a.Seq = uint64(seq)
		out = append(out, a)
	}
	return out, errors.Wrap(rows.Err(), "pgindex: read artifact refs")
}

// Refresh makes every row agree with the log: rows for threads that have
// none, rows behind their frames caught up, rows whose thread is gone
// dropped. It compares every row (one query over the workspace); List
// and Search look only at what the change log and their own rows name.
func (s *Store) Refresh(ctx context.Context) error {
	if err := s.Settle(ctx); err != nil {
		return err
	}
	if err := s.reconcile(ctx, true); err != nil {
		return err
	}
	rows, err := s.pool.Query(ctx, `SELECT p.id FROM rolloutdb.index_threads p`+tailJoin+`
		WHERE p.ws = $1 AND (ft.tid IS NULL OR p.file_id = 0 OR p.location <> ft.location OR p.file_id <> ft.file_id OR p.file_size <> coalesce(e.end_, 128))`, s.ws)
	if err != nil {
		return errors.Wrap(err, "pgindex: compare the rows with the log")
	}
	stale, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return errors.Wrap(err, "pgindex: compare the rows with the log")
	}
	for _, id := range stale {
		if err := s.repairThread(ctx, id); err != nil {
			return err
		}
	}
	return nil
}
