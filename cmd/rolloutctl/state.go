package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// The commands that go through state.db and the lifecycle: they open the
// workspace as a host does (state.db is rebuilt if missing or corrupt, and
// the library says so on stderr).

// openWorkspace opens an existing workspace (never makes one).
func openWorkspace(ctx context.Context, g *globals) (*rolloutdb.DB, error) {
	return openAt(ctx, g, g.workspace)
}

// openAt opens the workspace ws (a directory or a fleet's DSN) as
// openWorkspace does.
func openAt(ctx context.Context, g *globals, ws string) (*rolloutdb.DB, error) {
	if isFleet(ws) {
		return rolloutdb.Open(ctx, ws, rolloutdb.Options{Host: "rolloutctl",
			Fleet:  rolloutdb.FleetOptions{HostName: "rolloutctl-" + rollout.NewID()},
			Logger: slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	}
	if _, err := os.Stat(filepath.Join(dataDir(ws), "workspace.json")); err != nil {
		return nil, errors.WithHint(errors.Newf("%s is not a rolloutdb workspace", ws),
			"pass the workspace with -w DIR, or make one with: rolloutctl demo -w DIR")
	}
	// A missing or corrupt state.db is rebuilt by Open: show it.
	progress, finish := rebuildBar(g, "state.db")
	defer finish()
	return rolloutdb.Open(ctx, ws, rolloutdb.Options{Host: "rolloutctl", RebuildProgress: progress, NoJournal: true,
		Logger: slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
}

// rebuildBar draws a rebuild's progress on stderr: threads done of all,
// and records. finish ends the bar's line (if one was drawn).
func rebuildBar(g *globals, what string) (func(projection.RebuildProgress), func()) {
	var bar *progressbar.ProgressBar
	var finish func()
	if f, ok := g.stderr.(*os.File); !ok || !term.IsTerminal(int(f.Fd())) {
		// Not a terminal (a log, a pipe): a line per committed chunk.
		return func(p projection.RebuildProgress) {
			fmt.Fprintf(g.stderr, "%s: %d/%d threads, %d records, %s\n", what, p.Threads, p.Total, p.Records, p.Elapsed.Round(time.Millisecond))
		}, func() {}
	}
	progress := func(p projection.RebuildProgress) {
		if bar == nil {
			bar = progressbar.NewOptions(p.Total, progressbar.OptionSetWriter(g.stderr),
				progressbar.OptionSetDescription(what), progressbar.OptionShowCount(),
				progressbar.OptionSetItsString("threads"), progressbar.OptionShowIts(),
				progressbar.OptionSetElapsedTime(true), progressbar.OptionSetPredictTime(true),
				progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionSetWidth(30))
		}
		bar.Describe(fmt.Sprintf("%s (%d records)", what, p.Records))
		_ = bar.Set(p.Threads)
		if p.Threads >= p.Total {
			finish()
		}
	}
	finish = func() {
		if bar != nil {
			_ = bar.Finish()
			fmt.Fprintln(g.stderr)
			bar = nil
		}
	}
	return progress, finish
}

// withDB makes a command's RunE: open the workspace, run fn, close it.
// Checks that need no workspace go in the command's PreRunE.
func withDB(g *globals, fn func(ctx context.Context, db *rolloutdb.DB, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		db, err := openWorkspace(cmd.Context(), g)
		if err != nil {
			return err
		}
		err = fn(cmd.Context(), db, args)
		return errors.CombineErrors(err, db.Close())
	}
}

func newListCmd(g *globals) *cobra.Command {
	var o projection.ListOptions
	var archived, all, asJSON, created bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List threads, newest first (active by default)",
		Args:  cobra.NoArgs,
	}
	cmd.Flags().BoolVar(&archived, "archived", false, "archived threads only")
	cmd.Flags().BoolVar(&all, "all", false, "active and archived threads")
	cmd.Flags().StringVar(&o.Label, "label", "", "only threads with this label")
	cmd.Flags().StringVar(&o.State, "state", "", "only threads with this host status (set --status)")
	cmd.Flags().IntVar(&o.Limit, "limit", 50, "page size (at most 1000)")
	cmd.Flags().StringVar(&o.Cursor, "cursor", "", "next_cursor of the previous page")
	cmd.Flags().BoolVar(&created, "by-created", false, "sort by creation, not last update")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"threads": [...], "next_cursor": ...}`)
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if o.Limit < 1 || o.Limit > 1000 {
			return usageError("--limit must be 1..1000, not %d", o.Limit)
		}
		if archived && all {
			return usageError("--archived and --all: pick one")
		}
		return nil
	}
	cmd.RunE = withDB(g, func(ctx context.Context, db *rolloutdb.DB, args []string) error {
		switch {
		case all:
			o.Scope = projection.ScopeAll
		case archived:
			o.Scope = projection.ScopeArchived
		}
		if created {
			o.Sort = projection.SortCreated
		}
		page, err := db.List(ctx, o)
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(g, page)
		}
		tw := tabwriter.NewWriter(g.stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "THREAD\tSTATUS\tSOURCE\tTURNS\tUPDATED\tPREVIEW")
		for _, t := range page.Threads {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", t.ID, t.Status, t.Source.Kind, t.Turns, t.UpdatedAt.Format(time.DateTime), truncate(t.Preview, 50))
		}
		tw.Flush()
		if page.NextCursor != "" {
			fmt.Fprintf(g.stdout, "\nmore: --cursor %s\n", page.NextCursor)
		}
		return nil
	})
	return cmd
}

func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func newSearchCmd(g *globals) *cobra.Command {
	var o projection.SearchOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "search QUERY",
		Short: "Full-text search over the items of the workspace's threads",
		Args:  cobra.MinimumNArgs(1),
	}
	cmd.Flags().BoolVar(&o.IncludeArchived, "archived", false, "search archived threads too")
	cmd.Flags().IntVar(&o.Limit, "limit", 20, "hits (at most 500)")
	cmd.Flags().BoolVar(&o.Raw, "raw", false, "the query is FTS5 syntax (AND, OR, NOT, \"phrase\", prefix*)")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"hits": [...]}`)
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if o.Limit < 1 || o.Limit > 500 {
			return usageError("--limit must be 1..500, not %d", o.Limit)
		}
		return nil
	}
	cmd.RunE = withDB(g, func(ctx context.Context, db *rolloutdb.DB, args []string) error {
		hits, err := db.Search(ctx, strings.Join(args, " "), o)
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(g, map[string]any{"hits": hits})
		}
		for _, h := range hits {
			fmt.Fprintf(g.stdout, "%s  turn %d  %s\n    %s\n", h.Thread, h.Ordinal, h.Type, h.Snippet)
		}
		return nil
	})
	return cmd
}

