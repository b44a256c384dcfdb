package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/vfs"
	"github.com/spf13/cobra"
)

func newFleetCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Move a local workspace into a fleet workspace (PostgreSQL)",
	}
	cmd.AddCommand(newFleetPushCmd(g))
	return cmd
}

// pushReport is fleet push's --json document.
type pushReport struct {
	To        string   `json:"to"`
	Threads   int      `json:"threads"`
	Created   int      `json:"created"`
	Frames    int      `json:"frames_copied"`
	Bytes     int64    `json:"bytes_copied"`
	Ahead     []string `json:"ahead"`
	Artifacts int      `json:"artifacts_copied"`
	// Business counts the business rows of the threads pushed (refused
	// ones aside) added to the fleet and updated there.
	Business projection.BusinessImport `json:"business"`
	Refused  map[string]string         `json:"refused"`
	Elapsed  string                    `json:"elapsed"`
}

func newFleetPushCmd(g *globals) *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "push --to postgres://… [THREAD...]",
		Short: "Copy the local workspace (-w) into a fleet workspace, idempotently and incrementally",
		Long: `fleet push copies the threads of the local workspace (-w DIR), or the named
ones, into the fleet workspace at --to (a postgres:// DSN; ?workspace=NAME
names the workspace in the database), byte for byte: each thread keeps its
rollout's file id and frames. Run again, it copies only the frames the
fleet lacks; a thread the fleet has further on is left alone, one that
differs from the local rollout is refused (and listed), one a fleet host
has open is refused. Spilled tool outputs, attachments and terminal logs
are copied too (each once). So is the business state of the threads
pushed (refused ones aside) from state.db: their goals, plans and
diagnostics, and the subagent edges and messages with an end among them.
Goals and messages are keyed by this workspace's id and their id here, so
a second push updates them (a status changed since, a message read since)
and never copies one twice; a plan is replaced when it was set here
later than in the fleet; an edge takes the status that changed last.
Nothing is deleted in the fleet. The exit code is 1 if any thread was
refused.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !isFleet(to) {
				return usageError("--to must be a fleet workspace's postgres:// DSN")
			}
			if isFleet(g.workspace) {
				return usageError("-w must be a local workspace directory")
			}
			ctx := cmd.Context()
			start := time.Now()
			files, err := findRollouts(g.workspace, args)
			if err != nil {
				return err
			}
			l, err := fleetLog(ctx, to)
			if err != nil {
				return err
			}
			rep := pushReport{To: l.Path(""), Ahead: []string{}, Refused: map[string]string{}}
			pushed := map[string]bool{}
			for _, f := range files {
				loc := projection.LocationActive
				if f.Archived {
					loc = projection.LocationArchived
				}
				res, err := pushOne(ctx, l, f, loc)
				rep.Threads++
				if err != nil {
					rep.Refused[f.ID] = err.Error()
					if !g.json {
						fmt.Fprintf(g.stderr, "%s: refused: %v\n", f.ID, err)
					}
					continue
				}
				pushed[f.ID] = true
				if res.Created {
					rep.Created++
				}
				if res.Ahead {
					rep.Ahead = append(rep.Ahead, f.ID)
				}
				rep.Frames += res.Frames
				rep.Bytes += res.Bytes
			}
			n, err := pushArtifacts(dataDir(g.workspace), l.Files())
			rep.Artifacts = n
			if err != nil {
				return errors.Wrap(err, "push artifacts")
			}
			if rep.Business, err = pushBusiness(ctx, g, to, pushed); err != nil {
				return errors.Wrap(err, "push business state")
			}
			rep.Elapsed = time.Since(start).Round(time.Millisecond).String()
			if g.json {
				if err := printJSON(g, rep); err != nil {
					return err
				}
			} else {
				b := rep.Business
				fmt.Fprintf(g.stdout, "pushed %d thread(s) to %s: %d new, %d frame(s) copied (%d bytes), %d ahead in the fleet, %d refused; %d artifact file(s) copied; "+
					"business state added/updated: goals %d/%d, plans %d/%d, edges %d/%d, messages %d/%d, diagnostics %d; in %s\n",
					rep.Threads, rep.To, rep.Created, rep.Frames, rep.Bytes, len(rep.Ahead), len(rep.Refused), rep.Artifacts,
					b.Goals.Added, b.Goals.Updated, b.Plans.Added, b.Plans.Updated, b.Edges.Added, b.Edges.Updated,
					b.Messages.Added, b.Messages.Updated, b.Diagnostics.Added, rep.Elapsed)
			}
			if len(rep.Refused) > 0 {
				return &exitError{code: exitFailed, err: errors.Newf("%d thread(s) refused", len(rep.Refused))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the fleet workspace (postgres://…)")
	cmd.Flags().BoolVar(&g.json, "json", false, `print {"to", "threads", "created", "frames_copied", "bytes_copied", "ahead", "artifacts_copied", "business", "refused", "elapsed"}`)
	return cmd
}

// pushBusiness copies the business state of the threads pushed from the
// local workspace's state.db into the fleet's index (Business.Export,
// then Import keyed by the local workspace's id).
func pushBusiness(ctx context.Context, g *globals, to string, pushed map[string]bool) (projection.BusinessImport, error) {
	local, err := openAt(ctx, g, g.workspace)
	if err != nil {
		return projection.BusinessImport{}, err
	}
	defer local.Close()
	e, err := local.Business().Export(ctx)
	if err != nil {
		return projection.BusinessImport{}, err
	}
	e = e.Of(func(id string) bool { return pushed[id] })
	if e.Rows() == 0 {
		return projection.BusinessImport{}, nil
	}
	fl, err := openAt(ctx, g, to)
	if err != nil {
		return projection.BusinessImport{}, err
	}
	defer fl.Close()
	return fl.Business().Import(ctx, local.WorkspaceID(), e)
}

func pushOne(ctx context.Context, l *fleet.Log, f rolloutFile, loc string) (fleet.PushResult, error) {
	src, size, done, err := f.read()
	if err != nil {
		return fleet.PushResult{}, err
	}
	defer done()
	return l.Push(ctx, f.ID, loc, src, size)
}

// pushArtifacts copies the artifact files of a local data directory into
// the fleet's files, each once: a file already there is left.
func pushArtifacts(root string, dst vfs.FS) (int, error) {
	n := 0
	for _, top := range []string{artifacts.ToolResultsDir, artifacts.AttachmentsDir, artifacts.TerminalsDir} {
		err := vfs.Walk(vfs.OS, filepath.Join(root, top), func(path string, info vfs.Info) error {
			if filepath.Base(path)[0] == '.' {
				return nil // a temporary file
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			err = vfs.CreateFile(dst, "/"+filepath.ToSlash(rel), b)
			if errors.Is(err, fs.ErrExist) {
				return nil
			}
			if err == nil {
				n++
			}
			return err
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
