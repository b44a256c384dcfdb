package rolloutdb

import (
	"context"
	"fmt"

	"github.com/cockroachdb/errors"
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
	RolledBack int `json:"rolled_back,omitempty"`
	// Report is what reading the session found besides turns (damaged
	// lines, unknown and ignored types) and what the import did otherwise
	// than the source (notes).
	importer.Report
	// Subagents are the results of the session's subagents.
	Subagents []ImportResult `json:"subagents,omitempty"`
}

// Import writes the session r reads as a thread, and its subagents as
// subagent threads with open edges from it (so they archive, restore and
// delete with it), over the public Thread calls: package importer's Plan
// says what to append. The thread id is derived from the source's session
// id (importer.ThreadID): importing the same session again changes
// nothing, a session that has grown gets its new turns, and one that
// went another way than its thread is refused (importer.ErrDiverged,
// nothing written). Damaged lines, lines of an unknown type and what the
// import left out are kept as diagnostics of the thread (kind
// "import:<format>", offset the line). An archived thread is refused
// (restore it first). The result counts what was written, whatever stops
// it.
//
// A session read on its own that names a parent session (DotCraft and
// Codex keep a subagent in its own file) is a subagent thread of that
// session's thread if it was imported before; if not, it is imported on
// its own, and the edge is added by an import after the parent's.
func (db *DB) Import(ctx context.Context, r *importer.Reader, o ImportOptions) (ImportResult, error) {
	s := r.Session()
	src := rollout.Source{Kind: SourceImport, Client: s.Format}
	var notes []importer.Note
	if s.Parent != "" {
		pid, id := importer.ThreadID(s.Format, s.Parent), importer.ThreadID(s.Format, s.SourceID)
		p, err := db.ThreadInfo(ctx, pid)
		var cycle bool
		if err == nil {
			cycle, err = db.descendsFrom(ctx, pid, id)
		}
		switch {
		case err == nil && cycle:
			// A parent that is the thread, or its own descendant: none.
			notes = append(notes, importer.Note{Reason: fmt.Sprintf("its parent session %s is itself or its subagent: no edge to it", s.Parent)})
		case err == nil:
			root := p.Source.Root
			if root == "" {
				root = pid
			}
			src = rollout.Source{Kind: rollout.SourceSubagent, Client: s.Format, Parent: pid, Root: root, Depth: p.Source.Depth + 1}
		case errors.Is(err, projection.ErrNotFound):
			notes = append(notes, importer.Note{Reason: fmt.Sprintf("its parent session %s is not imported (yet): no edge to it", s.Parent)})
		default:
			return ImportResult{}, err
		}
	}
	return db.importSession(ctx, r, o, src, notes)
}

