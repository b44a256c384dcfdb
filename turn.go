package rolloutdb

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// TurnOptions describe a new turn.
type TurnOptions struct {
	// ID is the turn id. Default: a new time-ordered id.
	ID string
	// Model names the model the turn runs with.
	Model string
	// Input, if set, is recorded as the turn's user message, in the same
	// frame as turn_started.
	Input string
	// Metadata is host-defined.
	Metadata map[string]string
}

// Turn is one open turn of a thread: one user input and everything the agent
// does for it, ended by Commit or Abort.
type Turn struct {
	t     *Thread
	id    string
	ended bool
}

// StartTurn opens a turn. Only one turn is open per thread at a time.
func (t *Thread) StartTurn(ctx context.Context, o TurnOptions) (*Turn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.archived.Load() {
		return nil, errors.WithHint(errors.Wrapf(ErrThreadArchived, "thread %s", t.id), "restore it first (DB.Restore, rolloutctl restore)")
	}
	if t.turn != nil {
		return nil, errors.Wrapf(ErrTurnInProgress, "thread %s, turn %s", t.id, t.turn.id)
	}
	if o.ID == "" {
		o.ID = rollout.NewID()
	}
	start, err := rollout.NewRecord(rollout.KindTurnStarted, o.ID, rollout.TurnStarted{Model: o.Model, Metadata: o.Metadata})
	if err != nil {
		return nil, err
	}
	recs := []rollout.Record{start}
	if o.Input != "" {
		in, err := itemRecord(o.ID, rollout.Item{Type: rollout.ItemUserMessage, Text: o.Input})
		if err != nil {
			return nil, err
		}
		recs = append(recs, in)
	}
	if _, err := t.append(ctx, recs, rollout.AppendOptions{}); err != nil {
		return nil, err
	}
	t.turn = &Turn{t: t, id: o.ID}
	return t.turn, nil
}

// ID returns the turn id.
func (tu *Turn) ID() string { return tu.id }

// AppendItem records one item as it happens (a streamed agent message, a
// tool call). An item may be appended again with the same ID (in progress,
// then final); the last one wins. Empty ID and Status default to a new id
// and "completed".
//
// Concurrent AppendItem calls share one fsync: the thread's lock orders
// the frames (none lands after the turn's end) and is released once the
// frame is written, before the wait for durability.
func (tu *Turn) AppendItem(ctx context.Context, item rollout.Item) error {
	if tu.isEnded() {
		return errors.Wrapf(ErrTurnEnded, "turn %s", tu.id)
	}
	item, err := tu.t.db.spill(tu.t.id, item)
	if err != nil {
		return err
	}
	rec, err := itemRecord(tu.id, item)
	if err != nil {
		return err
	}
	recs := []rollout.Record{rec}
	// Encoded before the thread's lock: the lock only orders the frames.
	prep, err := tu.t.w.Prepare(recs)
	if err != nil {
		return err
	}
	tu.t.mu.Lock()
	if tu.ended {
		tu.t.mu.Unlock()
		prep.Release()
		return errors.Wrapf(ErrTurnEnded, "turn %s", tu.id)
	}
	p, err := tu.t.w.WritePrepared(ctx, prep, rollout.AppendOptions{})
	tu.t.mu.Unlock()
	prep.Release()
	if err != nil {
		return err
	}
	_, err = tu.t.acknowledge(p, recs)
	return err
}

func (tu *Turn) isEnded() bool {
	tu.t.mu.Lock()
	defer tu.t.mu.Unlock()
	return tu.ended
}

// Commit is everything that ends a turn, written as one frame: after a
// crash it is all there or none of it is.
type Commit struct {
	// Items are the turn's final items (those not already appended, or
	// final versions of appended ones).
	Items []rollout.Item
	// ModelHistory is the exact model history of the turn: the
	// provider-level messages the model saw, as opaque bytes.
	ModelHistory [][]byte
	// Checkpoint is an optional post-turn compaction checkpoint.
	Checkpoint *rollout.Checkpoint
	// Usage is the turn's token usage.
	Usage rollout.Usage
}

