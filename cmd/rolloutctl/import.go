package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/importer"
	"github.com/spf13/cobra"
)

func newImportCmd(g *globals) *cobra.Command {
	var from string
	var dry, asJSON bool
	cmd := &cobra.Command{
		Use:   "import --from claude-code|codex PATH...",
		Short: "Import sessions of another agent tool as threads (again: only what is new)",
		Long: `import reads another tool's session files and writes each session as a
thread. PATH is a file or a directory to walk (for claude-code: its *.jsonl
files, e.g. ~/.claude/projects/<dir> or ~/.codex/sessions). The thread
id is derived from the
session id: importing again changes nothing (a missing or empty -w
directory is made a workspace first), and a session that has grown
gets only its new turns. Damaged lines are skipped and reported (line and
reason); a named file that is not of the format is refused (exit 1).
Formats: claude-code, codex. (DotCraft and craft-agents are not read yet.)`,
		Args: cobra.MinimumNArgs(1),
	}
	cmd.Flags().StringVar(&from, "from", "", "the source format: claude-code or codex")
	cmd.Flags().BoolVar(&dry, "dry-run", false, "read and report, write nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"threads": [{"id", "source_path", "turns", "existing", "created", "skipped": [{"line", "reason"}]}], "refused": [{"path", "reason"}]}`)
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if from != "claude-code" && from != "codex" {
			return usageError("--from %q: this version imports claude-code and codex", from)
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
		}{Threads: []rolloutdb.ImportResult{}, Refused: []refusal{}}
		var failed error
		for _, arg := range args {
			files, err := sessionFiles(arg)
			if err != nil {
				return err
			}
			for _, path := range files {
				s, err := importer.Read(from, path)
				if errors.Is(err, importer.ErrWrongFormat) {
					out.Refused = append(out.Refused, refusal{path, err.Error()})
					if path == arg { // named, not found by a walk
						failed = errors.CombineErrors(failed, err)
					}
					continue
				}
				if err != nil {
					return err
				}
				res, err := db.Import(ctx, s, rolloutdb.ImportOptions{DryRun: dry})
				if err != nil {
					return err
				}
				out.Threads = append(out.Threads, res)
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
				fmt.Fprintf(g.stdout, "%s %s: %s %d turns (%d there already), %d lines skipped\n", r.SourcePath, r.ID, verb, r.Turns, r.Existing, len(r.Skipped))
				for _, sk := range r.Skipped {
					fmt.Fprintf(g.stdout, "  line %d: %s\n", sk.Line, sk.Reason)
				}
			}
			for _, r := range out.Refused {
				fmt.Fprintf(g.stderr, "refused %s: %s\n", r.Path, r.Reason)
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

// sessionFiles is path itself, or the *.jsonl files under it.
func sessionFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	var out []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && strings.HasSuffix(p, ".jsonl") {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}