func newRebuildCmd(g *globals) *cobra.Command {
	var restart, asJSON bool
	cmd := &cobra.Command{
		Use:   "rebuild",
		Short: "Project every rollout into state.db again (business state is kept)",
		Args:  cobra.NoArgs,
	}
	cmd.Flags().BoolVar(&restart, "restart", false, "start over instead of continuing an interrupted rebuild")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.RunE = withDB(g, func(ctx context.Context, db *rolloutdb.DB, args []string) error {
		progress, finish := rebuildBar(g, "rebuild")
		rep, err := db.Rebuild(ctx, projection.RebuildOptions{Restart: restart, Progress: progress})
		finish()
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(g, rep)
		}
		fmt.Fprintf(g.stdout, "rebuilt %d threads, %d records in %s (%.0f records/s)\n", rep.Threads, rep.Records, rep.Elapsed.Round(time.Millisecond), rep.RecordsPerSec())
		return nil
	})
	return cmd
}

// newLifecycleCmd makes archive, restore and delete: a root thread and its
// subagents.
func newLifecycleCmd(g *globals, use, short string, op func(ctx context.Context, db *rolloutdb.DB, id string) (rolloutdb.LifecycleReport, error), confirm bool) *cobra.Command {
	var yes, asJSON bool
	cmd := &cobra.Command{
		Use:   use + " THREAD",
		Short: short,
		Args:  cobra.ExactArgs(1),
	}
	if confirm {
		cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"threads": [...], "pending": [...]}`)
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if err := validIDs(cmd, args); err != nil {
			return err
		}
		if confirm && !yes {
			fmt.Fprintf(g.stderr, "%s %s and its subagent threads for good? type yes: ", use, args[0])
			line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
			if strings.TrimSpace(line) != "yes" {
				return usageError("not confirmed: nothing was %sd (pass --yes to skip the question)", use)
			}
		}
		return nil
	}
	cmd.RunE = withDB(g, func(ctx context.Context, db *rolloutdb.DB, args []string) error {
		rep, err := op(ctx, db, args[0])
		return errors.CombineErrors(err, printLifecycle(g, asJSON, strings.TrimSuffix(use, "e")+"ed", rep, err))
	})
	return cmd
}

// printLifecycle reports what a lifecycle operation did, also when it
// failed part way (what was done is said, then the error).
func printLifecycle(g *globals, asJSON bool, done string, rep rolloutdb.LifecycleReport, err error) error {
	if err != nil && len(rep.Threads) == 0 {
		return nil
	}
	if asJSON {
		if rep.Threads == nil {
			rep.Threads = []string{}
		}
		if rep.Pending == nil {
			rep.Pending = []string{}
		}
		return printJSON(g, rep)
	}
	fmt.Fprintf(g.stdout, "%s: %s\n", done, strings.Join(rep.Threads, " "))
	if len(rep.Pending) > 0 {
		fmt.Fprintf(g.stdout, "left in the cleanup queue (retried at open and by gc): %s\n", strings.Join(rep.Pending, " "))
	}
	return nil
}

func newGCCmd(g *globals) *cobra.Command {
	var o rolloutdb.GCOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove artifacts no record references, finish queued deletes, sweep old terminals",
		Args:  cobra.NoArgs,
	}
	cmd.Flags().BoolVar(&o.DryRun, "dry-run", false, "report, remove nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.RunE = withDB(g, func(ctx context.Context, db *rolloutdb.DB, args []string) error {
		rep, err := db.GC(ctx, o)
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(g, rep)
		}
		verb := "removed"
		if o.DryRun {
			verb = "would remove"
		}
		for _, e := range rep.Artifacts.Removed {
			fmt.Fprintf(g.stdout, "%s %s (%s, %d bytes)\n", verb, e.Path, e.Why, e.Size)
		}
		for _, p := range rep.Temporary {
			fmt.Fprintf(g.stdout, "removed %s (a temporary file a crash left)\n", p)
		}
		fmt.Fprintf(g.stdout, "%d %s, %d kept, %d terminals swept, %d still queued\n", len(rep.Artifacts.Removed), verb, len(rep.Artifacts.Kept), len(rep.Terminals), len(rep.Pending))
		return nil
	})
	return cmd
}

func newRetentionCmd(g *globals) *cobra.Command {
	var o rolloutdb.RetentionOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "retention --older-than DURATION",
		Short: "Delete archived threads not updated for a while (with --dry-run, list them)",
		Args:  cobra.NoArgs,
	}
	cmd.Flags().DurationVar(&o.OlderThan, "older-than", 0, "age, e.g. 2160h for 90 days (required)")
	cmd.Flags().BoolVar(&o.DryRun, "dry-run", false, "list, delete nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"threads": [...]}`)
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if o.OlderThan <= 0 {
			return usageError("retention needs --older-than")
		}
		return nil
	}
	cmd.RunE = withDB(g, func(ctx context.Context, db *rolloutdb.DB, args []string) error {
		rep, err := db.Retention(ctx, o)
		verb := "deleted"
		if o.DryRun {
			verb = "would delete"
		}
		return errors.CombineErrors(err, printLifecycle(g, asJSON, verb, rep, err))
	})
	return cmd
}