// Commit ends the turn as completed.
func (tu *Turn) Commit(ctx context.Context, c Commit) (rollout.AppendResult, error) {
	var recs []rollout.Record
	for _, it := range c.Items {
		it, err := tu.t.db.spill(tu.t.id, it)
		if err != nil {
			return rollout.AppendResult{}, err
		}
		rec, err := itemRecord(tu.id, it)
		if err != nil {
			return rollout.AppendResult{}, err
		}
		recs = append(recs, rec)
	}
	if c.ModelHistory != nil {
		rec, err := rollout.NewRecord(rollout.KindModelHistoryAppended, tu.id, rollout.ModelHistory{Messages: c.ModelHistory})
		if err != nil {
			return rollout.AppendResult{}, err
		}
		recs = append(recs, rec)
	}
	if c.Checkpoint != nil {
		cp := *c.Checkpoint
		if cp.ID == "" {
			cp.ID = rollout.NewID()
		}
		if cp.CoveredTurn == "" {
			cp.CoveredTurn = tu.id
		}
		if cp.Trigger == "" {
			cp.Trigger = rollout.TriggerPostTurn
		}
		rec, err := rollout.NewRecord(rollout.KindCheckpoint, tu.id, cp)
		if err != nil {
			return rollout.AppendResult{}, err
		}
		recs = append(recs, rec)
	}
	end, err := rollout.NewRecord(rollout.KindTurnCompleted, tu.id, rollout.TurnCompleted{Status: rollout.TurnStatusCompleted, Usage: c.Usage})
	if err != nil {
		return rollout.AppendResult{}, err
	}
	return tu.end(ctx, append(recs, end))
}

// Abort ends the turn as aborted.
func (tu *Turn) Abort(ctx context.Context, reason string) error {
	rec, err := rollout.NewRecord(rollout.KindTurnAborted, tu.id, rollout.TurnAborted{Reason: reason})
	if err != nil {
		return err
	}
	_, err = tu.end(ctx, []rollout.Record{rec})
	return err
}

func (tu *Turn) end(ctx context.Context, recs []rollout.Record) (rollout.AppendResult, error) {
	tu.t.mu.Lock()
	defer tu.t.mu.Unlock()
	if tu.ended {
		return rollout.AppendResult{}, errors.Wrapf(ErrTurnEnded, "turn %s", tu.id)
	}
	res, err := tu.t.append(ctx, recs, rollout.AppendOptions{})
	if err != nil {
		return res, err // the turn stays open: the host may retry
	}
	tu.ended = true
	tu.t.turn = nil
	return res, nil
}

// spill moves a large tool output out of the item into an artifact: the
// item keeps a bounded preview and the reference.
func (db *DB) spill(thread string, it rollout.Item) (rollout.Item, error) {
	if it.Type != rollout.ItemToolResult || it.Ref != nil || db.opts.Artifacts.SpillAbove < 0 ||
		len(it.Text) <= db.opts.Artifacts.SpillAbove || db.fs != rollout.OSFS {
		return it, nil
	}
	if it.ID == "" {
		it.ID = rollout.NewID()
	}
	// The file is named after the call; a provider's call id that is not
	// a plain name (a colon, a slash, too long) gets a digest of it.
	call := it.CallID
	if call == "" {
		call = it.ID
	}
	if rollout.ValidateThreadID(call) != nil {
		sum := sha256.Sum256([]byte(call))
		call = "call-" + hex.EncodeToString(sum[:12])
	}
	res, err := db.arts.SpillToolResult(thread, call, []byte(it.Text))
	if err != nil {
		return it, err
	}
	if res.Ref != nil {
		it.Text = res.Preview
		it.Ref = &rollout.ArtifactRef{Path: res.Ref.Path, Size: res.Ref.Size, SHA256: res.Ref.SHA256}
	}
	return it, nil
}

func itemRecord(turn string, it rollout.Item) (rollout.Record, error) {
	if it.ID == "" {
		it.ID = rollout.NewID()
	}
	if it.Status == "" {
		it.Status = rollout.ItemCompleted
	}
	if it.Type == "" {
		return rollout.Record{}, errors.New("rolloutdb: item without a type")
	}
	return rollout.NewRecord(rollout.KindItemAppended, turn, it)
}
