package projection

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// TurnInfo is one visible turn of the paged history.
type TurnInfo struct {
	Ordinal int64  `json:"ordinal"` // 1 for the first visible turn
	ID      string `json:"id"`
	// Status is completed, aborted, or "open" (no end record yet: running,
	// or interrupted if no host holds the thread).
	Status       string         `json:"status"`
	Model        string         `json:"model,omitempty"`
	StartedAt    time.Time      `json:"started_at"`
	EndedAt      *time.Time     `json:"ended_at,omitempty"`
	Usage        rollout.Usage  `json:"usage"`
	ExactHistory bool           `json:"exact_history"`
	StartOffset  int64          `json:"start_offset"`
	Items        []rollout.Item `json:"items"`
}

// TurnStatusOpen is the status of a turn with no end record.
const TurnStatusOpen = "open"

// Turns returns the visible turns from..to (ordinals, 1-based, inclusive)
// with their items, from state.db: a client pages through a huge thread
// without replaying it. The thread's row is brought up to date with its
// rollout first.
func (s *Store) Turns(ctx context.Context, thread string, from, to int64) ([]TurnInfo, error) {
	if _, err := s.freshThread(ctx, thread); err != nil {
		return nil, err
	}
	from = max(from, 1)
	if to < from {
		return []TurnInfo{}, nil
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+turnCols+` FROM turns WHERE thread_id = ? AND ordinal BETWEEN ? AND ? ORDER BY ordinal`, thread, from, to)
	if err != nil {
		return nil, errors.Wrap(err, "read turns")
	}
	out := []TurnInfo{}
	index := map[string]int{}
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
		index[t.ID] = len(out)
		out = append(out, ti)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, errors.Wrap(err, "read turns")
	}
	items, err := s.r.QueryContext(ctx, `SELECT i.turn_id, i.body
		FROM turns t JOIN items i ON i.thread_id = t.thread_id AND i.turn_id = t.turn_id
		WHERE t.thread_id = ? AND t.ordinal BETWEEN ? AND ? ORDER BY t.ordinal, i.seq`, thread, from, to)
	if err != nil {
		return nil, errors.Wrap(err, "read items")
	}
	defer items.Close()
	for items.Next() {
		var turn string
		var body []byte
		if err := items.Scan(&turn, &body); err != nil {
			return nil, errors.Wrap(err, "read items")
		}
		it, err := decodeItem(body)
		if err != nil {
			return nil, errors.Wrapf(err, "thread %s turn %s", thread, turn)
		}
		if i, ok := index[turn]; ok {
			out[i].Items = append(out[i].Items, it)
		}
	}
	return out, errors.Wrap(items.Err(), "read items")
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
func (s *Store) Checkpoints(ctx context.Context, thread string) ([]Checkpoint, error) {
	if _, err := s.freshThread(ctx, thread); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT seq, frame_offset, checkpoint_id, covered_turn, trigger, tokens_before, tokens_after
		FROM checkpoints WHERE thread_id = ? ORDER BY seq`, thread)
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
func (s *Store) ArtifactRefs(ctx context.Context) ([]ArtifactRef, error) {
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
