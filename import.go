package rolloutdb

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/compaction"
	"github.com/rolloutdb/rolloutdb/importer"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// SourceImport is the source kind of a thread imported from another tool
// (Source.Client names the format).
const SourceImport = "import"

// ImportOptions qualify an import.
type ImportOptions struct {
	// DryRun reads and reports, and writes nothing.
	DryRun bool
}

// ImportResult is what importing one session did.
type ImportResult struct {
	ID         string `json:"id"`
	SourcePath string `json:"source_path"`
	// Parent is the thread this one is a subagent of.
	Parent string `json:"parent,omitempty"`
	// Turns were written now; Existing were there from an earlier import.
	Turns    int  `json:"turns"`
	Existing int  `json:"existing"`
	Created  bool `json:"created"`
	// Checkpoints are the source's compactions written now.
	Checkpoints int             `json:"checkpoints"`
	Skipped     []importer.Skip `json:"skipped"`
	// Subagents are the results of the session's subagents.
	Subagents []ImportResult `json:"subagents,omitempty"`
}

// Import writes a session read by package importer as a thread, and its
// subagents as subagent threads with open edges from it (so they archive,
// restore and delete with it). The thread id is derived from the source's
// session id, so importing the same session again changes nothing, and
// importing one that has grown appends only its new turns (a turn already
// imported is not changed, even if the source added to it since). Each
// turn is one frame with the source's timestamps, token usage and exact
// model history; a compaction of the source is a checkpoint after the
// turn it follows. The source's name, labels, flags and status are set
// on the thread; a later import sets what the source changed (a label the
// source dropped stays: the host may have added it). Skipped source lines
// are reported, and kept as diagnostics of the thread (kind
// "import:<format>", offset: the line). An archived thread is refused
// (restore it first). A turn the host rolled back since it was imported
// is imported again.
//
// A session read on its own that names a parent session (DotCraft keeps a
// subagent in its own file) is a subagent thread of that session's
// thread if it was imported before; if not, it is imported on its own,
// and the edge is added by an import after the parent's.
func (db *DB) Import(ctx context.Context, s importer.Session, o ImportOptions) (ImportResult, error) {
	src := rollout.Source{Kind: SourceImport, Client: s.Format}
	if s.Parent != "" {
		pid := importer.ThreadID(s.Format, s.Parent)
		if p, err := db.state.Thread(ctx, pid); err == nil {
			root := p.Source.Root
			if root == "" {
				root = pid
			}
			src = rollout.Source{Kind: rollout.SourceSubagent, Client: s.Format, Parent: pid, Root: root, Depth: p.Source.Depth + 1}
		} else if errors.Is(err, projection.ErrNotFound) {
			s.Skips = append(slices.Clip(s.Skips), importer.Skip{Reason: fmt.Sprintf("its parent session %s is not imported (yet): no edge to it", s.Parent)})
		} else {
			return ImportResult{}, err
		}
	}
	return db.importSession(ctx, s, o, src)
}

