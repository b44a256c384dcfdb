package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/spf13/cobra"
)

type recordJSON struct {
	Seq     uint64 `json:"seq"`
	Offset  int64  `json:"offset"`
	Kind    string `json:"kind"`
	Turn    string `json:"turn,omitempty"`
	Summary string `json:"summary,omitempty"`
}

// summarize is a one-line view of a record for people.
func summarize(rec rollout.Record) string {
	v, err := rec.DecodeBody()
	if err != nil {
		if !rec.Kind.Known() {
			return fmt.Sprintf("(unknown kind, %d bytes, skipped)", len(rec.Body))
		}
		return "(undecodable body: " + err.Error() + ")"
	}
	switch b := v.(type) {
	case *rollout.Item:
		s := string(b.Type)
		if b.Name != "" {
			s += " " + b.Name
		}
		if b.Text != "" {
			s += ": " + oneLine(b.Text, 70)
		}
		if b.Ref != nil {
			s += fmt.Sprintf(" [artifact %s, %d bytes]", b.Ref.Path, b.Ref.Size)
		}
		return s
	case *rollout.ModelHistory:
		return fmt.Sprintf("%d provider message(s)", len(b.Messages))
	case *rollout.Checkpoint:
		return fmt.Sprintf("covers turn %s, %d -> %d tokens (%s)", b.CoveredTurn, b.TokensBefore, b.TokensAfter, b.Trigger)
	case *rollout.TurnStarted:
		return turnSettings(b.Model, b.Metadata)
	case *rollout.TurnCompleted:
		return fmt.Sprintf("%s, %d tokens", b.Status, b.Usage.TotalTokens)
	case *rollout.TurnAborted:
		return b.Reason
	case *rollout.ThreadOpened:
		return fmt.Sprintf("thread %s (%s) in workspace %s", b.ThreadID, b.Source.Kind, b.WorkspaceID)
	}
	return ""
}

// turnSettings is a turn's model and metadata on one line, the keys in
// order: "model gpt-5-codex, approval_policy on-request, cwd /src".
func turnSettings(model string, meta map[string]string) string {
	var parts []string
	if model != "" {
		parts = append(parts, "model "+model)
	}
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, k+" "+meta[k])
	}
	return strings.Join(parts, ", ")
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func newShowCmd(g *globals) *cobra.Command {
	var records bool
	cmd := &cobra.Command{
		Use:   "show THREAD",
		Short: "Show a thread's header, counts and checkpoints (--records: every record)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := findRollouts(g.workspace, args)
			if err != nil {
				return err
			}
			f := files[0]
			var recs []recordJSON
			res, err := scan(f, false, func(off int64, rec rollout.Record) {
				if records {
					recs = append(recs, recordJSON{Seq: rec.Seq, Offset: off, Kind: string(rec.Kind), Turn: rec.Turn, Summary: summarize(rec)})
				}
			})
			if err != nil {
				return err
			}
			status := "active"
			if f.Archived {
				status = "archived"
			}
			biz, err := businessOf(cmd.Context(), g, f.ID)
			if err != nil {
				// The rollout is the authority and was read: say what is
				// missing, show the rest.
				fmt.Fprintf(g.stderr, "warning: edges and goals not shown: %v\n", err)
			}
			kinds := map[string]int{}
			for k, n := range res.Kinds {
				kinds[string(k)] = n
			}
			damage := []damageJSON{}
			for _, d := range res.Damage {
				damage = append(damage, toDamageJSON(d))
			}
			if g.json {
				doc := map[string]any{
					"id": f.ID, "status": status, "path": f.Path, "header": res.Header,
					"records": res.Records, "bytes": res.Bytes, "turns": res.Turns, "open_turn": res.OpenTurn,
					"last_seq": res.LastSeq, "kinds": kinds, "checkpoint_offsets": append([]int64{}, res.Checkpoints...),
					"damage": damage, "torn_tail": res.TornTail != nil,
					"edges": biz.Edges, "goals": biz.Goals,
				}
				if records {
					doc["record_list"] = recs
				}
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(doc)
			}
			w := g.stdout
			fmt.Fprintf(w, "thread     %s (%s)\n", f.ID, status)
			if h := res.Header; h != nil {
				fmt.Fprintf(w, "source     %s", h.Source.Kind)
				if h.Source.Parent != "" {
					fmt.Fprintf(w, " of %s (depth %d)", h.Source.Parent, h.Source.Depth)
				}
				fmt.Fprintf(w, "\ncreated    %s by %s\nworkspace  %s\n", h.Created.Format("2006-01-02 15:04:05Z07:00"), h.Host, h.WorkspaceID)
			}
			fmt.Fprintf(w, "records    %d (last seq %d), %d bytes\nturns      %d", res.Records, res.LastSeq, res.Bytes, res.Turns)
			if res.OpenTurn != "" {
				fmt.Fprintf(w, " (turn %s has no end record)", res.OpenTurn)
			}
			fmt.Fprintf(w, "\ncheckpoints %d\n", len(res.Checkpoints))
			names := make([]string, 0, len(kinds))
			for k := range kinds {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, k := range names {
				fmt.Fprintf(w, "  %-24s %d\n", k, kinds[k])
			}
			for _, e := range biz.Edges {
				other, role := e.Child, "subagent"
				if e.Child == f.ID {
					other, role = e.Parent, "parent  "
				}
				fmt.Fprintf(w, "%s   %s (edge %s)\n", role, other, e.Status)
			}
			for _, gl := range biz.Goals {
				fmt.Fprintf(w, "goal       %s [%s]\n", oneLine(gl.Text, 70), gl.Status)
			}
			if len(damage) > 0 || res.TornTail != nil {
				fmt.Fprintf(w, "damage     %d region(s), torn tail: %v (run verify for details)\n", len(damage), res.TornTail != nil)
			}
			for _, r := range recs {
				fmt.Fprintf(w, "%6d @%-9d %-24s %s\n", r.Seq, r.Offset, r.Kind, r.Summary)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&g.json, "json", false, "print one JSON document")
	cmd.Flags().BoolVar(&records, "records", false, "list every record")
	return cmd
}

// business is what state.db alone knows of a thread (not in its rollout).
type business struct {
	Edges []projection.Edge
	Goals []projection.Goal
}

// businessOf reads a thread's edges (as parent and as child) and goals.
func businessOf(ctx context.Context, g *globals, id string) (business, error) {
	b := business{Edges: []projection.Edge{}, Goals: []projection.Goal{}}
	db, err := openWorkspace(ctx, g)
	if err != nil {
		return b, err
	}
	defer db.Close()
	for _, f := range []projection.EdgeFilter{{Parent: id}, {Child: id}} {
		es, err := db.Business().Edges(ctx, f)
		if err != nil {
			return b, err
		}
		b.Edges = append(b.Edges, es...)
	}
	gs, err := db.Business().Goals(ctx, id)
	if err != nil {
		return b, err
	}
	b.Goals = append(b.Goals, gs...)
	return b, nil
}
