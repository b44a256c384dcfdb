package rolloutdb

import (
	"context"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

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
	Checkpoints int `json:"checkpoints"`
	// RolledBack are turns imported before that the source has rolled
	// back since: rolled back in the thread too.
	RolledBack int             `json:"rolled_back,omitempty"`
	Skipped    []importer.Skip `json:"skipped"`
	// Subagents are the results of the session's subagents.
	Subagents []ImportResult `json:"subagents,omitempty"`
}

// Import writes a session read by package importer as a thread, and its
// subagents as subagent threads with open edges from it (so they archive,
// restore and delete with it). The thread id is derived from the source's
// session id, so importing the same session again changes nothing, and
// importing one that has grown appends only its new turns (a turn already
// imported is not changed, even if the source added to it since). Turns
// are written whole, several to a frame (a turn larger than a frame in
// several), with the source's timestamps, token usage and exact model
// history; a compaction of the source is a checkpoint after the
// turn it follows (a compaction inside a turn stands for the whole turn:
// what followed it is in its replacement history). The source's name,
// labels, flags and status are set on the thread, and set again by a
// later import where the thread differs: the source's say wins (rename an
// imported thread in its tool); a label the source dropped, or a status
// it cleared, stays. A source's rollback of turns imported before is
// rolled back in the thread when they are its last turns. Skipped source lines
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
		pid, id := importer.ThreadID(s.Format, s.Parent), importer.ThreadID(s.Format, s.SourceID)
		p, err := db.state.Thread(ctx, pid)
		var cycle bool
		if err == nil {
			cycle, err = db.descendsFrom(ctx, pid, id)
		}
		if err == nil && cycle {
			// A parent that is the thread, or its own descendant: none.
			s.Skips = append(slices.Clip(s.Skips), importer.Skip{Reason: fmt.Sprintf("its parent session %s is itself or its subagent: no edge to it", s.Parent)})
		} else if err == nil {
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

// descendsFrom reports whether thread is root, or a subagent of it at any
// depth, by its header's parent and by subagent edges (an edge added
// after the thread was imported on its own).
func (db *DB) descendsFrom(ctx context.Context, thread, root string) (bool, error) {
	seen := map[string]bool{}
	todo := []string{thread}
	for len(todo) > 0 && len(seen) < 10_000 {
		t := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if t == root {
			return true, nil
		}
		if seen[t] {
			continue
		}
		seen[t] = true
		edges, err := db.state.Edges(ctx, projection.EdgeFilter{Child: t})
		if err != nil {
			return false, err
		}
		for _, e := range edges {
			todo = append(todo, e.Parent)
		}
		if info, err := db.state.Thread(ctx, t); err == nil && info.Source.Parent != "" {
			todo = append(todo, info.Source.Parent)
		}
	}
	return false, nil
}

// importPlan is what an import of a session writes into its thread.
type importPlan struct {
	exists   bool
	info     projection.ThreadInfo
	existing int
	todo     []importer.Turn      // new turns, with their compactions
	between  *importer.Checkpoint // a compaction after the last turn imported before,
	covered  string               // which is this turn
	rollback int                  // trailing turns the source rolled back
	meta     *MetadataUpdate
	skips    []importer.Skip
}

func (p *importPlan) work() bool {
	return !p.exists || len(p.todo) > 0 || p.between != nil || p.meta != nil || p.rollback > 0
}

// planImport compares the session with its thread as state.db has it.
func (db *DB) planImport(ctx context.Context, s importer.Session, id string) (importPlan, error) {
	var p importPlan
	have, haveCP := map[string]bool{}, map[string]bool{}
	info, err := db.state.Thread(ctx, id)
	switch {
	case err == nil && info.Status == projection.LocationArchived:
		return p, errors.WithHint(errors.Wrapf(ErrThreadArchived, "import %s into %s", s.SourcePath, id), "restore it first (rolloutctl restore)")
	case err == nil:
		p.exists, p.info = true, info
		turns, err := db.state.TurnIDs(ctx, id) // ids only: no frame read
		if err != nil {
			return p, err
		}
		for _, t := range turns {
			have[t] = true
		}
		// The source rolled back turns this thread has last: so does it
		// (never one the source still has).
		live := map[string]bool{}
		for _, t := range s.Turns {
			live[t.ID] = true
		}
		for i := len(turns) - 1; i >= 0 && slices.Contains(s.RolledBack, turns[i]) && !live[turns[i]]; i-- {
			p.rollback++
			delete(have, turns[i])
		}
		cps, err := db.state.Checkpoints(ctx, id)
		if err != nil {
			return p, err
		}
		for _, c := range cps {
			haveCP[c.ID] = true
		}
	case errors.Is(err, projection.ErrNotFound):
	default:
		return p, err
	}
	lastHave := -1
	for i, t := range s.Turns {
		if have[t.ID] {
			lastHave = i
		}
	}
	var usage rollout.Usage
	for i, t := range s.Turns {
		cp := t.Checkpoint
		if cp != nil && haveCP[cp.ID] {
			cp = nil
		}
		if !have[t.ID] {
			t.Checkpoint = cp
			p.todo = append(p.todo, t)
			usage = addUsage(usage, t.Usage)
			continue
		}
		p.existing++
		switch {
		case cp == nil:
		case i == lastHave:
			p.between, p.covered = cp, t.ID
		default:
			p.skips = append(p.skips, importer.Skip{Line: cp.Line, Reason: "a compaction inside the history imported before: not added"})
		}
	}
	if s.Usage != nil && len(p.todo) > 0 {
		// The source keeps the session's total only: the new turns get
		// what the thread does not have yet, on the last of them.
		last := &p.todo[len(p.todo)-1]
		last.Usage = addUsage(last.Usage, subUsage(*s.Usage, addUsage(info.Usage, usage)))
	}
	p.meta = importMetadata(s, info)
	return p, nil
}

func (db *DB) importSession(ctx context.Context, s importer.Session, o ImportOptions, src rollout.Source) (ImportResult, error) {
	id := importer.ThreadID(s.Format, s.SourceID)
	res := ImportResult{ID: id, SourcePath: s.SourcePath, Parent: src.Parent, Skipped: append([]importer.Skip{}, s.Skips...)}
	if err := rollout.ValidateThreadID(id); err != nil {
		return res, errors.Wrapf(err, "import %s", s.SourcePath)
	}
	p, err := db.planImport(ctx, s, id)
	if err != nil {
		return res, err
	}
	if o.DryRun || !p.work() {
		res.report(p)
		if !o.DryRun && src.Parent != "" {
			if err := db.importEdge(ctx, src.Parent, id); err != nil {
				return res, err
			}
		}
		return db.importSubagents(ctx, s, o, src, id, res)
	}
	// Planned again under the thread's lock: another import of the same
	// session may have written since.
	var th *Thread
	if !p.exists {
		th, err = db.CreateThread(ctx, ThreadOptions{ID: id, Source: src, Created: s.Created,
			Metadata: map[string]string{"import_format": s.Format, "import_source_id": s.SourceID, "import_path": s.SourcePath}})
		res.Created = err == nil
	}
	if p.exists || errors.Is(err, rollout.ErrThreadExists) {
		th, err = db.OpenThread(ctx, id)
	}
	if err != nil {
		return res, errors.Wrapf(err, "import %s", s.SourcePath)
	}
	if p, err = db.planImport(ctx, s, id); err != nil {
		return res, errors.CombineErrors(err, th.Close())
	}
	res.report(p)
	err = db.importWrite(ctx, th, s, &res, p)
	if err = errors.CombineErrors(err, th.Close()); err != nil {
		return res, err
	}
	if src.Parent != "" {
		if err := db.importEdge(ctx, src.Parent, id); err != nil {
			return res, err
		}
	}
	if skips := res.Skipped; len(skips) > 0 && (res.Created || res.Turns > 0) {
		rep := recovery.Report{}
		for _, sk := range skips {
			if !sk.Later { // nothing lost: not a diagnostic
				rep.Skipped = append(rep.Skipped, recovery.Skipped{Offset: int64(sk.Line), Kind: "import:" + s.Format, Reason: sk.Reason})
			}
		}
		if len(rep.Skipped) > 0 {
			if err := db.state.RecordResumeReport(ctx, id, rep); err != nil {
				db.logger().Warn("rolloutdb: could not keep the import's skipped lines as diagnostics", "thread", id, "err", err.Error())
			}
		}
	}
	return db.importSubagents(ctx, s, o, src, id, res)
}

// report puts what the plan writes into the result.
func (r *ImportResult) report(p importPlan) {
	r.Turns, r.Existing, r.RolledBack = len(p.todo), p.existing, p.rollback
	r.Checkpoints = 0
	for _, t := range p.todo {
		if t.Checkpoint != nil {
			r.Checkpoints++
		}
	}
	if p.between != nil {
		r.Checkpoints++
	}
	r.Skipped = append(r.Skipped, p.skips...)
}

// importEdge opens the subagent edge from parent unless there is one (a
// thread imported before its parent, or whose edge was not made).
func (db *DB) importEdge(ctx context.Context, parent, child string) error {
	edges, err := db.state.Edges(ctx, projection.EdgeFilter{Parent: parent, Child: child})
	if err == nil && len(edges) == 0 {
		err = db.state.OpenEdge(ctx, parent, child)
	}
	return err
}

// importWrite writes what the plan says, through the open thread.
func (db *DB) importWrite(ctx context.Context, th *Thread, s importer.Session, res *ImportResult, p importPlan) error {
	// The result counts what was written, whatever stops it.
	res.Turns, res.Checkpoints, res.RolledBack = 0, 0, 0
	skip := func(sk importer.Skip) { res.Skipped = append(res.Skipped, sk) }
	if p.rollback > 0 {
		if _, err := th.Rollback(ctx, p.rollback); err != nil {
			return errors.Wrapf(err, "import %s: the source's rollback", s.SourcePath)
		}
		res.RolledBack = p.rollback
	}
	th.mu.Lock()
	defer th.mu.Unlock()
	if th.turn != nil {
		return errors.Wrapf(ErrTurnInProgress, "thread %s", th.id)
	}
	if c := db.fitCheckpoint(p.between, skip); c != nil {
		// Between turns, in a frame of its own (as a host's manual one).
		rec, err := importCheckpoint(*c, p.covered, rollout.TriggerManual)
		if err == nil {
			_, err = th.append(ctx, []rollout.Record{rec}, rollout.AppendOptions{})
		}
		if err != nil {
			return errors.Wrapf(err, "import %s: compaction at line %d", s.SourcePath, c.Line)
		}
		res.Checkpoints++
	}
	// Whole turns in frames of at most private.importFrame bytes of bodies (one
	// sync each, not one per turn): after a crash, a turn is all there or
	// not at all, but for a turn larger than a frame, whose end record is
	// in its last frame (it is left open, and a later import does not add
	// to a turn already there).
	var batch []rollout.Record
	size, cps := 0, 0 // bytes, and checkpoints of the turns in the batch
	durable := func(n, c int) { res.Turns, res.Checkpoints = n, res.Checkpoints+c }
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, err := th.append(ctx, batch, rollout.AppendOptions{})
		batch, size = nil, 0
		return err
	}
	for i, t := range p.todo {
		t.Checkpoint = db.fitCheckpoint(t.Checkpoint, skip)
		recs, err := turnRecords(th, t, skip)
		if err != nil {
			return errors.Wrapf(err, "import %s: turn at line %d", s.SourcePath, t.Line)
		}
		turnSize := 0
		for _, r := range recs {
			turnSize += len(r.Body)
		}
		if size+turnSize > db.private.importFrame || len(batch)+len(recs) > rollout.MaxRecordsPerFrame {
			if err := flush(); err != nil {
				return errors.Wrapf(err, "import %s: turn at line %d", s.SourcePath, t.Line)
			}
			durable(i, cps)
			cps = 0
		}
		for _, r := range recs {
			if len(batch) > 0 && (size+len(r.Body) > db.private.importFrame || len(batch) == rollout.MaxRecordsPerFrame) {
				if err := flush(); err != nil {
					return errors.Wrapf(err, "import %s: turn at line %d", s.SourcePath, t.Line)
				}
			}
			batch, size = append(batch, r), size+len(r.Body)
		}
		if t.Checkpoint != nil {
			cps++
		}
	}
	if err := flush(); err != nil {
		return errors.Wrapf(err, "import %s", s.SourcePath)
	}
	durable(len(p.todo), cps)
	if p.meta != nil {
		// After the turns, at the session's last activity (not now: List
		// orders by it).
		at := s.Created
		for _, t := range s.Turns {
			if t.Ended.After(at) {
				at = t.Ended
			}
		}
		if _, err := th.updateMetadataLocked(ctx, *p.meta, at); err != nil {
			return errors.Wrapf(err, "import %s: metadata", s.SourcePath)
		}
	}
	return nil
}

