package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/rolloutdb/rolloutdb"
	"github.com/spf13/cobra"
)

// followJSON is one line of follow --json.
type followJSON struct {
	Seq  uint64    `json:"seq"`
	Kind string    `json:"kind"`
	Turn string    `json:"turn,omitempty"`
	Time time.Time `json:"time"`
	// Body is the decoded record body; null for a kind this version does
	// not know or a body that does not decode.
	Body any `json:"body"`
}

func newFollowCmd(g *globals) *cobra.Command {
	var after uint64
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "follow THREAD",
		Short: "Print a thread's records as they become durable, like tail -f",
		Long: `follow prints a thread's records, then waits for new ones and prints each
once it is durable, until the thread is archived (exit 0), deleted or
its rollout replaced by a repair (exit 1), or interrupted (Ctrl-C, exit 0).
It takes no lock: it runs beside the host that writes the thread.`,
		Args:    cobra.ExactArgs(1),
		PreRunE: validIDs,
	}
	cmd.Flags().Uint64Var(&after, "after-seq", 0, "print only the records after this seq")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print one JSON object a line: {"seq", "kind", "turn", "time", "body"}`)
	cmd.RunE = withDB(g, func(ctx context.Context, db *rolloutdb.DB, args []string) error {
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
		defer stop()
		f, err := db.Follow(ctx, args[0], rolloutdb.FollowOptions{AfterSeq: after})
		if err != nil {
			return err
		}
		defer f.Close()
		enc := json.NewEncoder(g.stdout)
		for f.Next() {
			rec := f.Record()
			if asJSON {
				line := followJSON{Seq: rec.Seq, Kind: string(rec.Kind), Turn: rec.Turn, Time: rec.Time}
				if b, err := rec.DecodeBody(); err == nil {
					line.Body = b
				}
				if err := enc.Encode(line); err != nil {
					return err
				}
				continue
			}
			fmt.Fprintf(g.stdout, "%6d  %s  %-22s %s\n", rec.Seq, rec.Time.Format("15:04:05.000"), rec.Kind, summarize(rec))
		}
		if err := f.Err(); err != nil && ctx.Err() == nil {
			return err
		}
		if f.End() == rolloutdb.FollowArchived {
			fmt.Fprintf(g.stderr, "thread %s archived\n", args[0])
		}
		return nil
	})
	return cmd
}
