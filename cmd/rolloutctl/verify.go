package main

import (
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/spf13/cobra"
)

type damageJSON struct {
	Offset   int64  `json:"offset"`
	Length   int64  `json:"length"`
	Reason   string `json:"reason"`
	FirstSeq uint64 `json:"first_seq,omitempty"`
	LastSeq  uint64 `json:"last_seq,omitempty"`
	AckLost  bool   `json:"ack_lost,omitempty"`
}

type verifyThreadJSON struct {
	ID       string       `json:"id"`
	Archived bool         `json:"archived"`
	Records  int          `json:"records"`
	Bytes    int64        `json:"bytes"`
	TornTail bool         `json:"torn_tail"`
	Torn     *damageJSON  `json:"torn,omitempty"`
	Damage   []damageJSON `json:"damage"`
	Error    string       `json:"error,omitempty"`
	// Identity is why resume refuses the rollout (it is not safely this
	// workspace's thread), if it does.
	Identity string `json:"identity_error,omitempty"`
}

func toDamageJSON(d *rollout.CorruptionError) damageJSON {
	return damageJSON{Offset: d.Offset, Length: d.Length, Reason: string(d.Reason), FirstSeq: d.FirstSeq, LastSeq: d.LastSeq, AckLost: d.AckLost}
}

func newVerifyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verify [THREAD...]",
		Short: "Read every frame of the workspace's rollouts and report damage",
		Long: `verify reads every frame of each rollout (all threads by default). A torn
tail (the residue of a crash, cut by the next writer) is reported but is not
damage; mid-file damage and unreadable files are, and make the exit code 1.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := findRollouts(g.workspace, args)
			if err != nil {
				return err
			}
			ws, err := workspaceID(g.workspace)
			if err != nil {
				return err
			}
			var out []verifyThreadJSON
			bad, refused := 0, 0
			for _, f := range files {
				v := verifyThreadJSON{ID: f.ID, Archived: f.Archived, Damage: []damageJSON{}}
				res, err := scan(f.Path, false, nil)
				if err != nil {
					v.Error = err.Error()
					bad++
				} else {
					v.Records, v.Bytes = res.Records, res.Bytes
					if res.TornTail != nil {
						v.TornTail = true
						d := toDamageJSON(res.TornTail)
						v.Torn = &d
					}
					for _, d := range res.Damage {
						v.Damage = append(v.Damage, toDamageJSON(d))
					}
					if len(res.Damage) > 0 {
						bad++
					}
					// Whose thread it is, by resume's own rules: verify
					// never passes a rollout a host could not continue.
					if _, err := resumeFile(cmd.Context(), f, ws, false); errors.Is(err, recovery.ErrIdentity) {
						v.Identity = err.Error()
						refused++
					} else if err != nil {
						v.Error = err.Error()
						bad++
					}
				}
				out = append(out, v)
			}
			if g.json {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(map[string]any{"threads": out}); err != nil {
					return err
				}
			} else {
				for _, v := range out {
					status := "ok"
					switch {
					case v.Error != "":
						status = "UNREADABLE: " + v.Error
					case v.Identity != "":
						status = "REFUSED: " + v.Identity
					case len(v.Damage) > 0:
						status = fmt.Sprintf("DAMAGED: %d region(s)", len(v.Damage))
					case v.TornTail:
						status = fmt.Sprintf("ok (torn tail of %d bytes at %d, cut on next open)", v.Torn.Length, v.Torn.Offset)
					}
					fmt.Fprintf(g.stdout, "%-40s %7d records %10d bytes  %s\n", v.ID, v.Records, v.Bytes, status)
					for _, d := range v.Damage {
						fmt.Fprintf(g.stdout, "  offset %d, %d bytes: %s, seq %d..%d lost%s\n", d.Offset, d.Length, d.Reason, d.FirstSeq, d.LastSeq, map[bool]string{true: " (acknowledged data)"}[d.AckLost])
					}
				}
				fmt.Fprintf(g.stdout, "%d thread(s) verified, %d damaged, %d refused (not this workspace's thread)\n", len(out), bad, refused)
			}
			if bad > 0 {
				return &exitError{code: exitFailed, err: errors.Newf("damage found in %d of %d thread(s)", bad, len(out))}
			}
			if refused > 0 {
				return &exitError{code: exitIdentity, err: errors.WithHint(errors.Newf("%d of %d rollout(s) are not safely this workspace's thread", refused, len(out)),
					"rolloutctl replay THREAD says why; such a file was usually copied or renamed over another thread's")}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&g.json, "json", false, "print one JSON document")
	return cmd
}
