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
Damaged lines are skipped and reported (line and reason); a named file
that is not of the format is refused (exit 1); a session that cannot be
imported (its thread archived here, a write error) is listed as failed,
the others are imported, and the exit status is 1.
Formats: claude-code, codex, craft-agents, dotcraft.`,
		Args: cobra.MinimumNArgs(1),
	}
	cmd.Flags().StringVar(&from, "from", "", "the source format: "+strings.Join(importer.Formats, ", "))
	cmd.Flags().BoolVar(&dry, "dry-run", false, "read and report, write nothing (a subagent in its own file is reported as on its own: its parent is not imported)")
	cmd.Flags().DurationVar(&active, "active-window", importer.ActiveWindow, "a file changed this recently may still be written: its last turn, if unfinished, waits for a later import (0: import every turn)")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"threads": [{"id", "source_path", "parent", "turns", "existing", "created", "checkpoints", "skipped": [{"line", "reason"}]}], "refused": [{"path", "reason"}], "failed": [{"path", "reason"}]} (subagents are threads with a parent)`)
	cmd.PreRunE = func(*cobra.Command, []string) error {
		importer.ActiveWindow = active
		if !slices.Contains(importer.Formats, from) {
			return usageError("--from %q: this version imports %s", from, strings.Join(importer.Formats, ", "))
		}
		return nil
	}
	run := withDB(g, func(ctx context.Context, db *rolloutdb.DB, args []string) error {
		type refusal struct {
			Path   string `json:"path"`
			Reason string `json:"reason"`
		}
		out := struct {
			Threads []rolloutdb.ImportResult `json:"threads"`
			Refused []refusal                `json:"refused"`
			Failed  []refusal                `json:"failed"`
		}{Threads: []rolloutdb.ImportResult{}, Refused: []refusal{}, Failed: []refusal{}}
		var failed error
		// A session in its own file that names a parent session
		// (DotCraft's and Codex's subagents) waits until its parent is imported, so
		// that it is imported as its subagent; files are read again
		// rather than kept in memory.
		var waiting []string
		seen := map[string]bool{}
		importFile := func(path string, named, wait bool) (bool, error) {
			s, err := importer.Read(from, path)
			if errors.Is(err, importer.ErrWrongFormat) {
				out.Refused = append(out.Refused, refusal{path, err.Error()})
				if named { // named, not found by a walk
					failed = errors.CombineErrors(failed, err)
				}
				return true, nil
			}
			if err != nil {
				// One session that cannot be read or written does not
				// stop the others: listed, and the exit status says so.
				out.Failed = append(out.Failed, refusal{path, err.Error()})
				failed = errors.CombineErrors(failed, err)
				return true, ctx.Err()
			}
			if wait && s.Parent != "" {
				if _, err := db.ThreadInfo(ctx, importer.ThreadID(s.Format, s.Parent)); errors.Is(err, projection.ErrNotFound) {
					return false, nil
				}
			}
			res, err := db.Import(ctx, s, rolloutdb.ImportOptions{DryRun: dry})
			out.Threads = append(out.Threads, flatten(res)...)
			if err != nil {
				out.Failed = append(out.Failed, refusal{path, err.Error()})
				failed = errors.CombineErrors(failed, err)
			}
			return true, ctx.Err()
		}
		for _, arg := range args {
			files, unread, err := sessionFiles(from, arg)
			if err != nil {
				return err
			}
			for _, u := range unread { // a directory the walk could not read: the rest goes on
				out.Failed = append(out.Failed, refusal{u.path, u.err.Error()})
				failed = errors.CombineErrors(failed, u.err)
			}
			for _, path := range files {
				if abs, err := filepath.Abs(path); err == nil {
					if seen[abs] { // named, and found by a walk too
						continue
					}
					seen[abs] = true
				}
				done, err := importFile(path, path == arg, !dry)
				if err != nil {
					return err
				}
				if !done {
					waiting = append(waiting, path)
				}
			}
		}
		for progress := true; progress && len(waiting) > 0; {
			progress = false
			var still []string
			for _, path := range waiting {
				done, err := importFile(path, false, true)
				if err != nil {
					return err
				}
				if progress = progress || done; !done {
					still = append(still, path)
				}
			}
			waiting = still
		}
		for _, path := range waiting { // their parents are not here
			if _, err := importFile(path, false, false); err != nil {
				return err
			}
		}
		if asJSON {
			if err := printJSON(g, out); err != nil {
				return err
			}
		} else {
			for _, r := range out.Threads {
				verb := "imported"
				if dry {
					verb = "would import"
				}
				sub := ""
				if r.Parent != "" {
					sub = " (subagent of " + r.Parent + ")"
				}
				fmt.Fprintf(g.stdout, "%s %s%s: %s %d turns (%d there already), %d lines skipped\n", r.SourcePath, r.ID, sub, verb, r.Turns, r.Existing, len(r.Skipped))
				for _, sk := range r.Skipped {
					fmt.Fprintf(g.stdout, "  line %d: %s\n", sk.Line, sk.Reason)
				}
			}
			for _, r := range out.Refused {
				fmt.Fprintf(g.stderr, "refused %s: %s\n", r.Path, r.Reason)
			}
			for _, r := range out.Failed {
				fmt.Fprintf(g.stderr, "failed %s: %s\n", r.Path, r.Reason)
			}
		}
		return failed
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