// importSession writes one session, then its subagents.
func (db *DB) importSession(ctx context.Context, r *importer.Reader, o ImportOptions, src rollout.Source, notes []importer.Note) (ImportResult, error) {
	s := r.Session()
	id := importer.ThreadID(s.Format, s.SourceID)
	res := ImportResult{ID: id, SourcePath: s.SourcePath, Parent: src.Parent}
	if err := rollout.ValidateThreadID(id); err != nil {
		return res, errors.Wrapf(err, "import %s", s.SourcePath)
	}
	// The first turn before the thread: a file that cannot be read makes
	// none.
	more := r.Next()
	if err := r.Err(); !more && err != nil {
		return res, errors.Wrapf(err, "import %s", s.SourcePath)
	}
	th, have, err := db.importThread(ctx, s, id, src, o.DryRun, &res)
	if err != nil {
		return res, err
	}
	plan := importer.NewPlan(s, have, importer.Limits{Frame: db.private.importFrame, Record: db.private.maxImportRecord}, func(it rollout.Item) (rollout.Item, error) {
		if th == nil { // a dry run
			return it, nil
		}
		return db.spill(id, it)
	})
	write := func(frames []importer.Frame) error {
		for _, f := range frames {
			if th != nil {
				if _, err := th.Append(ctx, f.Records, rollout.AppendOptions{}); err != nil {
					return err
				}
			}
			res.Turns, res.Checkpoints, res.RolledBack = res.Turns+f.Turns, res.Checkpoints+f.Checkpoints, res.RolledBack+f.RolledBack
		}
		return nil
	}
	for ; err == nil && more; more = r.Next() {
		var frames []importer.Frame
		if frames, err = plan.Add(r.Turn()); err == nil {
			err = write(frames)
		}
	}
	if err == nil {
		if err = r.Err(); err == nil {
			var frames []importer.Frame
			if frames, err = plan.Finish(); err == nil {
				err = write(frames)
			}
		}
	}
	res.Existing = plan.Existing()
	res.Report = s.Report
	res.Notes = append(append(append([]importer.Note{}, s.Report.Notes...), notes...), plan.Notes()...)
	// Lists and a map, never null: scripts read them.
	res.Damaged, res.Unknown = append([]importer.Damage{}, res.Damaged...), append([]importer.Unknown{}, res.Unknown...)
	if res.Ignored == nil {
		res.Ignored = map[string]int{}
	}
	if errors.Is(err, importer.ErrDiverged) {
		err = errors.WithHint(errors.Wrapf(err, "%s is not imported into %s, made from %s", s.SourcePath, id, db.importedFrom(ctx, id)),
			"import the file on its own into another workspace to keep both")
	}
	if th != nil {
		err = errors.CombineErrors(err, th.Close())
	}
	if err != nil {
		return res, errors.Wrapf(err, "import %s", s.SourcePath)
	}
	if !o.DryRun {
		if src.Parent != "" && !res.Created {
			if err := db.importEdge(ctx, src.Parent, id); err != nil {
				return res, err
			}
		}
		db.importDiagnostics(ctx, id, s.Format, res)
	}
	return db.importSubagents(ctx, r, o, src, id, res)
}

// importThread finds the session's thread, makes it (not in a dry run)
// if there is none, and says what it holds. A thread it opens is held
// (its lock) until the import ends, so that another import of the session
// does not write between.
func (db *DB) importThread(ctx context.Context, s *importer.Session, id string, src rollout.Source, dry bool, res *ImportResult) (*Thread, importer.Thread, error) {
	info, err := db.ThreadInfo(ctx, id)
	switch {
	case err == nil && info.Status == projection.LocationArchived:
		return nil, importer.Thread{}, errors.WithHint(errors.Wrapf(ErrThreadArchived, "import %s into %s", s.SourcePath, id), "restore it first (rolloutctl restore)")
	case errors.Is(err, projection.ErrNotFound):
		if dry {
			return nil, importer.Thread{}, nil
		}
		th, err := db.CreateThread(ctx, ThreadOptions{ID: id, Source: src, Created: s.Created,
			Metadata: map[string]string{"import_format": s.Format, "import_source_id": s.SourceID, "import_path": s.SourcePath}})
		if err == nil {
			res.Created = true
			return th, importer.Thread{}, nil
		}
		if !errors.Is(err, rollout.ErrThreadExists) {
			return nil, importer.Thread{}, errors.Wrapf(err, "import %s", s.SourcePath)
		}
		// Another import made it since: what it holds.
	case err != nil:
		return nil, importer.Thread{}, err
	}
	var th *Thread
	if !dry {
		if th, err = db.OpenThread(ctx, id); err != nil {
			return nil, importer.Thread{}, errors.Wrapf(err, "import %s", s.SourcePath)
		}
	}
	have, err := db.importHave(ctx, id)
	if err != nil && th != nil {
		err = errors.CombineErrors(err, th.Close())
		th = nil
	}
	return th, have, err
}

// importHave is what the thread holds, as state.db has it (brought up to
// its rollout, which only this import appends to while it holds it).
func (db *DB) importHave(ctx context.Context, id string) (importer.Thread, error) {
	info, err := db.ThreadInfo(ctx, id)
	if err != nil {
		return importer.Thread{}, err
	}
	turns, err := db.TurnIDs(ctx, id) // ids only: no frame read
	if err != nil {
		return importer.Thread{}, err
	}
	cps, err := db.Checkpoints(ctx, id)
	if err != nil {
		return importer.Thread{}, err
	}
	have := importer.Thread{Exists: true, Turns: turns, Name: info.Name, Labels: info.Labels, Flags: info.Flags, State: info.State, Usage: info.Usage}
	for _, c := range cps {
		have.Checkpoints = append(have.Checkpoints, c.ID)
	}
	return have, nil
}

