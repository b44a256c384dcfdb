// Command rolloutctl is the operator CLI of rolloutdb: it lists, shows,
// replays, searches, exports, verifies and repairs the threads of a
// workspace, rebuilds its state.db, archives, restores, forks and deletes
// threads, collects garbage, and makes a demo workspace with a simulated
// host. Read commands take no lock and run beside a live host; write
// commands refuse a thread a live host holds. See the README for every
// command and the JSON shapes scripts rely on.
//
// Exit codes (scripts rely on them):
//
//	0  success
//	1  damage found (verify), or the operation failed
//	2  usage error
//	3  identity conflict or refused resume
//	4  thread locked by a live writer
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/internal/location"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailed   = 1
	exitUsage    = 2
	exitIdentity = 3
	exitLocked   = 4
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks bad arguments (exit 2).
func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: errors.Newf(format, args...)}
}

type globals struct {
	workspace string
	json      bool
	stdout    io.Writer
	stderr    io.Writer
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "rolloutctl",
		Short: "Operate on the threads of a rolloutdb workspace",
		Long: `rolloutctl operates on the threads of a rolloutdb workspace: read commands
(list, show, replay, search, export, stats, verify, follow, backup) take no lock and run
beside a live host; write commands (repair, rebuild, archive, restore,
delete, fork, rollback, set, import, gc, retention) refuse a thread a
live host holds. With --json
a command prints one JSON document on stdout and nothing else.

Start with: rolloutctl demo -w ./demo

Exit codes:
  0  success
  1  damage found (verify), or the operation failed
  2  usage error
  3  identity conflict or refused resume
  4  thread locked by a live writer`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVarP(&g.workspace, "workspace", "w", ".", "workspace directory, or a fleet workspace's postgres:// DSN")
	// Read commands take -w as a directory without opening the workspace:
	// a URL is refused here, for every command, before one takes
	// "s3://bucket" for a directory s3: to read or to make. (Backup and
	// restore places are checked by the facade.)
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if isFleet(g.workspace) {
			return nil // a fleet workspace (postgres://)
		}
		return location.Local("workspace", g.workspace)
	}
	root.SetOut(g.stdout)
	root.SetErr(g.stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: exitUsage, err: err}
	})
	root.AddCommand(newDemoCmd(g), newVerifyCmd(g), newShowCmd(g), newReplayCmd(g), newRepairCmd(g), newExportCmd(g), newStatsCmd(g), newFollowCmd(g), newBackupCmd(g), newImportCmd(g), newFleetCmd(g))
	root.AddCommand(stateCommands(g)...)
	return root
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr}
	root := newRoot(g)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	closeFleets()
	if err == nil {
		return exitOK
	}
	code := exitFailed
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		code = ee.code
	case errors.Is(err, rollout.ErrThreadLocked):
		code = exitLocked
	case errors.Is(err, rollout.ErrThreadMismatch), errors.Is(err, recovery.ErrIdentity):
		code = exitIdentity
	case isUsage(err), errors.Is(err, projection.ErrBadCursor), errors.Is(err, projection.ErrBadQuery),
		errors.Is(err, rolloutdb.ErrNoSuchTurn), errors.Is(err, rolloutdb.ErrSubagent), errors.Is(err, rolloutdb.ErrUnsupportedURL):
		code = exitUsage
	}
	fmt.Fprintln(stderr, "error:", err)
	for _, h := range errors.GetAllHints(err) {
		fmt.Fprintln(stderr, "hint:", h)
	}
	return code
}

// validIDs is a PreRunE: every argument must be a thread id (exit 2).
func validIDs(_ *cobra.Command, args []string) error {
	for _, id := range args {
		if err := rollout.ValidateThreadID(id); err != nil {
			return &exitError{code: exitUsage, err: err}
		}
	}
	return nil
}

// isUsage recognises cobra's own argument errors.
func isUsage(err error) bool {
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires at least", "invalid argument"} {
		if strings.Contains(err.Error(), p) {
			return true
		}
	}
	return false
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
