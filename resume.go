package rolloutdb

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/compaction"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// ResumeOptions qualify a resume.
type ResumeOptions struct {
	// History rebuilds a turn's model history from its items when its exact
	// history was rejected. Default: recovery.DefaultHistory.
	History recovery.HistoryBuilder
	// CheckpointOffset, if known (the projection stores it), lets resume
	// read only what follows the latest checkpoint.
	CheckpointOffset int64
	// FromCheckpoint takes CheckpointOffset from state.db (brought up to
	// date with the rollout first): the model history is rebuilt from the
	// latest checkpoint reading only what follows it, and State.Turns holds
	// only the turns after it (page through the earlier ones with
	// DB.Turns). Default: false, a full pass.
	FromCheckpoint bool
}

// Resume opens an existing thread for writing and returns its state: the
// visible turns, the model history to continue with, the turns left
// interrupted, and a report of everything skipped. It fails, holding
// nothing, if the rollout is not safely this thread's in this workspace (see
// recovery.ErrIdentity). A torn tail left by a crash is cut first, and
// reported (State.Report.TornTail, TornTailOffset, TornSavedTo).
func (db *DB) Resume(ctx context.Context, id string, o ResumeOptions) (*Thread, *recovery.State, error) {
	th, err := db.OpenThread(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	if o.FromCheckpoint && o.CheckpointOffset == 0 {
		// Read after OpenThread: a torn tail is cut, so the row is
		// brought up to the end the writer continues from.
		info, err := db.state.Thread(ctx, id)
		if err != nil {
			_ = th.Close()
			return nil, nil, err
		}
		o.CheckpointOffset = info.CheckpointOffset
	}
	d, err := db.log.Read(ctx, id)
	if err != nil {
		_ = th.Close()
		return nil, nil, err
	}
	st, err := recovery.Resume(ctx, d, d.Size, recovery.Options{
		ThreadID: id, WorkspaceID: db.id, Path: d.Path, History: o.History, CheckpointOffset: o.CheckpointOffset,
	})
	err = errors.CombineErrors(err, d.Close())
	if err != nil {
		_ = th.Close()
		return nil, nil, err
	}
	// The tail was cut before the replay read the file: say so here.
	if tt := th.opened.TornTail; tt != nil {
		st.Report.TornTail, st.Report.TornTailOffset, st.Report.TornSavedTo = true, tt.Offset, th.opened.TornSavedTo
	}
	if err := db.state.RecordResumeReport(ctx, id, st.Report); err != nil {
		db.logger().Warn("rolloutdb: could not keep resume diagnostics in state.db", "thread", id, "err", err.Error())
	}
	th.mu.Lock()
	th.interrupted = map[string]bool{}
	for _, t := range st.Interrupted {
		th.interrupted[t] = true
	}
	th.mu.Unlock()
	return th, st, nil
}

// AbortInterrupted closes a turn that Resume reported interrupted with an
// appended turn_aborted record. Until then it stays interrupted on disk.
func (t *Thread) AbortInterrupted(ctx context.Context, turnID, reason string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.interrupted[turnID] {
		return errors.Newf("rolloutdb: turn %q of thread %s is not an interrupted turn", turnID, t.id)
	}
	rec, err := rollout.NewRecord(rollout.KindTurnAborted, turnID, rollout.TurnAborted{Reason: reason})
	if err != nil {
		return err
	}
	if _, err := t.append(ctx, []rollout.Record{rec}, rollout.AppendOptions{}); err != nil {
		return err
	}
	delete(t.interrupted, turnID)
	return nil
}

// WriteCheckpoint writes a checkpoint between turns (pre-turn or manual) as
// its own frame, with a replacement history the host's model produced; it
// is in force once this returns. A post-turn checkpoint goes in the turn's
// Commit instead. CoveredTurn names the last turn it stands for.
func (t *Thread) WriteCheckpoint(ctx context.Context, cp rollout.Checkpoint) (rollout.AppendResult, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cp.Trigger == "" {
		cp.Trigger = rollout.TriggerManual
	}
	turn := ""
	if t.turn != nil {
		turn = t.turn.id
	}
	rec, err := compaction.Record(cp, turn)
	if err != nil {
		return rollout.AppendResult{}, err
	}
	rec.Time = time.Time{} // stamped by the writer
	return t.append(ctx, []rollout.Record{rec}, rollout.AppendOptions{})
}
