package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/spf13/cobra"
)

// rawOrString shows an opaque model message as JSON when it is JSON.
func rawOrString(b []byte) any {
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	return string(b)
}

type turnJSON struct {
	ID            string         `json:"id"`
	Status        string         `json:"status"`
	Items         []rollout.Item `json:"items"`
	Usage         rollout.Usage  `json:"usage"`
	HistorySource string         `json:"history_source"`
}

// resumeLocated resumes a thread the way a host would, without its lock
// and without writing: a live host may be appending (the reader sees a
// consistent prefix), and the rollout may be archived compressed. The
// state is located (recovery.Options.Locate): it holds where its items
// and histories are, and the Locator reads them back a turn at a time, so
// that what a command prints streams in memory that does not grow with
// the thread. done closes the file (the Locator reads it until then).
func resumeLocated(ctx context.Context, g *globals, id string, opts recovery.Options) (st *recovery.State, loc *recovery.Locator, f rolloutFile, done func(), err error) {
	files, err := findRollouts(g.workspace, []string{id})
	if err != nil {
		return nil, nil, rolloutFile{}, nil, err
	}
	f = files[0]
	ws, err := workspaceID(g.workspace)
	if err != nil {
		return nil, nil, f, nil, err
	}
	src, size, done, err := f.read()
	if err != nil {
		return nil, nil, f, nil, err
	}
	opts.ThreadID, opts.WorkspaceID, opts.Path, opts.Locate = f.ID, ws, f.Path, true
	if st, err = recovery.Resume(ctx, src, size, opts); err == nil {
		loc, err = recovery.NewLocator(src, size, f.Path)
	}
	if err != nil {
		done()
		return nil, nil, f, nil, identityExit(err)
	}
	return st, loc, f, done, nil
}

// identityExit maps recovery's refusals to exit code 3.
func identityExit(err error) error {
	if errors.Is(err, recovery.ErrIdentity) {
		return &exitError{code: exitIdentity, err: err}
	}
	return err
}

