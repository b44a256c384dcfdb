package pgindex

import (
	"context"
	"io/fs"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// Concurrency. Every writer of a thread's rows (this host's applier,
// any host's catch-up for a read, a rebuild, Forget) first locks the
// thread's index_threads row (FOR UPDATE, in the transaction that writes
// the rest), and brings the rows forward only from the state it finds
// under the lock: a frame at or below the projected offset was applied
// by someone else, and is passed over; a frame past it that does not
// follow it sends the thread to the log. So a host applying its own
// thread's frames and another host catching the same thread up for a
// read serialize on the row, and whichever comes second finds the work
// done. Transactions that lock several rows lock them in thread id
// order; a deadlock with another order (there is none by design) is
// retried.

// locked is a thread's row as locked, with what the fleet's tables say
// of the thread: whether it exists and where, and the header of the frame
// at the row's anchor (nil if there is none there), to check that the
// log still holds what the row applied.
type locked struct {
	row      *threadRow
	exists   bool
	location string
	fileID   uint64
	anchor   []byte
}

// anchored reports whether the log still holds, where it was, the last
// frame the row applied, ending at the projected offset (projection's
// anchored, on the frame's header as the fleet keeps it).
func (l *locked) anchored() bool {
	th := l.row
	if th.AnchorOffset < rollout.FileHeaderSize || len(l.anchor) < rollout.FrameHeaderSize {
		return false
	}
	h, reason := rollout.ParseFrameHeader(l.anchor)
	return reason == "" && h.FileID == th.FileID && h.Seq == th.AnchorSeq && h.DataCRC == th.AnchorCRC &&
		th.AnchorOffset+rollout.FrameHeaderSize+int64(h.Length) == th.ProjectedOffset
}

const qLockRows = `SELECT ` + "%s" + `, ft.tid IS NOT NULL, coalesce(ft.location, ''), coalesce(ft.file_id, 0), a.hdr
	FROM rolloutdb.index_threads t
	LEFT JOIN rolloutdb.threads ft ON ft.ws = t.ws AND ft.id = t.id
	LEFT JOIN LATERAL (SELECT substr(f.data, 1, 48) AS hdr FROM rolloutdb.frames f
		WHERE f.tid = ft.tid AND f.off = t.anchor_offset) a ON true
	WHERE t.ws = $1 AND t.id = ANY($2)
	ORDER BY t.id FOR UPDATE OF t`

// lockRows locks the rows of threads ids (inserting empty ones, at locs,
// for threads that have none, so that there is a row to lock) and returns
// them with the fleet's view of each.
func (s *Store) lockRows(ctx context.Context, t *txn, ids, locs []string) (map[string]*locked, error) {
	out := make(map[string]*locked, len(ids))
	q := sprintfCols(qLockRows)
	read := func(ids []string) error {
		rows, err := t.Query(ctx, q, s.ws, ids)
		if err != nil {
			return errors.Wrap(err, "lock thread rows")
		}
		defer rows.Close()
		for rows.Next() {
			l := &locked{row: &threadRow{}}
			dest, done := threadDest(l.row)
			var fileID int64
			dest = append(dest, &l.exists, &l.location, &fileID, &l.anchor)
			if err := rows.Scan(dest...); err != nil {
				return errors.Wrap(err, "lock thread rows")
			}
			done()
			l.fileID = uint64(fileID)
			out[l.row.ID] = l
		}
		return errors.Wrap(rows.Err(), "lock thread rows")
	}
	if err := read(ids); err != nil {
		return nil, err
	}
	var missing, mlocs []string
	for i, id := range ids {
		if out[id] == nil {
			missing, mlocs = append(missing, id), append(mlocs, locs[i])
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	paths := make([]string, len(missing))
	for i, id := range missing {
		paths[i] = s.src.Path(id)
	}
	if _, err := t.Exec(ctx, `INSERT INTO rolloutdb.index_threads (ws, id, location, rollout_path)
		SELECT $1, u.id, u.loc, u.path FROM unnest($2::text[], $3::text[], $4::text[]) AS u(id, loc, path)
		ON CONFLICT (ws, id) DO NOTHING`, s.ws, missing, mlocs, paths); err != nil {
		return nil, errors.Wrap(err, "make thread rows")
	}
	return out, read(missing)
}

func sprintfCols(q string) string { return strings.Replace(q, "%s", prefixCols("t.", threadCols), 1) }

// ignoreGone drops errGone: the rows of a thread the log no longer has
// were dropped, and the transaction goes on.
func ignoreGone(err error) error {
	if errors.Is(err, errGone) {
		return nil
	}
	return err
}

// applyThread applies one thread's queued frames while they continue its
// row exactly; anything else (a row not made yet or elsewhere, an
// overflowed queue, a frame that does not follow the last applied, a row
// whose anchor the log no longer holds) is caught up from the Source.
// Frames of one thread arrive in frame order, so a gap is never a frame
// still on its way: another host wrote it, and only the log has it.
func (s *Store) applyThread(ctx context.Context, t *txn, l *locked, pt *pendingThread) error {
	if !l.exists {
		// Deleted since it was published.
		return s.drop(ctx, t, l.row)
	}
	if pt.catchUp {
		_, err := s.catchUp(ctx, t, l.row)
		return ignoreGone(err)
	}
	bs := pt.batches
	th, was := l.row, l.row.clone()
	c := s.take(th.ID, th.Rev)
	if c != nil {
		th = c.row // the row as this store committed it: no need to check its anchor
	}
	made := th.made()
	if made && c == nil && th.Location == pt.loc && !l.anchored() {
		made = false // frames it applied are gone from the log
	}
	if !made && created(bs[0]) {
		// A thread this host made: its first frame is all it holds.
		b := &pgx.Batch{}
		queueDeleteRows(b, s.ws, th.TID, th.ID, true)
		if err := sendBatch(ctx, t, b); err != nil {
			return err
		}
		fresh := &threadRow{TID: th.TID, ID: th.ID, Location: pt.loc, Path: s.src.Path(th.ID), FileID: bs[0].FileID,
			ProjectedOffset: rollout.FileHeaderSize, FileSize: rollout.FileHeaderSize}
		return s.applyBatches(ctx, t, fresh, nil, bs, true, nil)
	}
	if !made || th.Location != pt.loc || th.FileID != l.fileID {
		_, err := s.catchUp(ctx, t, th)
		return ignoreGone(err)
	}
	return s.applyBatches(ctx, t, th, was, bs, false, c)
}

// created reports whether b is the header frame of a thread, given with
// its file id.
func created(b projection.Batch) bool {
	return b.FileID != 0 && b.Offset == rollout.FileHeaderSize && len(b.Records) > 0 &&
		b.Records[0].Seq == 1 && b.Records[0].Kind == rollout.KindThreadOpened
}

// applyBatches applies acknowledged frames that continue th (fresh: a row
// made for a new thread), catching up from the Source at a gap.
func (s *Store) applyBatches(ctx context.Context, t *txn, th, was *threadRow, bs []projection.Batch, fresh bool, c *cachedRow) error {
	a := s.newApplier(ctx, t, th, was, fresh)
	a.acked = true
	if c != nil && c.turn != nil {
		a.turns[c.turn.ID], a.items[c.turn.Instance] = c.turn, c.slots
	}
	for _, b := range bs {
		switch {
		case b.End <= th.ProjectedOffset:
			continue // a catch-up got there first (the anchor vouches for it)
		case b.Offset != th.ProjectedOffset || b.Records[0].Seq != th.ProjectedSeq+1:
			if err := a.finish(); err != nil {
				return err
			}
			_, err := s.catchUp(ctx, t, th)
			return ignoreGone(err)
		}
		for _, rec := range b.Records {
			if err := a.record(b.Offset, rec); err != nil {
				return err
			}
		}
		if th.FileSize == th.ProjectedOffset {
			th.FileSize = b.End // the log ended where the projection did
		}
		th.ProjectedOffset = b.End
		th.AnchorOffset, th.AnchorSeq, th.AnchorCRC = b.Offset, b.Records[0].Seq, b.DataCRC
	}
	return a.finish()
}

// drop removes a thread's rows (its log has no such thread any more).
func (s *Store) drop(ctx context.Context, t *txn, th *threadRow) error {
	b := &pgx.Batch{}
	queueDeleteRows(b, s.ws, th.TID, th.ID, false)
	delete(t.staged, th.ID)
	t.dropped = append(t.dropped, th.ID)
	return sendBatch(ctx, t, b)
}

// errGone says a catch-up found no such thread in the log: its rows were
// dropped.
var errGone = errors.Mark(errors.New("pgindex: no such thread in the log"), fs.ErrNotExist)

// catchUp brings a locked row up to the thread's frames in the log, in t.
// It reads only what follows the projected offset (from the last frame
// applied, the anchor, which must still be there) unless the thread is
// not the one projected (another file id, shorter than the projection,
// or the anchor gone), in which case the thread is projected again from
// the start. A thread the log does not have is dropped (errGone is
// returned only to say so: the transaction may commit). It returns the
// number of records applied.
func (s *Store) catchUp(ctx context.Context, t *txn, th *threadRow) (int, error) {
	s.catchUps.Add(1)
	id := th.ID
	snap, err := s.src.Read(ctx, id)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, errors.CombineErrors(s.drop(ctx, t, th), errGone)
	}
	if err != nil {
		var ce *rollout.CorruptionError
		if errors.As(err, &ce) && ctx.Err() == nil {
			// A log that cannot be read to its end (a frame whose header
			// is damaged) is listed with its problem rather than failing
			// every read of the workspace, and tried again at every read.
			return 0, s.problemRow(ctx, t, th, -1, "log unreadable: "+err.Error())
		}
		return 0, errors.Wrapf(err, "read thread %s", id)
	}
	defer snap.Close()
	size, loc, path := snap.Size(), snap.Location(), s.src.Path(id)
	r, err := rollout.NewReader(snap, size, rollout.ReaderOptions{Path: path})
	if err != nil {
		var ce *rollout.CorruptionError
		if errors.As(err, &ce) && ctx.Err() == nil {
			return 0, s.problemRow(ctx, t, th, size, "unreadable file header: "+string(ce.Reason))
		}
		return 0, errors.Wrapf(err, "read thread %s", id)
	}
	fileID := r.Header().FileID
	was := th.clone()
	fresh := !th.made() || th.FileID != fileID || th.ProjectedOffset == 0 || size < th.ProjectedOffset || !anchoredIn(snap, th)
	if !fresh {
		moved := th.Location != loc || th.Path != path
		th.Location, th.Path = loc, path
		if size == th.ProjectedOffset && size == th.FileSize {
			if moved {
				a := s.newApplier(ctx, t, th, was, false)
				return 0, a.finish()
			}
			return 0, nil
		}
		if r, err = rollout.NewReader(snap, size, rollout.ReaderOptions{Path: path, StartOffset: th.AnchorOffset}); err != nil {
			return 0, errors.Wrapf(err, "read thread %s", id)
		}
	}
	for attempt := 0; ; attempt++ {
		if fresh {
			b := &pgx.Batch{}
			queueDeleteRows(b, s.ws, th.TID, id, true)
			if err := sendBatch(ctx, t, b); err != nil {
				return 0, err
			}
			*th = threadRow{TID: th.TID, ID: id, Location: loc, Path: path, FileID: fileID}
			if r.Header().ThreadID != id {
				th.IdentityError = "file header names thread " + r.Header().ThreadID
			}
		}
		a := s.newApplier(ctx, t, th, was, fresh)
		n, continuous, err := a.readAll(r)
		if err != nil {
			return n, err
		}
		if !continuous && attempt == 0 {
			// The anchor frame is not where the reader started: start over.
			fresh = true
			if r, err = rollout.NewReader(snap, size, rollout.ReaderOptions{Path: path}); err != nil {
				return 0, errors.Wrapf(err, "read thread %s", id)
			}
			continue
		}
		if end := r.End(); end > th.ProjectedOffset {
			h := a.lastHeader
			th.ProjectedOffset = a.lastFrame + rollout.FrameHeaderSize + int64(h.Length)
			th.AnchorOffset, th.AnchorSeq, th.AnchorCRC = a.lastFrame, h.Seq, h.DataCRC
		}
		th.FileSize = size
		return n, a.finish()
	}
}

// anchoredIn reports whether the snapshot holds the row's anchor frame
// where it was, ending at the projected offset.
func anchoredIn(snap Snapshot, th *threadRow) bool {
	if th.AnchorOffset < rollout.FileHeaderSize {
		return false
	}
	h, err := rollout.ReadFrameHeader(snap, th.AnchorOffset)
	return err == nil && h.FileID == th.FileID && h.Seq == th.AnchorSeq && h.DataCRC == th.AnchorCRC &&
		th.AnchorOffset+rollout.FrameHeaderSize+int64(h.Length) == th.ProjectedOffset
}

// problemRow replaces a thread's rows with one that lists it with a
// problem (an identity error). size is where its frames were seen to end
// (-1: looked at again at every read).
func (s *Store) problemRow(ctx context.Context, t *txn, th *threadRow, size int64, problem string) error {
	b := &pgx.Batch{}
	queueDeleteRows(b, s.ws, th.TID, th.ID, true)
	if err := sendBatch(ctx, t, b); err != nil {
		return err
	}
	loc := th.Location
	row := &threadRow{TID: th.TID, ID: th.ID, Location: loc, Path: s.src.Path(th.ID), FileSize: size, IdentityError: problem}
	return s.newApplier(ctx, t, row, nil, true).finish()
}

// readAll applies every record and damaged region the reader yields.
// continuous is false when, reading on from a row's anchor, the first
// frame read is not the anchor.
func (a *applier) readAll(r *rollout.Reader) (n int, continuous bool, err error) {
	damaged := 0
	check := !a.fresh
	for r.Next() {
		rec := r.Record()
		if check {
			check = false
			if len(r.Damage()) > 0 || r.FrameOffset() != a.th.AnchorOffset || rec.Seq != a.th.AnchorSeq {
				return n, false, nil
			}
		}
		for ; damaged < len(r.Damage()); damaged++ {
			a.damage(r.Damage()[damaged])
		}
		if err := a.record(r.FrameOffset(), rec); err != nil {
			return n, true, err
		}
		a.lastFrame, a.lastHeader = r.FrameOffset(), r.FrameHeader()
		n++
	}
	if err := r.Err(); err != nil {
		return n, true, err
	}
	if check {
		return n, false, nil // not even the anchor frame could be read
	}
	for ; damaged < len(r.Damage()); damaged++ {
		a.damage(r.Damage()[damaged])
	}
	return n, true, nil
}
