package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/importer"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/spf13/cobra"
)

func newImportCmd(g *globals) *cobra.Command {
	var from string
	var dry, asJSON bool
	var active time.Duration
	cmd := &cobra.Command{
		Use:   "import --from claude-code|codex|craft-agents|dotcraft PATH...",
		Short: "Import sessions of another agent tool as threads (again: only what is new)",
		Long: `import reads another tool's session files and writes each session as a
thread, and its subagents as subagent threads. PATH is a file or a
directory to walk: its *.jsonl files (~/.claude/projects/<dir>, whose
<session>/subagents/ files are read with their session;
~/.codex/sessions, a DotCraft workspace's .craft/threads), or its
session.jsonl files for craft-agents ({workspace}/sessions). The thread id is derived from the session id:
importing again changes nothing (a missing or empty -w directory is made
a workspace first), and a session that has grown gets only its new turns.
The report tells apart damaged lines (not JSON, cut off, or a field that
does not read: each with its line and field; they make the exit status
1), record types this version does not know (counted, with the first
line of each: a newer version of the tool wrote them) and types ignored
by design (counted). A session found in several files is imported once,
from the file with the most turns; a file that is a prefix of it adds
nothing (also_read), one that goes another way is refused, naming both
files. A named file that is not of the format, or refused, makes the
exit status 1; a session that cannot be imported (its thread archived
here, a write error) is listed as failed, the others are imported, and
the exit status is 1.
Formats: claude-code, codex, craft-agents, dotcraft.`,
		Args: cobra.MinimumNArgs(1),
	}
	cmd.Flags().StringVar(&from, "from", "", "the source format: "+strings.Join(importer.Formats, ", "))
	cmd.Flags().BoolVar(&dry, "dry-run", false, "read and report, write nothing (a subagent in its own file is reported as on its own: its parent is not imported)")
	cmd.Flags().DurationVar(&active, "active-window", importer.ActiveWindow, "a file changed this recently may still be written: its last turn, if unfinished, waits for a later import (0: import every turn)")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"threads": [{"id", "source_path", "also_read", "parent", "turns", "existing", "created", "checkpoints", "rolled_back", "damaged": [{"line", "field", "reason"}], "unknown": [{"type", "count", "first_line"}], "ignored": {"type": lines}, "notes": [{"line", "reason", "later", "lost"}]}], "refused": [{"path", "reason"}], "failed": [{"path", "reason"}]} (subagents are threads with a parent)`)
	cmd.PreRunE = func(*cobra.Command, []string) error {
		importer.ActiveWindow = active
		if !slices.Contains(importer.Formats, from) {
			return usageError("--from %q: this version imports %s", from, strings.Join(importer.Formats, ", "))
		}
		return nil
	}
	run := withDB(g, func(ctx context.Context, db *rolloutdb.DB, args []string) error {
		imp := &importRun{ctx: ctx, db: db, from: from, dry: dry, out: importOut{Threads: []threadReport{}, Refused: []refusal{}, Failed: []refusal{}}}
		var files []string
		named := map[string]bool{}
		seen := map[string]bool{}
		for _, arg := range args {
			found, unread, err := sessionFiles(from, arg)
			if err != nil {
				return err
			}
			for _, u := range unread { // a directory the walk could not read: the rest goes on
				imp.fail(u.path, u.err)
			}
			for _, path := range found {
				if abs, err := filepath.Abs(path); err == nil {
					if seen[abs] { // named, and found by a walk too
						continue
					}
					seen[abs] = true
				}
				files = append(files, path)
				named[path] = named[path] || path == arg
			}
		}
		groups := imp.group(files, named)
		// A session in its own file that names a parent session
		// (DotCraft's and Codex's subagents) waits until its parent is
		// imported, so that it is imported as its subagent; files are read
		// again rather than kept in memory.
		var waiting []*sessionGroup
		for _, gr := range groups {
			done, err := imp.importGroup(gr, !dry)
			if err != nil {
				return err
			}
			if !done {
				waiting = append(waiting, gr)
			}
		}
		for progress := true; progress && len(waiting) > 0; {
			progress = false
			var still []*sessionGroup
			for _, gr := range waiting {
				done, err := imp.importGroup(gr, true)
				if err != nil {
					return err
				}
				if progress = progress || done; !done {
					still = append(still, gr)
				}
			}
			waiting = still
		}
		for _, gr := range waiting { // their parents are not here
			if _, err := imp.importGroup(gr, false); err != nil {
				return err
			}
		}
		if asJSON {
			if err := printJSON(g, imp.out); err != nil {
				return err
			}
		} else {
			imp.print(g)
		}
		damaged := 0
		for _, t := range imp.out.Threads {
			damaged += len(t.Damaged)
		}
		if damaged > 0 {
			imp.failed = errors.CombineErrors(imp.failed, &exitError{code: exitFailed,
				err: errors.Newf("%d damaged line(s) in the sessions imported: listed above, and kept as the threads' diagnostics", damaged)})
		}
		return imp.failed
	})
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		// Moving in: a missing or empty -w directory becomes a workspace.
		if ents, err := os.ReadDir(g.workspace); os.IsNotExist(err) || err == nil && len(ents) == 0 {
			db, err := rolloutdb.Open(cmd.Context(), g.workspace, rolloutdb.Options{Host: "rolloutctl", NoJournal: true})
			if err != nil {
				return err
			}
			if err := db.Close(); err != nil {
				return err
			}
		}
		return run(cmd, args)
	}
	return cmd
}

// importOut is what the import command prints.
type importOut struct {
	Threads []threadReport `json:"threads"`
	Refused []refusal      `json:"refused"`
	Failed  []refusal      `json:"failed"`
}

type refusal struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// threadReport is one thread's import: one entry a thread, whatever the
// number of files its session was found in.
type threadReport struct {
	rolloutdb.ImportResult
	// AlsoRead are other files of the same session, found to hold nothing
	// the imported one does not (copies, or earlier snapshots).
	AlsoRead []string `json:"also_read,omitempty"`
}

// sessionGroup is the files of one session (one thread): primary is
// imported; the others were compared with it.
type sessionGroup struct {
	thread  string
	parent  string // the parent session, for a session in its own file
	files   []string
	named   bool // a file was named, not found by a walk
	primary string
	also    []string
	done    bool
}

// importRun is one run of the import command.
type importRun struct {
	ctx    context.Context
	db     *rolloutdb.DB
	from   string
	dry    bool
	out    importOut
	failed error
}

func (imp *importRun) fail(path string, err error) {
	imp.out.Failed = append(imp.out.Failed, refusal{path, err.Error()})
	imp.failed = errors.CombineErrors(imp.failed, err)
}

// refuse lists a file not imported: an error (exit 1) if it was named,
// not if a walk found it.
func (imp *importRun) refuse(path string, named bool, err error) {
	imp.out.Refused = append(imp.out.Refused, refusal{path, err.Error()})
	if named {
		imp.failed = errors.CombineErrors(imp.failed, err)
	}
}

// group reads who each file's session is and groups the files by thread,
// in the order first found. A session in several files is imported once:
// from the file with the most turns; a file whose turns are the first of
// those adds nothing; one that goes another way is refused.
func (imp *importRun) group(files []string, named map[string]bool) []*sessionGroup {
	byThread := map[string]*sessionGroup{}
	var groups []*sessionGroup
	for _, path := range files {
		r, err := importer.Open(imp.from, path)
		if errors.Is(err, importer.ErrWrongFormat) {
			imp.refuse(path, named[path], err)
			continue
		}
		if err != nil {
			imp.fail(path, err)
			continue
		}
		s := r.Session()
		id, parent := importer.ThreadID(s.Format, s.SourceID), s.Parent
		r.Close()
		gr := byThread[id]
		if gr == nil {
			gr = &sessionGroup{thread: id, parent: parent}
			byThread[id] = gr
			groups = append(groups, gr)
		}
		gr.files = append(gr.files, path)
		gr.named = gr.named || named[path]
	}
	for _, gr := range groups {
		gr.primary = gr.files[0]
		if len(gr.files) > 1 {
			imp.compare(gr, named)
		}
	}
	return groups
}

// compare picks the file of the session with the most turns (then the
// largest) and sorts the others: a prefix of it is also read, anything
// else is refused naming both files.
func (imp *importRun) compare(gr *sessionGroup, named map[string]bool) {
	ids := map[string][]string{}
	var size = map[string]int64{}
	var ok []string
	for _, f := range gr.files {
		t, err := turnIDs(imp.from, f)
		if err != nil {
			imp.fail(f, err)
			continue
		}
		ids[f] = t
		if st, err := os.Stat(f); err == nil {
			size[f] = st.Size()
		}
		ok = append(ok, f)
	}
	if len(ok) == 0 {
		gr.done = true
		return
	}
	primary := ok[0]
	for _, f := range ok[1:] {
		if len(ids[f]) > len(ids[primary]) || len(ids[f]) == len(ids[primary]) && size[f] > size[primary] {
			primary = f
		}
	}
	gr.primary = primary
	for _, f := range ok {
		switch {
		case f == primary:
		case len(ids[f]) <= len(ids[primary]) && slices.Equal(ids[f], ids[primary][:len(ids[f])]):
			gr.also = append(gr.also, f)
		default:
			imp.refuse(f, named[f], errors.Wrapf(importer.ErrDiverged, "%s is the session of %s (thread %s) gone another way: not imported", f, primary, gr.thread))
		}
	}
}

// turnIDs are the ids of the turns a session file holds.
func turnIDs(format, path string) ([]string, error) {
	r, err := importer.Open(format, path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var ids []string
	for r.Next() {
		ids = append(ids, r.Turn().ID)
	}
	return ids, r.Err()
}

// importGroup imports a session's file; false if it waits for its parent
// (wait: a session whose parent is not imported yet waits).
func (imp *importRun) importGroup(gr *sessionGroup, wait bool) (bool, error) {
	if gr.done {
		return true, nil
	}
	if wait && gr.parent != "" {
		if _, err := imp.db.ThreadInfo(imp.ctx, importer.ThreadID(imp.from, gr.parent)); errors.Is(err, projection.ErrNotFound) {
			return false, nil
		}
	}
	gr.done = true
	r, err := importer.Open(imp.from, gr.primary)
	if errors.Is(err, importer.ErrWrongFormat) {
		imp.refuse(gr.primary, gr.named, err)
		return true, nil
	}
	if err != nil {
		// One session that cannot be read or written does not stop the
		// others: listed, and the exit status says so.
		imp.fail(gr.primary, err)
		return true, imp.ctx.Err()
	}
	defer r.Close()
	res, err := imp.db.Import(imp.ctx, r, rolloutdb.ImportOptions{DryRun: imp.dry})
	switch {
	case errors.Is(err, importer.ErrDiverged) && len(res.Subagents) == 0:
		// The session itself went another way: nothing written.
		imp.refuse(gr.primary, gr.named, err)
		return true, nil
	case err != nil:
		imp.fail(gr.primary, err)
	}
	for i, t := range flatten(res) {
		tr := threadReport{ImportResult: t}
		if i == 0 {
			tr.AlsoRead = gr.also
		}
		imp.out.Threads = append(imp.out.Threads, tr)
	}
	return true, imp.ctx.Err()
}

// print writes the report for people.
func (imp *importRun) print(g *globals) {
	w := g.stdout
	verb := "imported"
	if imp.dry {
		verb = "would import"
	}
	for _, r := range imp.out.Threads {
		sub := ""
		if r.Parent != "" {
			sub = " (subagent of " + r.Parent + ")"
		}
		fmt.Fprintf(w, "%s %s%s: %s %d turns (%d there already)", r.SourcePath, r.ID, sub, verb, r.Turns, r.Existing)
		if n := len(r.Damaged); n > 0 {
			fmt.Fprintf(w, ", %d damaged lines", n)
		}
		fmt.Fprintln(w)
		for _, d := range r.Damaged {
			field := ""
			if d.Field != "" {
				field = " (" + d.Field + ")"
			}
			fmt.Fprintf(w, "  damaged line %d%s: %s\n", d.Line, field, d.Reason)
		}
		for _, u := range r.Unknown {
			fmt.Fprintf(w, "  unknown type %q: %d lines, the first line %d\n", u.Type, u.Count, u.FirstLine)
		}
		if n := r.IgnoredLines(); n > 0 {
			types := make([]string, 0, len(r.Ignored))
			for t := range r.Ignored {
				types = append(types, t)
			}
			slices.Sort(types)
			for i, t := range types {
				types[i] = fmt.Sprintf("%s %d", t, r.Ignored[t])
			}
			fmt.Fprintf(w, "  ignored: %d lines (%s)\n", n, strings.Join(types, ", "))
		}
		for _, n := range r.Notes {
			if n.Line > 0 {
				fmt.Fprintf(w, "  note, line %d: %s\n", n.Line, n.Reason)
			} else {
				fmt.Fprintf(w, "  note: %s\n", n.Reason)
			}
		}
		for _, f := range r.AlsoRead {
			fmt.Fprintf(w, "  also read %s: its turns are the first of these, nothing new\n", f)
		}
	}
	for _, r := range imp.out.Refused {
		fmt.Fprintf(g.stderr, "refused %s: %s\n", r.Path, r.Reason)
	}
	for _, r := range imp.out.Failed {
		fmt.Fprintf(g.stderr, "failed %s: %s\n", r.Path, r.Reason)
	}
}

// flatten lists a result and its subagents' results, each without its
// subagents.
func flatten(r rolloutdb.ImportResult) []rolloutdb.ImportResult {
	subs := r.Subagents
	r.Subagents = nil
	out := []rolloutdb.ImportResult{r}
	for _, s := range subs {
		out = append(out, flatten(s)...)
	}
	return out
}

// sessionFiles is path itself, or the session files of the format under
// it: *.jsonl (Claude Code's subagents/ files are read with their
// session), or craft-agents' session.jsonl.
// A directory under path that cannot be read is in unread, and passed
// over.
func sessionFiles(format, path string) (files []string, unread []walkError, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil, nil
	}
	var out []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == path {
				return err
			}
			unread = append(unread, walkError{p, err})
			if d != nil && d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir() && format == "claude-code" && d.Name() == "subagents":
			return filepath.SkipDir
		case !d.Type().IsRegular() || !strings.HasSuffix(p, ".jsonl"):
		case format == "craft-agents" && d.Name() != "session.jsonl":
		default:
			out = append(out, p)
		}
		return nil
	})
	return out, unread, err
}

type walkError struct {
	path string
	err  error
}