// fitCheckpoint is c if it fits a record, else nil (the turns before it
// stand in for it: resume reads them), reported through skip.
func (db *DB) fitCheckpoint(c *importer.Checkpoint, skip func(importer.Skip)) *importer.Checkpoint {
	if c == nil {
		return nil
	}
	size := func(h [][]byte) (n int) {
		for _, m := range h {
			n += len(m)
		}
		return n
	}
	if size(c.History) <= db.private.maxImportRecord {
		return c
	}
	// Not its summary alone: it stands for the whole turn, and would lose
	// what followed it.
	skip(importer.Skip{Line: c.Line, Reason: fmt.Sprintf("compaction %s: %d bytes, too large for a record: not written (resume reads the turns instead)", c.ID, size(c.History))})
	return nil
}

// importSubagents imports the session's subagents under the thread id.
func (db *DB) importSubagents(ctx context.Context, s importer.Session, o ImportOptions, src rollout.Source, id string, res ImportResult) (ImportResult, error) {
	root := src.Root
	if root == "" {
		root = id
	}
	var errs error
	for _, sub := range s.Subagents {
		// One that fails does not keep the others out.
		r, err := db.importSession(ctx, sub, o, rollout.Source{Kind: rollout.SourceSubagent, Client: s.Format, Parent: id, Root: root, Depth: src.Depth + 1})
		res.Subagents = append(res.Subagents, r)
		if errs = errors.CombineErrors(errs, err); ctx.Err() != nil {
			break
		}
	}
	return res, errs
}

