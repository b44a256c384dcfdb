package projection

import (
	"context"
	"database/sql"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// TurnInfo is one visible turn of the paged history.
type TurnInfo struct {
	Ordinal int64  `json:"ordinal"` // 1 for the first visible turn
	ID      string `json:"id"`
	// Status is completed, aborted, or open (rollout.TurnStatusOpen: no
	// end record yet, running, or left by a host that stopped).
	Status       string         `json:"status"`
	Model        string         `json:"model,omitempty"`
	StartedAt    time.Time      `json:"started_at"`
	EndedAt      *time.Time     `json:"ended_at,omitempty"`
	Usage        rollout.Usage  `json:"usage"`
	ExactHistory bool           `json:"exact_history"`
	StartOffset  int64          `json:"start_offset"`
	Items        []rollout.Item `json:"items"`
}

// TurnStatusOpen is the status of a turn with no end record
// (rollout.TurnStatusOpen, the same word as resume's).
const TurnStatusOpen = rollout.TurnStatusOpen

// Turns returns the visible turns from..to (ordinals, 1-based, inclusive)
// with their items: the turns and the items' places from state.db, each
// item's shown version read from the rollout (the frames named, nothing
// else; each CRC-checked). A client pages through a huge thread without
// replaying it. The thread's row is brought up to date with its rollout
// first; if a frame a row names is gone (the file changed since), the
// thread is projected again and the page read again.
func (s *Store) Turns(ctx context.Context, thread string, from, to int64) (_ []TurnInfo, err error) {
	defer s.guard(&err)
	for attempt := 0; ; attempt++ {
		th, err := s.freshThread(ctx, thread)
		if err != nil {
			return nil, err
		}
		out, err := s.turnsPage(ctx, th, from, to)
		if attempt == 0 && errors.Is(err, errFrameGone) {
			if err := s.reproject(ctx, fileAt(th.ID, th.RolloutPath)); err != nil {
				return nil, err
			}
			continue
		}
		return out, err
	}
}

// TurnIDs lists a thread's visible turns' ids, oldest first: what Turns
// would list, without reading a frame.
func (s *Store) TurnIDs(ctx context.Context, thread string) (_ []string, err error) {
	defer s.guard(&err)
	th, err := s.freshThread(ctx, thread)
	if err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT turn_id FROM turns WHERE tid = ? AND ordinal IS NOT NULL ORDER BY ordinal`, th.TID)
	if err != nil {
		return nil, errors.Wrap(err, "read turn ids")
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, errors.Wrap(err, "read turn ids")
		}
		out = append(out, id)
	}
	return out, errors.Wrap(rows.Err(), "read turn ids")
}

const (
	qTurnsPage      = `SELECT ` + turnCols + ` FROM turns WHERE tid = ? AND ordinal BETWEEN ? AND ? ORDER BY ordinal`
	qTurnsPageItems = `SELECT seq, seq + ver, frame, seq - toff FROM items WHERE tid = ? AND seq BETWEEN ? AND ? ORDER BY seq`
)

func (s *Store) turnsPage(ctx context.Context, th *threadRow, from, to int64) ([]TurnInfo, error) {
	from = max(from, 1)
	if to < from {
		return []TurnInfo{}, nil
	}
	// Prepared before the transaction takes a connection (an in-memory
	// store has only one).
	qt, err := s.rstmt(ctx, qTurnsPage)
	if err != nil {
		return nil, errors.Wrap(err, "read turns")
	}
	qi, err := s.rstmt(ctx, qTurnsPageItems)
	if err != nil {
		return nil, errors.Wrap(err, "read items")
	}
	// One read transaction: the turns and items rows agree.
	rtx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, errors.Wrap(err, "read turns")
	}
	defer func() { _ = rtx.Rollback() }()
	rows, err := txQuery(ctx, rtx, qt, qTurnsPage, th.TID, from, to)
	if err != nil {
		return nil, errors.Wrap(err, "read turns")
	}
	out := []TurnInfo{}
	var spans []*turnRow
	for rows.Next() {
		t, err := scanTurn(rows)
		if err != nil {
			rows.Close()
			return nil, errors.Wrap(err, "read turns")
		}
		ti := TurnInfo{Ordinal: t.Ordinal, ID: t.ID, Status: t.Status, Model: t.Model, StartedAt: time.Unix(0, t.StartedAt).UTC(),
			Usage: t.Usage, ExactHistory: t.ExactHistory > 0, StartOffset: t.StartOffset, Items: []rollout.Item{}}
		if ti.Status == "" {
			ti.Status = TurnStatusOpen
		}
		if t.EndSeq != 0 {
			e := time.Unix(0, t.EndedAt).UTC()
			ti.EndedAt = &e
		}
		out = append(out, ti)
		spans = append(spans, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, errors.Wrap(err, "read turns")
	}
	if len(spans) == 0 {
		return out, nil
	}
	// One query for the items of every turn on the page: the span from
	// the first turn's instance to the last record of any, each item kept
	// by the turn it belongs to (a rolled-back turn's items lie between).
	byInstance := make(map[int64]int, len(spans))
	lo, hi := int64(spans[0].Instance), int64(spans[0].LastSeq)
	for i, t := range spans {
		byInstance[int64(t.Instance)] = i
		lo, hi = min(lo, int64(t.Instance)), max(hi, int64(t.LastSeq))
	}
	irows, err := txQuery(ctx, rtx, qi, qTurnsPageItems, th.TID, lo, hi)
	if err != nil {
		return nil, errors.Wrap(err, "read items")
	}
	var want []itemAt
	var owner []int
	for irows.Next() {
		var it itemAt
		var seq, last, turn int64
		if err := irows.Scan(&seq, &last, &it.frame, &turn); err != nil {
			irows.Close()
			return nil, errors.Wrap(err, "read items")
		}
		i, ok := byInstance[turn]
		if !ok || uint64(seq) < spans[i].Instance || uint64(seq) > spans[i].LastSeq {
			continue
		}
		it.seq, it.lastSeq = uint64(seq), uint64(last)
		want = append(want, it)
		owner = append(owner, i)
	}
	irows.Close()
	if err := irows.Err(); err != nil {
		return nil, errors.Wrap(err, "read items")
	}
	_ = rtx.Rollback()
	if len(want) == 0 {
		return out, nil
	}
	items, err := s.readItems(fileAt(th.ID, th.RolloutPath), want)
	if err != nil {
		return nil, err
	}
	for k, it := range items {
		out[owner[k]].Items = append(out[owner[k]].Items, it)
	}
	return out, nil
}

// reproject projects a thread again from the start of its rollout (its
// rows named a frame the file no longer holds).
func (s *Store) reproject(ctx context.Context, f rolloutFile) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		th, err := s.loadThread(ctx, tx, f.id)
		if err != nil || th == nil {
			return err
		}
		th.FileID = 0 // another file: catchUp starts from scratch
		if err := s.saveThread(ctx, tx, th); err != nil {
			return err
		}
		_, err = s.catchUp(ctx, tx, f)
		return ignoreMissing(err)
	})
}

// Checkpoint is a checkpoint record of a thread.
type Checkpoint struct {
	Seq          uint64 `json:"seq"`
	Offset       int64  `json:"offset"`
	ID           string `json:"id"`
	CoveredTurn  string `json:"covered_turn"`
	Trigger      string `json:"trigger"`
	TokensBefore int64  `json:"tokens_before"`
	TokensAfter  int64  `json:"tokens_after"`
}

// Checkpoints lists a thread's checkpoint records, oldest first.
func (s *Store) Checkpoints(ctx context.Context, thread string) (_ []Checkpoint, err error) {
	defer s.guard(&err)
	if _, err := s.freshThread(ctx, thread); err != nil {
		return nil, err
	}
	th, err := s.readThread(ctx, thread)
	if err != nil || th == nil {
		return []Checkpoint{}, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT seq, frame_offset, checkpoint_id, covered_turn, trigger, tokens_before, tokens_after
		FROM checkpoints WHERE tid = ? ORDER BY seq`, th.TID)
	if err != nil {
		return nil, errors.Wrap(err, "read checkpoints")
	}
	defer rows.Close()
	out := []Checkpoint{}
	for rows.Next() {
		var c Checkpoint
		var seq int64
		if err := rows.Scan(&seq, &c.Offset, &c.ID, &c.CoveredTurn, &c.Trigger, &c.TokensBefore, &c.TokensAfter); err != nil {
			return nil, errors.Wrap(err, "read checkpoints")
		}
		c.Seq = uint64(seq)
		out = append(out, c)
	}
	return out, errors.Wrap(rows.Err(), "read checkpoints")
}

// ArtifactRef is an artifact a record of a rollout references.
type ArtifactRef struct {
	Thread string `json:"thread"`
	Seq    uint64 `json:"seq"`
	rollout.ArtifactRef
}

// ArtifactRefs lists every artifact referenced by a record of any rollout
// (rolled back or not), after a full Refresh: what GC must keep.
func (s *Store) ArtifactRefs(ctx context.Context) (_ []ArtifactRef, err error) {
	defer s.guard(&err)
	if err := s.Refresh(ctx); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT thread_id, seq, path, size, sha256 FROM artifact_refs ORDER BY path, thread_id, seq`)
	if err != nil {
		return nil, errors.Wrap(err, "read artifact refs")
	}
	defer rows.Close()
	out := []ArtifactRef{}
	for rows.Next() {
		var a ArtifactRef
		var seq int64
		if err := rows.Scan(&a.Thread, &seq, &a.Path, &a.Size, &a.SHA256); err != nil {
			return nil, errors.Wrap(err, "read artifact refs")
		}
		a.Seq = uint64(seq)
		out = append(out, a)
	}
	return out, errors.Wrap(rows.Err(), "read artifact refs")
}
