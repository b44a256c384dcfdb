package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/projection"
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
	var checkState bool
	cmd := &cobra.Command{
		Use:   "verify [THREAD...]",
		Short: "Read every frame of the workspace's rollouts and report damage",
		Long: `verify reads every frame of each rollout (all threads by default). A torn
tail (the residue of a crash, cut by the next writer) is reported but is not
damage; mid-file damage and unreadable files are, and make the exit code 1.

--state also runs SQLite's full integrity check over state.db and search.db
(every page read: its cost grows with the files; a host's Open does not do
it). A state.db found corrupt is kept aside by the next open and rebuilt
from the rollouts; its business state is then lost, and verify says so.`,
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
				res, err := scan(f, false, nil)
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
					if err := checkIdentity(cmd.Context(), f, ws); errors.Is(err, recovery.ErrIdentity) {
						v.Identity = err.Error()
						refused++
					} else if err != nil {
						v.Error = err.Error()
						bad++
					}
				}
				out = append(out, v)
			}
			var state *stateCheckJSON
			if checkState {
				if state, err = verifyState(cmd.Context(), g); err != nil {
					return err
				}
			}
			if g.json {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				doc := map[string]any{"threads": out}
				if state != nil {
					doc["state"] = state
				}
				if err := enc.Encode(doc); err != nil {
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
				if state != nil {
					state.print(g)
				}
			}
			if state != nil && !state.OK {
				return &exitError{code: exitFailed, err: errors.WithHint(errors.New("state.db is damaged"),
					"the next open keeps it aside and rebuilds it from the rollouts; business state only it held is lost")}
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
	cmd.Flags().BoolVar(&checkState, "state", false, "also run the full integrity check of state.db and search.db")
	return cmd
}

// checkIdentity applies resume's identity rules to a rollout without
// building its state: verify's memory does not grow with the thread.
func checkIdentity(ctx context.Context, f rolloutFile, workspaceID string) error {
	src, size, done, err := f.read()
	if err != nil {
		return err
	}
	defer done()
	return recovery.CheckIdentity(ctx, src, size, recovery.Options{ThreadID: f.ID, WorkspaceID: workspaceID, Path: f.Path})
}

// stateCheckJSON is verify's --state finding.
type stateCheckJSON struct {
	OK bool `json:"ok"`
	// Integrity is SQLite's integrity_check of each file ("ok" when
	// sound).
	Integrity projection.IntegrityReport `json:"integrity"`
	// KeptAs is where opening the workspace put a state.db that was not a
	// database at all (it was rebuilt), with what that cost.
	KeptAs            string `json:"kept_as,omitempty"`
	BusinessStateLost bool   `json:"business_state_lost,omitempty"`
	Error             string `json:"error,omitempty"`
}

func verifyState(ctx context.Context, g *globals) (*stateCheckJSON, error) {
	db, err := openWorkspace(ctx, g)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var st stateCheckJSON
	if rep := db.StateReport(); rep.Corrupt {
		st.KeptAs, st.BusinessStateLost = rep.KeptAs, rep.BusinessStateLost
		st.Error = "state.db was corrupt (" + rep.Reason + ") and was rebuilt"
		return &st, nil
	}
	st.Integrity, err = db.CheckIntegrity(ctx)
	switch {
	case errors.Is(err, projection.ErrCorrupt):
		st.Error = err.Error()
	case err != nil:
		return nil, err
	default:
		st.OK = st.Integrity.OK()
	}
	return &st, nil
}

func (st *stateCheckJSON) print(g *globals) {
	switch {
	case st.OK:
		fmt.Fprintln(g.stdout, "state.db: ok (full integrity check)")
	case st.KeptAs != "":
		fmt.Fprintf(g.stdout, "state.db: DAMAGED: %s; kept aside as %s%s\n", st.Error, st.KeptAs,
			map[bool]string{true: "; business state it held is lost"}[st.BusinessStateLost])
	default:
		fmt.Fprintf(g.stdout, "state.db: DAMAGED: %s\n", strings.Join(append(st.Integrity.StateDB, st.Integrity.SearchDB...), "; "))
		if st.Error != "" {
			fmt.Fprintf(g.stdout, "  %s\n", st.Error)
		}
	}
}
