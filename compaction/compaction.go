// Package compaction owns checkpoints: the record that replaces a thread's
// model history through a turn with something shorter (a summary the host's
// model produced), when to write one, and which one a resume may use.
//
// The library never calls a model: the host asks Policy.Due whether it is
// time, produces the replacement history itself, and writes it with
// Checkpoint (its own frame: pre-turn, mid-turn or manual) or in a turn's
// commit frame (post-turn, through the facade). A checkpoint is in force
// only once it is durable: it is an ordinary record, acknowledged like any
// other.
//
// It imports only rollout, and must never decide anything about replay
// beyond "which checkpoint is usable".
package compaction

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// Policy says when to compact. The zero value never asks for compaction.
type Policy struct {
	// ContextWindow is the model's context window in tokens. With
	// Threshold, compaction is due when the tokens in context reach
	// Threshold*ContextWindow. Default: 0 (no token trigger).
	ContextWindow int64
	// Threshold is the fraction of ContextWindow that triggers compaction.
	// Default (when ContextWindow is set): 0.8.
	Threshold float64
	// EveryTurns triggers compaction after this many turns since the last
	// checkpoint. Default: 0 (no turn trigger).
	EveryTurns int
}

// Reason says why compaction is due ("" when it is not).
type Reason string

// Reasons compaction is due.
const (
	DueTokens Reason = "tokens"
	DueTurns  Reason = "turns"
)

// Due reports whether a thread with tokensInContext tokens of model history
// and turnsSince turns since its last checkpoint should be compacted.
func (p Policy) Due(tokensInContext int64, turnsSince int) (bool, Reason) {
	if p.ContextWindow > 0 {
		th := p.Threshold
		if th <= 0 || th > 1 {
			th = 0.8
		}
		if float64(tokensInContext) >= th*float64(p.ContextWindow) {
			return true, DueTokens
		}
	}
	if p.EveryTurns > 0 && turnsSince >= p.EveryTurns {
		return true, DueTurns
	}
	return false, ""
}

// ErrInvalid is returned for a checkpoint missing what makes it usable.
var ErrInvalid = errors.New("compaction: invalid checkpoint")

// Validate fills a checkpoint's defaults (a new ID) and checks it names the
// turn it covers, a known trigger, and a replacement history.
func Validate(cp *rollout.Checkpoint) error {
	if cp.ID == "" {
		cp.ID = rollout.NewID()
	}
	if cp.CoveredTurn == "" {
		return errors.Wrap(ErrInvalid, "no covered turn")
	}
	switch cp.Trigger {
	case rollout.TriggerPreTurn, rollout.TriggerMidTurn, rollout.TriggerPostTurn, rollout.TriggerManual:
	default:
		return errors.Wrapf(ErrInvalid, "trigger %q", cp.Trigger)
	}
	if len(cp.ReplacementHistory) == 0 {
		return errors.Wrap(ErrInvalid, "empty replacement history")
	}
	return nil
}

// Record builds the checkpoint record. turn is the turn the record belongs
// to ("" for a checkpoint between turns).
func Record(cp rollout.Checkpoint, turn string) (rollout.Record, error) {
	if err := Validate(&cp); err != nil {
		return rollout.Record{}, err
	}
	return rollout.NewRecord(rollout.KindCheckpoint, turn, cp)
}

// Write appends a checkpoint as its own frame (pre-turn, mid-turn or
// manual) and returns where it landed once it is durable.
func Write(ctx context.Context, w *rollout.Writer, cp rollout.Checkpoint, turn string) (rollout.AppendResult, error) {
	rec, err := Record(cp, turn)
	if err != nil {
		return rollout.AppendResult{}, err
	}
	rec.Time = time.Time{}
	return w.Append(ctx, []rollout.Record{rec}, rollout.AppendOptions{})
}

// Candidate is a checkpoint record seen during replay.
type Candidate struct {
	Seq    uint64
	Offset int64 // frame offset
	// Checkpoint is the decoded body; nil when it did not decode.
	Checkpoint *rollout.Checkpoint
	DecodeErr  error
}

// Passed says why a candidate was passed over.
type Passed struct {
	Candidate
	Why string
}

// Reasons a checkpoint is passed over.
const (
	WhyUndecodable  = "undecodable"
	WhyCoveredGone  = "covered turn does not survive" // lost, rolled back, or never started
	WhyInvalid      = "invalid"
	WhyNotCompleted = "covered turn not completed"
)

// Latest picks the latest usable checkpoint from candidates (in file
// order): one that decodes, is valid, and whose covered turn survives (the
// survives func says so for a candidate; a rollback past the turn makes it
// unusable, even if a later turn reuses its id) and is complete where the
// checkpoint is post-turn. It returns the chosen one (nil if none) and the
// later ones it passed over, newest first.
func Latest(candidates []Candidate, survives func(c *Candidate) (ok, ended bool)) (*Candidate, []Passed) {
	var passed []Passed
	for i := len(candidates) - 1; i >= 0; i-- {
		c := candidates[i]
		switch {
		case c.Checkpoint == nil:
			passed = append(passed, Passed{c, WhyUndecodable})
			continue
		case c.Checkpoint.CoveredTurn == "" || len(c.Checkpoint.ReplacementHistory) == 0:
			passed = append(passed, Passed{c, WhyInvalid})
			continue
		}
		ok, ended := survives(&candidates[i])
		switch {
		case !ok:
			passed = append(passed, Passed{c, WhyCoveredGone})
		case c.Checkpoint.Trigger == rollout.TriggerPostTurn && !ended:
			passed = append(passed, Passed{c, WhyNotCompleted})
		default:
			return &candidates[i], passed
		}
	}
	return nil, passed
}
