package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/spf13/cobra"
)

// withThread opens a thread for writing (its writer's lock: a thread a
// live host holds is refused, exit 4), runs fn, and prints the thread as
// listed after it.
func withThread(g *globals, asJSON *bool, fn func(ctx context.Context, th *rolloutdb.Thread) error) func(*cobra.Command, []string) error {
	return withDB(g, func(ctx context.Context, db *rolloutdb.DB, args []string) error {
		th, err := db.OpenThread(ctx, args[0])
		if err != nil {
			return err
		}
		err = fn(ctx, th)
		if err = errors.CombineErrors(err, th.Close()); err != nil {
			return err
		}
		info, err := db.ThreadInfo(ctx, args[0])
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(g, info)
		}
		fmt.Fprintf(g.stdout, "%s: %d turns, name %q, labels %v, status %q\n", info.ID, info.Turns, info.Name, info.Labels, info.State)
		return nil
	})
}

func newRollbackCmd(g *globals) *cobra.Command {
	var turns int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "rollback THREAD --turns N",
		Short: "Drop a thread's last N turns from its history (the records stay in the rollout)",
		Args:  cobra.ExactArgs(1),
	}
	cmd.Flags().IntVar(&turns, "turns", 0, "how many of the last turns to drop (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the thread as list --json does")
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if turns < 1 {
			return usageError("--turns must be at least 1")
		}
		return validIDs(cmd, args)
	}
	cmd.RunE = withThread(g, &asJSON, func(ctx context.Context, th *rolloutdb.Thread) error {
		_, err := th.Rollback(ctx, turns)
		if errors.Is(err, rolloutdb.ErrRollbackTooFar) {
			return &exitError{code: exitUsage, err: err}
		}
		return err
	})
	return cmd
}

func newSetCmd(g *globals) *cobra.Command {
	var name, status string
	var labels, flags []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "set THREAD [--name N] [--label +a --label -b] [--flag k=true] [--status S]",
		Short: "Change a thread's name, labels, flags or host status",
		Args:  cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&name, "name", "", `the thread's name ("" clears it)`)
	cmd.Flags().StringArrayVar(&labels, "label", nil, "+LABEL adds a label, -LABEL removes one (repeatable)")
	cmd.Flags().StringArrayVar(&flags, "flag", nil, "KEY=true|false sets a flag (repeatable)")
	cmd.Flags().StringVar(&status, "status", "", "the host's status of the thread (list --state filters by it)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the thread as list --json does")
	var u rolloutdb.MetadataUpdate
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		u = rolloutdb.MetadataUpdate{}
		if cmd.Flags().Changed("name") {
			u.Name = &name
		}
		if cmd.Flags().Changed("status") {
			u.Status = &status
		}
		for _, l := range labels {
			switch {
			case len(l) > 1 && l[0] == '+':
				u.AddLabels = append(u.AddLabels, l[1:])
			case len(l) > 1 && l[0] == '-':
				u.RemoveLabels = append(u.RemoveLabels, l[1:])
			default:
				return usageError("--label %q: write +LABEL to add it or -LABEL to remove it", l)
			}
		}
		for _, f := range flags {
			k, v, ok := strings.Cut(f, "=")
			b, err := strconv.ParseBool(v)
			if !ok || k == "" || err != nil {
				return usageError("--flag %q: write KEY=true or KEY=false", f)
			}
			if u.Flags == nil {
				u.Flags = map[string]bool{}
			}
			u.Flags[k] = b
		}
		if u.Name == nil && u.Status == nil && u.AddLabels == nil && u.RemoveLabels == nil && u.Flags == nil {
			return usageError("nothing to set: give --name, --label, --flag or --status")
		}
		return validIDs(cmd, args)
	}
	cmd.RunE = withThread(g, &asJSON, func(ctx context.Context, th *rolloutdb.Thread) error {
		_, err := th.UpdateMetadata(ctx, u)
		return err
	})
	return cmd
}