func (db *DB) importSession(ctx context.Context, s importer.Session, o ImportOptions, src rollout.Source) (ImportResult, error) {
	id := importer.ThreadID(s.Format, s.SourceID)
	res := ImportResult{ID: id, SourcePath: s.SourcePath, Parent: src.Parent, Skipped: append([]importer.Skip{}, s.Skips...)}
	if err := rollout.ValidateThreadID(id); err != nil {
		return res, errors.Wrapf(err, "import %s", s.SourcePath)
	}
	have, haveCP := map[string]bool{}, map[string]bool{}
	info, err := db.state.Thread(ctx, id)
	switch {
	case err == nil && info.Status == projection.LocationArchived:
		return res, errors.WithHint(errors.Wrapf(ErrThreadArchived, "import %s into %s", s.SourcePath, id), "restore it first (rolloutctl restore)")
	case err == nil:
		if src.Parent != "" && !o.DryRun && info.Source.Parent == "" {
			// Imported before its parent: the edge now.
			edges, err := db.state.Edges(ctx, projection.EdgeFilter{Parent: src.Parent, Child: id})
			if err == nil && len(edges) == 0 {
				err = db.state.OpenEdge(ctx, src.Parent, id)
			}
			if err != nil {
				return res, err
			}
		}
		turns, err := db.state.Turns(ctx, id, 1, max(info.Turns, 1))
		if err != nil {
			return res, err
		}
		for _, t := range turns {
			have[t.ID] = true
		}
		cps, err := db.state.Checkpoints(ctx, id)
		if err != nil {
			return res, err
		}
		for _, c := range cps {
			haveCP[c.ID] = true
		}
	case errors.Is(err, projection.ErrNotFound):
		res.Created = true
	default:
		return res, err
	}
	// What to write, in the source's order: new turns with their
	// compactions, and a compaction after the last turn already imported.
	lastHave := -1
	for i, t := range s.Turns {
		if have[t.ID] {
			lastHave = i
		}
	}
	var todo []importer.Turn
	var between *importer.Checkpoint // after the last turn imported before
	var usage rollout.Usage
	for i, t := range s.Turns {
		cp := t.Checkpoint
		if cp != nil && haveCP[cp.ID] {
			cp = nil
		}
		if !have[t.ID] {
			t.Checkpoint = cp
			todo = append(todo, t)
			usage = addUsage(usage, t.Usage)
			continue
		}
		res.Existing++
		switch {
		case cp == nil:
		case i == lastHave:
			between = cp
		default:
			res.Skipped = append(res.Skipped, importer.Skip{Line: cp.Line, Reason: "a compaction inside the history imported before: not added"})
		}
	}
	if s.Usage != nil && len(todo) > 0 {
		// The source keeps the session's total only: the new turns get
		// what the thread does not have yet, on the last of them.
		var had rollout.Usage
		if !res.Created {
			had = info.Usage
		}
		last := &todo[len(todo)-1]
		last.Usage = addUsage(last.Usage, subUsage(*s.Usage, addUsage(had, usage)))
	}
	res.Turns = len(todo)
	for _, t := range todo {
		if t.Checkpoint != nil {
			res.Checkpoints++
		}
	}
	if between != nil {
		res.Checkpoints++
	}
	meta := importMetadata(s, info, res.Created)
	if o.DryRun {
		return db.importSubagents(ctx, s, o, src, id, res)
	}
	if len(todo) > 0 || res.Created || between != nil || meta != nil {
		if err := db.importWrite(ctx, s, src, id, &res, todo, between, meta); err != nil {
			return res, err
		}
	}
	if len(s.Skips) > 0 && (res.Created || len(todo) > 0) {
		rep := recovery.Report{}
		for _, sk := range s.Skips {
			rep.Skipped = append(rep.Skipped, recovery.Skipped{Offset: int64(sk.Line), Kind: "import:" + s.Format, Reason: sk.Reason})
		}
		if err := db.state.RecordResumeReport(ctx, id, rep); err != nil {
			db.logger().Warn("rolloutdb: could not keep the import's skipped lines as diagnostics", "thread", id, "err", err.Error())
		}
	}
	return db.importSubagents(ctx, s, o, src, id, res)
}

// importWrite creates or opens the thread and writes what Import planned.
func (db *DB) importWrite(ctx context.Context, s importer.Session, src rollout.Source, id string, res *ImportResult,
	todo []importer.Turn, between *importer.Checkpoint, meta *MetadataUpdate) error {
	var th *Thread
	var err error
	if res.Created {
		th, err = db.CreateThread(ctx, ThreadOptions{ID: id, Source: src, Created: s.Created,
			Metadata: map[string]string{"import_format": s.Format, "import_source_id": s.SourceID, "import_path": s.SourcePath}})
	} else {
		th, err = db.OpenThread(ctx, id)
	}
	if err != nil {
		return errors.Wrapf(err, "import %s", s.SourcePath)
	}
	if meta != nil {
		// At the session's last activity, not now: List orders by it.
		at := s.Created
		for _, t := range s.Turns {
			if t.Ended.After(at) {
				at = t.Ended
			}
		}
		if _, err := th.updateMetadata(ctx, *meta, at); err != nil {
			return errors.CombineErrors(errors.Wrapf(err, "import %s: metadata", s.SourcePath), th.Close())
		}
	}
	if between != nil && len(s.Turns) > 0 {
		covered := ""
		for _, t := range s.Turns {
			if t.Checkpoint != nil && t.Checkpoint.ID == between.ID {
				covered = t.ID
			}
		}
		rec, err := importCheckpoint(*between, covered)
		if err == nil {
			_, err = th.append(ctx, []rollout.Record{rec}, rollout.AppendOptions{})
		}
		if err != nil {
			res.Checkpoints = 0
			return errors.CombineErrors(errors.Wrapf(err, "import %s: compaction at line %d", s.SourcePath, between.Line), th.Close())
		}
	}
	for i, t := range todo {
		if err := importTurn(ctx, th, t); err != nil {
			res.Turns = i
			return errors.CombineErrors(errors.Wrapf(err, "import %s: turn at line %d", s.SourcePath, t.Line), th.Close())
		}
	}
	return th.Close()
}