// importMetadata is the metadata update that makes the thread say what the
// source says (nil: nothing to change).
func importMetadata(s importer.Session, info projection.ThreadInfo) *MetadataUpdate {
	var u MetadataUpdate
	set := false
	if s.Name != "" && info.Name != s.Name {
		name := s.Name
		u.Name, set = &name, true
	}
	for _, l := range s.Labels {
		if l != "" && !slices.Contains(info.Labels, l) {
			u.AddLabels, set = append(u.AddLabels, l), true
		}
	}
	for k, v := range s.Flags {
		if k != "" && info.Flags[k] != v {
			if u.Flags == nil {
				u.Flags = map[string]bool{}
			}
			u.Flags[k], set = v, true
		}
	}
	if s.State != "" && info.State != s.State {
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
func importCheckpoint(c importer.Checkpoint, covered, trigger string) (rollout.Record, error) {
	return compaction.Record(rollout.Checkpoint{ID: c.ID, CoveredTurn: covered, ReplacementHistory: c.History,
		TokensBefore: c.TokensBefore, TokensAfter: c.TokensAfter, Trigger: trigger}, "")
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

// turnRecords are the records of one imported turn, with its times; what
// cannot be written as it is (a message over maxImportRecord) is cut, or
// left out, and reported through skip.
func turnRecords(th *Thread, t importer.Turn, skip func(importer.Skip)) ([]rollout.Record, error) {
	maxImportRecord, importFrame := th.db.private.maxImportRecord, th.db.private.importFrame
	at := func(ts time.Time) time.Time {
		if ts.IsZero() {
			return time.Now()
		}
		return ts
	}
	start, err := rollout.NewRecord(rollout.KindTurnStarted, t.ID, rollout.TurnStarted{Model: t.Model})
	if err != nil {
		return nil, err
	}
	start.Time = at(t.Started)
	recs := []rollout.Record{start}
	for _, it := range t.Items {
		it, err := th.db.spill(th.id, it)
		if err != nil {
			return nil, err
		}
		if len(it.Text)+len(it.Arguments) > maxImportRecord {
			n := len(it.Text)
			it.Text = truncateUTF8(it.Text, maxImportRecord/2) + fmt.Sprintf("\n[cut by import: %d bytes]", n)
			it.Arguments = truncateUTF8(it.Arguments, maxImportRecord/4)
			skip(importer.Skip{Line: t.Line, Reason: fmt.Sprintf("item %s of turn %s: %d bytes of text, cut to %d", it.ID, t.ID, n, maxImportRecord/2)})
		}
		rec, err := itemRecord(t.ID, it)
		if err != nil {
			return nil, err
		}
		rec.Time = at(t.Ended)
		recs = append(recs, rec)
	}
	// The exact history in records of at most importFrame bytes (resume
	// joins them); a message too large for a record leaves the turn's
	// history to be rebuilt from its items.
	var chunk [][]byte
	size := 0
	var history []rollout.Record
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		rec, err := rollout.NewRecord(rollout.KindModelHistoryAppended, t.ID, rollout.ModelHistory{Messages: chunk})
		rec.Time = at(t.Ended)
		history, chunk, size = append(history, rec), nil, 0
		return err
	}
	for _, m := range t.ModelHistory {
		if len(m) > maxImportRecord {
			skip(importer.Skip{Line: t.Line, Reason: fmt.Sprintf("turn %s: a model message of %d bytes: its exact history is left out (rebuilt from its items)", t.ID, len(m))})
			history, chunk = nil, nil
			break
		}
		if size+len(m) > importFrame {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		chunk, size = append(chunk, m), size+len(m)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	recs = append(recs, history...)
	if t.Checkpoint != nil {
		rec, err := importCheckpoint(*t.Checkpoint, t.ID, rollout.TriggerPostTurn)
		if err != nil {
			return nil, err
		}
		rec.Turn, rec.Time = t.ID, at(t.Ended)
		recs = append(recs, rec)
	}
	end, err := rollout.NewRecord(rollout.KindTurnCompleted, t.ID, rollout.TurnCompleted{Status: rollout.TurnStatusCompleted, Usage: t.Usage})
	if t.Aborted != "" {
		end, err = rollout.NewRecord(rollout.KindTurnAborted, t.ID, rollout.TurnAborted{Reason: t.Aborted})
	}
	if err != nil {
		return nil, err
	}
	end.Time = at(t.Ended)
	recs = append(recs, end)
	return recs, nil
}

// defaultImportFrame bounds the record bodies of one frame an import
// writes (a frame holds at most rollout.MaxFrameSize);
// defaultMaxImportRecord bounds one record's (DB.private lowers them in
// tests).
const (
	defaultImportFrame     = 4 << 20
	defaultMaxImportRecord = 12 << 20
)

// truncateUTF8 is s cut to at most n bytes, at a rune boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