func newReplayCmd(g *globals) *cobra.Command {
	var full bool
	cmd := &cobra.Command{
		Use:   "replay THREAD",
		Short: "Resume a thread read-only and print its state and the recovery report",
		Long: `replay resumes a thread the way a host would, without taking its lock or
writing anything: the visible turns, the model history to continue with, and
the recovery report (skipped records, turns rebuilt from items, the
checkpoint used, whether the tail was torn). --full ignores checkpoints.
A rollout that is not safely this thread's exits 3.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, loc, _, done, err := resumeLocated(cmd.Context(), g, args[0], recovery.Options{IgnoreCheckpoints: full})
			if err != nil {
				return err
			}
			defer done()
			if g.json {
				// Streamed (fields in the order a map would print them):
				// each message and turn read back from the rollout when
				// it is written.
				js := newJSONStream(g.stdout)
				js.field("interrupted", nonNil(st.Interrupted))
				js.field("last_seq", st.LastSeq)
				js.field("metadata", st.Metadata)
				err := js.stream("model_history", func(emit func(any)) error {
					return loc.ModelHistory(st, nil, func(m []byte) error { emit(rawOrString(m)); return js.err })
				})
				js.field("report", reportJSON(st.Report))
				js.field("thread", st.Header)
				if err == nil {
					err = js.stream("turns", func(emit func(any)) error {
						for i, t := range st.Turns {
							items, err := loc.Items(t)
							if err != nil {
								return err
							}
							st.Turns[i] = nil
							emit(turnJSON{ID: t.ID, Status: t.Status, Items: items, Usage: t.Usage, HistorySource: t.HistorySource})
						}
						return js.err
					})
				}
				return errors.CombineErrors(err, js.close())
			}
			messages := 0
			if err := loc.ModelHistory(st, nil, func([]byte) error { messages++; return nil }); err != nil {
				return err
			}
			w := g.stdout
			fmt.Fprintf(w, "thread %s: %d turn(s), last seq %d, %d model message(s) to continue with\n", st.Header.ThreadID, len(st.Turns), st.LastSeq, messages)
			for _, t := range st.Turns {
				fmt.Fprintf(w, "  turn %s  %-11s %3d item(s)  history: %s\n", t.ID, t.Status, len(t.Items), t.HistorySource)
			}
			rep := st.Report
			if c := rep.Checkpoint; c != nil {
				fmt.Fprintf(w, "checkpoint used: %s (seq %d, offset %d) covering turn %s\n", c.ID, c.Seq, c.Offset, c.CoveredTurn)
			} else {
				fmt.Fprintln(w, "checkpoint used: none")
			}
			for _, c := range rep.PassedOver {
				fmt.Fprintf(w, "checkpoint passed over: seq %d at %d: %s\n", c.Seq, c.Offset, c.Why)
			}
			for _, s := range rep.Skipped {
				fmt.Fprintf(w, "skipped: offset %d, %d bytes, %s, seq gap %d (%d..%d)", s.Offset, s.Length, s.Reason, s.SeqGap, s.FirstSeq, s.LastSeq)
				if s.Turn != "" {
					fmt.Fprintf(w, ", in turn %s", s.Turn)
				}
				fmt.Fprintln(w)
			}
			if len(rep.RebuiltTurns) > 0 {
				fmt.Fprintf(w, "rebuilt from items: %v\n", rep.RebuiltTurns)
			}
			if len(st.Interrupted) > 0 {
				fmt.Fprintf(w, "interrupted (no end record): %v\n", st.Interrupted)
			}
			if rep.TornTail {
				fmt.Fprintf(w, "torn tail at offset %d (cut when a writer next opens the thread)\n", rep.TornTailOffset)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&g.json, "json", false, "print one JSON document")
	cmd.Flags().BoolVar(&full, "full", false, "ignore checkpoints: model history from every turn")
	return cmd
}

// reportJSON is a recovery report with its lists as [] when empty, never
// null (scripts iterate over them).
func reportJSON(rep recovery.Report) recovery.Report {
	if rep.Skipped == nil {
		rep.Skipped = []recovery.Skipped{}
	}
	if rep.RebuiltTurns == nil {
		rep.RebuiltTurns = []string{}
	}
	if rep.PassedOver == nil {
		rep.PassedOver = []recovery.CheckpointInfo{}
	}
	return rep
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func printJSON(g *globals, v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newRepairCmd(g *globals) *cobra.Command {
	var all, dry bool
	cmd := &cobra.Command{
		Use:   "repair THREAD...|--all",
		Short: "Cut torn tails and rewrite rollouts with mid-file damage",
		Long: `repair cuts a torn tail (keeping the bytes beside the file) or rewrites a
rollout with mid-file damage into one holding every surviving record and a
records_lost placeholder per lost seq, keeping the original aside. It takes
the thread's writer lock and refuses (exit 4) a thread a live host holds.
--dry-run says what it would do.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return usageError("name threads or pass --all (not both)")
			}
			if isFleet(g.workspace) {
				return errors.WithHint(errors.New("repair works on a local workspace's rollout files"),
					"a fleet's frames are checked at every commit and read; verify reports damage, and backup writes a local copy that repair can work on")
			}
			files, err := findRollouts(g.workspace, args)
			if err != nil {
				return err
			}
			var reps []*recovery.RepairReport
			var firstErr error
			for _, f := range files {
				if f.Cold {
					// Compressed only after it was read whole and checked:
					// nothing to cut. Restore it to repair it.
					if len(args) > 0 && firstErr == nil {
						firstErr = errors.WithHint(errors.Newf("thread %s is archived compressed", f.ID), "restore it first: rolloutctl restore "+f.ID)
					}
					continue
				}
				rep, err := recovery.Repair(cmd.Context(), f.Path, f.ID, recovery.RepairOptions{DryRun: dry})
				if err != nil {
					if firstErr == nil {
						firstErr = errors.Wrapf(err, "thread %s", f.ID)
					}
					continue
				}
				reps = append(reps, rep)
				if !g.json {
					verb := map[bool]string{true: "would", false: "did"}[dry]
					fmt.Fprintf(g.stdout, "%-40s %s %s: %d record(s) kept, %d seq(s) lost", f.ID, verb, rep.Action, rep.RecordsKept, rep.SeqsLost)
					if rep.OriginalSavedTo != "" {
						fmt.Fprintf(g.stdout, ", original kept as %s", rep.OriginalSavedTo)
					}
					if rep.TornSavedTo != "" {
						fmt.Fprintf(g.stdout, ", torn bytes kept as %s", rep.TornSavedTo)
					}
					fmt.Fprintln(g.stdout)
				}
			}
			if g.json {
				if reps == nil {
					reps = []*recovery.RepairReport{}
				}
				if err := printJSON(g, map[string]any{"threads": reps}); err != nil {
					return err
				}
			}
			if errors.Is(firstErr, rollout.ErrThreadLocked) {
				return &exitError{code: exitLocked, err: firstErr}
			}
			return identityExit(firstErr)
		},
	}
	cmd.Flags().BoolVar(&g.json, "json", false, "print one JSON document")
	cmd.Flags().BoolVar(&all, "all", false, "every thread of the workspace")
	cmd.Flags().BoolVar(&dry, "dry-run", false, "say what would be done, change nothing")
	return cmd
}
