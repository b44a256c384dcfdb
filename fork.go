package rolloutdb

import (
	"context"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// ForkOptions describe a fork.
type ForkOptions struct {
	// ID is the new thread's id. Default: a new time-ordered id.
	ID string
	// AtTurn is the last visible turn (1-based) the fork keeps. Default:
	// the last one.
	AtTurn int
	// Metadata is host-defined, for the new header.
	Metadata map[string]string
}

// Fork makes a new thread holding the source thread's records up to the end
// of its AtTurn-th visible turn (what a resume of the source at that
// moment would have seen), and opens it. Its header names the source thread
// and turn. The new thread is written whole (Log.Write): after a crash it
// is there whole or not at all.
func (db *DB) Fork(ctx context.Context, src string, o ForkOptions) (*Thread, error) {
	if err := db.live(); err != nil {
		return nil, err
	}
	d, err := db.log.Read(ctx, src)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	st, err := recovery.Resume(ctx, d, d.Size, recovery.Options{ThreadID: src, WorkspaceID: db.id, Path: d.Path})
	if err != nil {
		return nil, err
	}
	n := o.AtTurn
	if n == 0 {
		n = len(st.Turns)
	}
	if n < 1 || n > len(st.Turns) {
		return nil, errors.Wrapf(ErrNoSuchTurn, "thread %s has %d visible turns; cannot fork at turn %d", src, len(st.Turns), n)
	}
	turn := st.Turns[n-1]
	if turn.EndSeq == 0 {
		return nil, errors.Newf("rolloutdb: turn %d (%s) of thread %s has not ended; fork at an ended turn", n, turn.ID, src)
	}
	if o.ID == "" {
		o.ID = rollout.NewID()
	}
	if err := rollout.ValidateThreadID(o.ID); err != nil {
		return nil, err
	}
	// The records after the header up to the turn's end, frame by frame
	// (a commit stays one frame), renumbered from 2.
	r, err := rollout.NewReader(d, d.Size, rollout.ReaderOptions{Path: d.Path})
	if err != nil {
		return nil, err
	}
	hdr := rollout.ThreadOpened{ThreadID: o.ID, WorkspaceID: db.id, WorkspacePath: db.workspace, Source: rollout.Source{Kind: rollout.SourceUser},
		ForkedFrom: &rollout.ForkRef{Thread: src, Turn: turn.ID}, Created: time.Now().UTC(), Host: db.opts.Host,
		FormatVersion: rollout.FormatVersion, Metadata: o.Metadata}
	head, err := rollout.NewRecord(rollout.KindThreadOpened, "", hdr)
	if err != nil {
		return nil, err
	}
	head.Seq, head.Time = 1, hdr.Created
	frames := [][]rollout.Record{{head}}
	seq, lastFrame := uint64(1), int64(-1)
	for r.Next() {
		rec := r.Record()
		if rec.Seq == 1 || rec.Kind == rollout.KindThreadOpened {
			continue
		}
		if rec.Seq > turn.EndSeq {
			break
		}
		seq++
		rec.Seq = seq
		if r.FrameOffset() != lastFrame {
			frames = append(frames, nil)
			lastFrame = r.FrameOffset()
		}
		frames[len(frames)-1] = append(frames[len(frames)-1], rec)
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	if err := db.log.Write(ctx, o.ID, frames); err != nil {
		return nil, errors.Wrapf(err, "fork %s as %s", src, o.ID)
	}
	if _, err := db.state.Thread(ctx, o.ID); err != nil && !errors.Is(err, projection.ErrNotFound) {
		return nil, err
	}
	return db.OpenThread(ctx, o.ID)
}

// RetentionOptions select archived threads to delete.
type RetentionOptions struct {
	// OlderThan is how long an archived root thread must have gone without
	// an update to be deleted. Required.
	OlderThan time.Duration
	// DryRun lists them and deletes nothing.
	DryRun bool
}

// Retention deletes archived root threads (with their subagents) not
// updated for OlderThan. It is never run by the library on its own.
func (db *DB) Retention(ctx context.Context, o RetentionOptions) (LifecycleReport, error) {
	if o.OlderThan <= 0 {
		return LifecycleReport{}, errors.New("rolloutdb: retention needs OlderThan")
	}
	cutoff := time.Now().Add(-o.OlderThan)
	var roots []string
	for cursor := ""; ; {
		page, err := db.state.List(ctx, projection.ListOptions{Scope: projection.ScopeArchived, Limit: 1000, Cursor: cursor})
		if err != nil {
			return LifecycleReport{}, err
		}
		for _, t := range page.Threads {
			if t.Source.Parent == "" && t.Source.Kind != rollout.SourceSubagent && t.UpdatedAt.Before(cutoff) {
				roots = append(roots, t.ID)
			}
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	var rep LifecycleReport
	var held []string
	var heldErr error
	for _, id := range roots {
		if o.DryRun {
			tree, err := db.subtree(ctx, id, "", "")
			if err != nil {
				return rep, err
			}
			rep.Threads = append(rep.Threads, tree...)
			continue
		}
		d, err := db.Delete(ctx, id)
		rep.Threads = append(rep.Threads, d.Threads...)
		rep.Pending = append(rep.Pending, d.Pending...)
		if errors.Is(err, rollout.ErrThreadLocked) && len(d.Threads) == 0 {
			held = append(held, id) // untouched: the others go on
			if heldErr == nil {
				heldErr = err
			}
			continue
		}
		if err != nil {
			return rep, err
		}
	}
	if len(held) > 0 {
		return rep, errors.WithHint(errors.Wrapf(heldErr, "retention: %d thread tree(s) held by a host, left alone (%s)", len(held), strings.Join(held, " ")),
			"the others were deleted (see the report); run retention again once the host has closed them")
	}
	return rep, nil
}