func newForkCmd(g *globals) *cobra.Command {
	var o rolloutdb.ForkOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "fork THREAD",
		Short: "Make a new thread from a thread's first N turns",
		Args:  cobra.ExactArgs(1),
	}
	cmd.Flags().IntVar(&o.AtTurn, "at-turn", 0, "the last visible turn to keep (default: all)")
	cmd.Flags().StringVar(&o.ID, "id", "", "the new thread's id (default: a new one)")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"thread": ..., "forked_from": ..., "turns": N}`)
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if o.AtTurn < 0 {
			return usageError("--at-turn must be a turn number (1 is the first), not %d", o.AtTurn)
		}
		if o.ID != "" {
			if err := validIDs(cmd, []string{o.ID}); err != nil {
				return err
			}
		}
		return validIDs(cmd, args)
	}
	cmd.RunE = withDB(g, func(ctx context.Context, db *rolloutdb.DB, args []string) error {
		th, err := db.Fork(ctx, args[0], o)
		if err != nil {
			return err
		}
		id := th.ID()
		if err := th.Close(); err != nil {
			return err
		}
		info, err := db.ThreadInfo(ctx, id)
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(g, map[string]any{"thread": id, "forked_from": info.ForkedFrom, "forked_from_turn": info.ForkedTurn, "turns": info.Turns})
		}
		fmt.Fprintf(g.stdout, "forked %s at turn %s into %s (%d turns)\n", info.ForkedFrom, info.ForkedTurn, id, info.Turns)
		return nil
	})
	return cmd
}

func stateCommands(g *globals) []*cobra.Command {
	return []*cobra.Command{
		newListCmd(g), newSearchCmd(g), newRebuildCmd(g), newGCCmd(g), newRetentionCmd(g), newForkCmd(g),
		newRollbackCmd(g), newSetCmd(g),
		newLifecycleCmd(g, "archive", "Archive a thread and its subagents", func(ctx context.Context, db *rolloutdb.DB, id string) (rolloutdb.LifecycleReport, error) {
			return db.Archive(ctx, id, "rolloutctl archive")
		}, false),
		newLifecycleCmd(g, "restore", "Restore an archived thread and its subagents with open edges", func(ctx context.Context, db *rolloutdb.DB, id string) (rolloutdb.LifecycleReport, error) {
			return db.Restore(ctx, id)
		}, false),
		newLifecycleCmd(g, "delete", "Delete a thread and its subagents for good (asks unless --yes)", func(ctx context.Context, db *rolloutdb.DB, id string) (rolloutdb.LifecycleReport, error) {
			return db.Delete(ctx, id)
		}, true),
	}
}