// importedFrom is the source file a thread was first imported from, as
// its header says.
func (db *DB) importedFrom(ctx context.Context, id string) string {
	d, err := db.log.Read(ctx, id)
	if err != nil {
		return "an earlier import"
	}
	defer d.Close()
	rd, err := rollout.NewReader(d, d.Size, rollout.ReaderOptions{ReadAhead: 64 << 10})
	if err != nil || !rd.Next() {
		return "an earlier import"
	}
	rec := rd.Record()
	if v, err := rec.DecodeBody(); err == nil {
		if h, ok := v.(*rollout.ThreadOpened); ok && h.Metadata["import_path"] != "" {
			return h.Metadata["import_path"]
		}
	}
	return "an earlier import"
}

// importDiagnostics keeps the lines the import lost as diagnostics of the
// thread: damaged lines, lines of unknown types, and notes of what was not
// imported whole.
func (db *DB) importDiagnostics(ctx context.Context, id, format string, res ImportResult) {
	if !res.Created && res.Turns == 0 {
		return // kept by the import that wrote the thread
	}
	kind := "import:" + format
	var rep recovery.Report
	for _, d := range res.Damaged {
		reason := d.Reason
		if d.Field != "" {
			reason = d.Field + ": " + reason
		}
		rep.Skipped = append(rep.Skipped, recovery.Skipped{Offset: int64(d.Line), Kind: kind, Reason: reason})
	}
	for _, u := range res.Unknown {
		rep.Skipped = append(rep.Skipped, recovery.Skipped{Offset: int64(u.FirstLine), Kind: kind, Reason: fmt.Sprintf("%d line(s) of unknown type %q, the first here", u.Count, u.Type)})
	}
	for _, n := range res.Notes {
		if n.Lost {
			rep.Skipped = append(rep.Skipped, recovery.Skipped{Offset: int64(n.Line), Kind: kind, Reason: n.Reason})
		}
	}
	if len(rep.Skipped) > 0 {
		if err := db.Business().AddDiagnostics(ctx, id, rep); err != nil {
			db.logger().Warn("rolloutdb: could not keep the import's lost lines as diagnostics", "thread", id, "err", err.Error())
		}
	}
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
		edges, err := db.Business().Edges(ctx, projection.EdgeFilter{Child: t})
		if err != nil {
			return false, err
		}
		for _, e := range edges {
			todo = append(todo, e.Parent)
		}
		if info, err := db.ThreadInfo(ctx, t); err == nil && info.Source.Parent != "" {
			todo = append(todo, info.Source.Parent)
		}
	}
	return false, nil
}

// importEdge opens the subagent edge from parent unless there is one (a
// thread imported before its parent, or whose edge was not made).
func (db *DB) importEdge(ctx context.Context, parent, child string) error {
	edges, err := db.Business().Edges(ctx, projection.EdgeFilter{Parent: parent, Child: child})
	if err == nil && len(edges) == 0 {
		err = db.Business().OpenEdge(ctx, parent, child)
	}
	return err
}

// importSubagents imports the session's subagents under the thread id.
func (db *DB) importSubagents(ctx context.Context, r *importer.Reader, o ImportOptions, src rollout.Source, id string, res ImportResult) (ImportResult, error) {
	root := src.Root
	if root == "" {
		root = id
	}
	var errs error
	for _, sub := range r.Subagents() {
		// One that fails does not keep the others out.
		sr, err := db.importSession(ctx, sub, o, rollout.Source{Kind: rollout.SourceSubagent, Client: r.Session().Format, Parent: id, Root: root, Depth: src.Depth + 1}, nil)
		err = errors.CombineErrors(err, sub.Close())
		res.Subagents = append(res.Subagents, sr)
		if errs = errors.CombineErrors(errs, err); ctx.Err() != nil {
			break
		}
	}
	return res, errs
}

// The bytes an import puts in a frame's record bodies (a frame holds at
// most rollout.MaxFrameSize), and in one record (DB.private lowers them in
// tests).
const (
	defaultImportFrame     = 4 << 20
	defaultMaxImportRecord = 12 << 20
)