// importSubagents imports the session's subagents under the thread id.
func (db *DB) importSubagents(ctx context.Context, s importer.Session, o ImportOptions, src rollout.Source, id string, res ImportResult) (ImportResult, error) {
	root := src.Root
	if root == "" {
		root = id
	}
	for _, sub := range s.Subagents {
		r, err := db.importSession(ctx, sub, o, rollout.Source{Kind: rollout.SourceSubagent, Client: s.Format, Parent: id, Root: root, Depth: src.Depth + 1})
		res.Subagents = append(res.Subagents, r)
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// importMetadata is the metadata update that makes the thread say what the
// source says (nil: nothing to change).
func importMetadata(s importer.Session, info projection.ThreadInfo, created bool) *MetadataUpdate {
	var u MetadataUpdate
	set := false
	if s.Name != "" && (created || info.Name != s.Name) {
		name := s.Name
		u.Name, set = &name, true
	}
	for _, l := range s.Labels {
		if l != "" && (created || !slices.Contains(info.Labels, l)) {
			u.AddLabels, set = append(u.AddLabels, l), true
		}
	}
	for k, v := range s.Flags {
		if k != "" && (created || info.Flags[k] != v) {
			if u.Flags == nil {
				u.Flags = map[string]bool{}
			}
			u.Flags[k], set = v, true
		}
	}
	if s.State != "" && (created || info.State != s.State) {
		state := s.State
		u.Status, set = &state, true
	}
	if !set {
		return nil
	}
	return &u
}

// importCheckpoint is the checkpoint record of a source's compaction
// after the turn covered.
func importCheckpoint(c importer.Checkpoint, covered string) (rollout.Record, error) {
	return compaction.Record(rollout.Checkpoint{ID: c.ID, CoveredTurn: covered, ReplacementHistory: c.History,
		TokensBefore: c.TokensBefore, TokensAfter: c.TokensAfter, Trigger: rollout.TriggerPostTurn}, "")
}

func addUsage(a, b rollout.Usage) rollout.Usage {
	return rollout.Usage{InputTokens: a.InputTokens + b.InputTokens, CachedInputTokens: a.CachedInputTokens + b.CachedInputTokens,
		OutputTokens: a.OutputTokens + b.OutputTokens, ReasoningTokens: a.ReasoningTokens + b.ReasoningTokens, TotalTokens: a.TotalTokens + b.TotalTokens}
}

// subUsage is a-b, no field below zero.
func subUsage(a, b rollout.Usage) rollout.Usage {
	d := func(x, y int64) int64 { return max(x-y, 0) }
	return rollout.Usage{InputTokens: d(a.InputTokens, b.InputTokens), CachedInputTokens: d(a.CachedInputTokens, b.CachedInputTokens),
		OutputTokens: d(a.OutputTokens, b.OutputTokens), ReasoningTokens: d(a.ReasoningTokens, b.ReasoningTokens), TotalTokens: d(a.TotalTokens, b.TotalTokens)}
}

// importTurn writes one imported turn as one frame, with its times.
func importTurn(ctx context.Context, th *Thread, t importer.Turn) error {
	at := func(ts time.Time) time.Time {
		if ts.IsZero() {
			return time.Now()
		}
		return ts
	}
	start, err := rollout.NewRecord(rollout.KindTurnStarted, t.ID, rollout.TurnStarted{Model: t.Model})
	if err != nil {
		return err
	}
	start.Time = at(t.Started)
	recs := []rollout.Record{start}
	for _, it := range t.Items {
		it, err := th.db.spill(th.id, it)
		if err != nil {
			return err
		}
		rec, err := itemRecord(t.ID, it)
		if err != nil {
			return err
		}
		rec.Time = at(t.Ended)
		recs = append(recs, rec)
	}
	if len(t.ModelHistory) > 0 {
		rec, err := rollout.NewRecord(rollout.KindModelHistoryAppended, t.ID, rollout.ModelHistory{Messages: t.ModelHistory})
		if err != nil {
			return err
		}
		rec.Time = at(t.Ended)
		recs = append(recs, rec)
	}
	if t.Checkpoint != nil {
		rec, err := importCheckpoint(*t.Checkpoint, t.ID)
		if err != nil {
			return err
		}
		rec.Turn, rec.Time = t.ID, at(t.Ended)
		recs = append(recs, rec)
	}
	end, err := rollout.NewRecord(rollout.KindTurnCompleted, t.ID, rollout.TurnCompleted{Status: rollout.TurnStatusCompleted, Usage: t.Usage})
	if t.Aborted != "" {
		end, err = rollout.NewRecord(rollout.KindTurnAborted, t.ID, rollout.TurnAborted{Reason: t.Aborted})
	}
	if err != nil {
		return err
	}
	end.Time = at(t.Ended)
	recs = append(recs, end)
	th.mu.Lock()
	defer th.mu.Unlock()
	if th.turn != nil {
		return errors.Wrapf(ErrTurnInProgress, "thread %s", th.id)
	}
	// One frame if it fits (after a crash, all of the turn or none of it);
	// a larger turn in frames of at most importFrame bytes of bodies, the
	// end record in the last: a crash between them leaves the turn open,
	// and a later import does not add to a turn already there.
	var batch []rollout.Record
	size := 0
	for i, rec := range recs {
		batch = append(batch, rec)
		size += len(rec.Body)
		if i == len(recs)-1 || size+len(recs[i+1].Body) > importFrame {
			if _, err := th.append(ctx, batch, rollout.AppendOptions{}); err != nil {
				return err
			}
			batch, size = nil, 0
		}
	}
	return nil
}

// importFrame bounds the record bodies of one frame an import writes (a
// frame holds at most rollout.MaxFrameSize).
const importFrame = 4 << 20
