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
	input string // the user message's item id
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
	inputID := ""
	if o.Input != "" {
		inputID = rollout.NewID()
		in, err := itemRecord(o.ID, rollout.Item{ID: inputID, Type: rollout.ItemUserMessage, Text: o.Input})
		if err != nil {
			return nil, err
		}
		recs = append(recs, in)
	}
	if _, err := t.append(ctx, recs, rollout.AppendOptions{}); err != nil {
		return nil, err
	}
	t.turn = &Turn{t: t, id: o.ID, input: inputID}
	return t.turn, nil
}

// ID returns the turn id.
func (tu *Turn) ID() string { return tu.id }

// InputID returns the id of the user message made from TurnOptions.Input
// ("" without one).
func (tu *Turn) InputID() string { return tu.input }

// ItemResult is what Add made durable: where (the frame) and the item's
// id (the one given, or the one the library made).
type ItemResult struct {
	rollout.AppendResult
	ID string `json:"id"`
}

// Add records one item as it happens (a streamed agent message, a tool
// call) and returns where it was written and its id. An item may be added
// again with the same ID (in progress, then final); the last one wins.
// Empty ID and Status default to a new id and "completed".
//
// Concurrent Add calls share one fsync: the thread's lock orders the
// frames (none lands after the turn's end) and is released once the frame
// is written, before the wait for durability.
func (tu *Turn) Add(ctx context.Context, item rollout.Item) (ItemResult, error) {
	if tu.isEnded() {
		return ItemResult{}, errors.Wrapf(ErrTurnEnded, "turn %s", tu.id)
	}
	if item.ID == "" {
		item.ID = rollout.NewID()
	}
	item, err := tu.t.db.spill(tu.t.id, item)
	if err != nil {
		return ItemResult{}, err
	}
	rec, err := itemRecord(tu.id, item)
	if err != nil {
		return ItemResult{}, err
	}
	recs := []rollout.Record{rec}
	// Encoded before the thread's lock: the lock only orders the frames.
	prep, err := tu.t.w.Prepare(recs)
	if err != nil {
		return ItemResult{}, err
	}
	tu.t.mu.Lock()
	if tu.ended {
		tu.t.mu.Unlock()
		prep.Release()
		return ItemResult{}, errors.Wrapf(ErrTurnEnded, "turn %s", tu.id)
	}
	p, ticket, err := tu.t.write(ctx, prep, recs, rollout.AppendOptions{}, nil)
	tu.t.mu.Unlock()
	prep.Release()
	if err != nil {
		return ItemResult{}, err
	}
	res, err := tu.t.acknowledge(p, ticket)
	if err != nil {
		return ItemResult{}, err
	}
	return ItemResult{AppendResult: res, ID: item.ID}, nil
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
	// Business, if set, is written in the same transaction as the frame:
	// both or neither (BusinessWrites; a fleet workspace only).
	Business *BusinessWrites
}

// Commit ends the turn as completed. It returns where the frame was
// written; the ids it makes are set in the caller's Commit: each item's
// ID and the checkpoint's ID where they were empty (as Thread.Append sets
// the records' seqs).
func (tu *Turn) Commit(ctx context.Context, c Commit) (rollout.AppendResult, error) {
	if err := tu.t.db.checkBusinessWrites(c.Business); err != nil {
		return rollout.AppendResult{}, err
	}
	var recs []rollout.Record
	for i := range c.Items {
		if c.Items[i].ID == "" {
			c.Items[i].ID = rollout.NewID()
		}
		it, err := tu.t.db.spill(tu.t.id, c.Items[i])
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
		if c.Checkpoint.ID == "" {
			c.Checkpoint.ID = rollout.NewID()
		}
		cp := *c.Checkpoint
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
	return tu.end(ctx, append(recs, end), c.Business)
}

// Cancel ends the turn as aborted (a turn_aborted record with the
// reason) and returns where the frame was written.
func (tu *Turn) Cancel(ctx context.Context, reason string) (rollout.AppendResult, error) {
	rec, err := rollout.NewRecord(rollout.KindTurnAborted, tu.id, rollout.TurnAborted{Reason: reason})
	if err != nil {
		return rollout.AppendResult{}, err
	}
	return tu.end(ctx, []rollout.Record{rec}, nil)
}

func (tu *Turn) end(ctx context.Context, recs []rollout.Record, biz *BusinessWrites) (rollout.AppendResult, error) {
	tu.t.mu.Lock()
	defer tu.t.mu.Unlock()
	if tu.ended {
		return rollout.AppendResult{}, errors.Wrapf(ErrTurnEnded, "turn %s", tu.id)
	}
	res, err := tu.t.appendWith(ctx, recs, rollout.AppendOptions{}, biz)
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
		len(it.Text) <= db.opts.Artifacts.SpillAbove {
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
