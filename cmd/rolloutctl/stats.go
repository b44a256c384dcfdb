package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/spf13/cobra"
)

// statsJSON is what `stats --json` prints. Source says where the counts
// come from: "index" (state.db, the default) or "rollouts" (--verify: every
// rollout read). Records' total and kinds, compression, torn tails and
// unreadable rollouts are counted only by reading the rollouts.
type statsJSON struct {
	Source  string `json:"source"`
	Threads struct {
		Total          int `json:"total"`
		Active         int `json:"active"`
		Archived       int `json:"archived"`
		ArchivedCold   int `json:"archived_compressed"`
		Subagents      int `json:"subagents"`
		Forks          int `json:"forks"`
		OpenTurns      int `json:"open_turns"` // a turn with no end record (a live or crashed host)
		WithCheckpoint int `json:"with_checkpoint"`
	} `json:"threads"`
	Records struct {
		Total  int            `json:"total"`
		Turns  int            `json:"turns"`
		Items  int            `json:"items,omitempty"` // visible items, from the index
		ByKind map[string]int `json:"by_kind"`
	} `json:"records"`
	Bytes struct {
		Rollouts      int64   `json:"rollouts"` // on disk, all forms
		Active        int64   `json:"active"`
		ArchivedPlain int64   `json:"archived_plain"`
		ArchivedCold  int64   `json:"archived_compressed"`
		StateDB       int64   `json:"state_db"`  // with its -wal
		SearchDB      int64   `json:"search_db"` // the full-text index, with its -wal
		ToolResults   int64   `json:"tool_results"`
		Attachments   int64   `json:"attachments"`
		Terminals     int64   `json:"terminals"`
		PerRecord     float64 `json:"per_record"` // rollout bytes on disk per record
	} `json:"bytes"`
	Compression struct {
		Frames           int     `json:"frames"`
		FramesCompressed int     `json:"frames_compressed"`
		PayloadStored    int64   `json:"payload_stored"`  // frame payloads as stored
		PayloadDecoded   int64   `json:"payload_decoded"` // and once decoded
		FrameRatio       float64 `json:"frame_ratio"`     // stored / decoded
		ColdPlain        int64   `json:"cold_plain"`      // archived compressed rollouts, decompressed
		ColdRatio        float64 `json:"cold_ratio"`      // their size on disk / decompressed
	} `json:"compression"`
	Damage struct {
		ThreadsDamaged int      `json:"threads_damaged"`
		Regions        int      `json:"regions"`
		BytesLost      int64    `json:"bytes_lost"`
		TornTails      int      `json:"torn_tails"`
		Unreadable     []string `json:"unreadable"`
	} `json:"damage"`
}

func newStatsCmd(g *globals) *cobra.Command {
	var verify bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count the workspace's threads, turns and bytes (--verify: read every rollout)",
		Long: `stats counts threads, turns, items and bytes on disk (rollouts, state.db,
search.db, artifacts) from state.db, in the time of one query whatever the
workspace's size; rows are made to agree with the thread directories first.
Damage is what projecting the threads found.

With --verify it reads every rollout (active, archived, compressed) without
taking a lock instead, and also counts records by kind, how much
compression saves, and damage (mid-file regions, torn tails, unreadable
files; verify has the details). That needs no state.db, and costs a read
of every rollout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var st statsJSON
			var err error
			if verify {
				st, err = statsFromRollouts(cmd.Context(), g)
			} else {
				st, err = statsFromIndex(cmd.Context(), g)
			}
			if err != nil {
				return err
			}
			root := dataDir(g.workspace)
			for _, name := range []string{"search.db", "search.db-wal"} {
				if fi, err := os.Stat(filepath.Join(root, name)); err == nil {
					st.Bytes.SearchDB += fi.Size()
				}
			}
			for _, name := range []string{"state.db", "state.db-wal"} {
				if fi, err := os.Stat(filepath.Join(root, name)); err == nil {
					st.Bytes.StateDB += fi.Size()
				}
			}
			st.Bytes.ToolResults = treeSize(filepath.Join(root, artifacts.ToolResultsDir))
			st.Bytes.Attachments = treeSize(filepath.Join(root, artifacts.AttachmentsDir))
			st.Bytes.Terminals = treeSize(filepath.Join(root, artifacts.TerminalsDir))
			if g.json {
				return printJSON(g, st)
			}
			printStats(g, st)
			return nil
		},
	}
	cmd.Flags().BoolVar(&g.json, "json", false, "print one JSON document")
	cmd.Flags().BoolVar(&verify, "verify", false, "read every rollout: records by kind, compression, damage")
	return cmd
}

// statsFromIndex counts from state.db's rows.
func statsFromIndex(ctx context.Context, g *globals) (statsJSON, error) {
	st := statsJSON{Source: "index"}
	st.Records.ByKind = map[string]int{}
	st.Damage.Unreadable = []string{}
	db, err := openWorkspace(ctx, g)
	if err != nil {
		return st, err
	}
	defer db.Close()
	sum, err := db.Summary(ctx)
	if err != nil {
		return st, err
	}
	t := &st.Threads
	t.Total, t.Active, t.Archived, t.ArchivedCold = sum.Threads, sum.Active, sum.Archived, sum.ArchivedCompressed
	t.Subagents, t.Forks, t.OpenTurns, t.WithCheckpoint = sum.Subagents, sum.Forks, sum.OpenTurns, sum.WithCheckpoint
	st.Records.Turns, st.Records.Items = int(sum.Turns), int(sum.Items)
	b := &st.Bytes
	b.Rollouts, b.Active, b.ArchivedPlain, b.ArchivedCold = sum.RolloutBytes, sum.ActiveBytes, sum.ArchivedBytes, sum.ArchivedCompressedBytes
	st.Damage.ThreadsDamaged, st.Damage.Regions = sum.Damaged, int(sum.DamageSeen)
	return st, nil
}

// statsFromRollouts reads every rollout.
func statsFromRollouts(ctx context.Context, g *globals) (statsJSON, error) {
	st := statsJSON{Source: "rollouts"}
	st.Records.ByKind = map[string]int{}
	st.Damage.Unreadable = []string{}
	files, err := findRollouts(g.workspace, nil)
	if err != nil {
		return st, err
	}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		st.Threads.Total++
		res, err := scan(f, true, nil)
		var onDisk int64
		if f.open != nil {
			if err == nil {
				onDisk = res.Bytes // a fleet thread's frames, as the scan read them
			}
		} else if fi, err := os.Lstat(f.Path); err == nil {
			onDisk = fi.Size()
		}
		st.Bytes.Rollouts += onDisk
		switch {
		case f.Cold:
			st.Threads.Archived++
			st.Threads.ArchivedCold++
			st.Bytes.ArchivedCold += onDisk
		case f.Archived:
			st.Threads.Archived++
			st.Bytes.ArchivedPlain += onDisk
		default:
			st.Threads.Active++
			st.Bytes.Active += onDisk
		}
		if err != nil {
			st.Damage.Unreadable = append(st.Damage.Unreadable, f.ID)
			continue
		}
		if f.Cold {
			st.Compression.ColdPlain += res.Plain
		}
		if h := res.Header; h != nil {
			if h.Source.Kind == rollout.SourceSubagent {
				st.Threads.Subagents++
			}
			if h.ForkedFrom != nil {
				st.Threads.Forks++
			}
		}
		if res.OpenTurn != "" {
			st.Threads.OpenTurns++
		}
		if len(res.Checkpoints) > 0 {
			st.Threads.WithCheckpoint++
		}
		st.Records.Total += res.Records
		st.Records.Turns += res.Turns
		for k, n := range res.Kinds {
			st.Records.ByKind[string(k)] += n
		}
		st.Compression.Frames += res.Frames
		st.Compression.FramesCompressed += res.Compressed
		st.Compression.PayloadStored += res.Stored
		st.Compression.PayloadDecoded += res.Raw
		if len(res.Damage) > 0 {
			st.Damage.ThreadsDamaged++
		}
		for _, d := range res.Damage {
			st.Damage.Regions++
			st.Damage.BytesLost += d.Length
		}
		if res.TornTail != nil {
			st.Damage.TornTails++
		}
	}
	if st.Records.Total > 0 {
		st.Bytes.PerRecord = float64(st.Bytes.Rollouts) / float64(st.Records.Total)
	}
	if st.Compression.PayloadDecoded > 0 {
		st.Compression.FrameRatio = float64(st.Compression.PayloadStored) / float64(st.Compression.PayloadDecoded)
	}
	if st.Compression.ColdPlain > 0 {
		st.Compression.ColdRatio = float64(st.Bytes.ArchivedCold) / float64(st.Compression.ColdPlain)
	}
	return st, nil
}

// treeSize sums the regular files under dir (links are not followed).
func treeSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func printStats(g *globals, st statsJSON) {
	w := g.stdout
	t := st.Threads
	fmt.Fprintf(w, "threads      %d: %d active, %d archived (%d compressed); %d subagent(s), %d fork(s), %d with a checkpoint, %d with an open turn\n",
		t.Total, t.Active, t.Archived, t.ArchivedCold, t.Subagents, t.Forks, t.WithCheckpoint, t.OpenTurns)
	index := st.Source == "index"
	if index {
		fmt.Fprintf(w, "turns        %d visible, with %d item(s)\n", st.Records.Turns, st.Records.Items)
	} else {
		fmt.Fprintf(w, "records      %d in %d turn(s)\n", st.Records.Total, st.Records.Turns)
		kinds := make([]string, 0, len(st.Records.ByKind))
		for k := range st.Records.ByKind {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		for _, k := range kinds {
			fmt.Fprintf(w, "  %-24s %d\n", k, st.Records.ByKind[k])
		}
	}
	b := st.Bytes
	fmt.Fprintf(w, "bytes        rollouts %s (active %s, archived %s + %s compressed)", human(b.Rollouts), human(b.Active), human(b.ArchivedPlain), human(b.ArchivedCold))
	if !index {
		fmt.Fprintf(w, ", %.0f per record", b.PerRecord)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "             state.db %s, search.db %s, tool results %s, attachments %s, terminals %s\n",
		human(b.StateDB), human(b.SearchDB), human(b.ToolResults), human(b.Attachments), human(b.Terminals))
	d := st.Damage
	if index {
		fmt.Fprintf(w, "damage       %d thread(s) with %d rejected record(s) or damaged region(s) seen while projecting", d.ThreadsDamaged, d.Regions)
		if d.ThreadsDamaged > 0 {
			fmt.Fprint(w, " (rolloutctl verify has the details)")
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "(from state.db; stats --verify reads every rollout: records by kind, compression, torn tails)")
		return
	}
	c := st.Compression
	fmt.Fprintf(w, "compression  %d of %d frame(s) zstd; payloads %s stored for %s (%.2fx)",
		c.FramesCompressed, c.Frames, human(c.PayloadStored), human(c.PayloadDecoded), c.FrameRatio)
	if c.ColdPlain > 0 {
		fmt.Fprintf(w, "; archived compressed %s for %s (%.2fx)", human(b.ArchivedCold), human(c.ColdPlain), c.ColdRatio)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "damage       %d thread(s) with %d region(s), %s lost; %d torn tail(s); %d unreadable",
		d.ThreadsDamaged, d.Regions, human(d.BytesLost), d.TornTails, len(d.Unreadable))
	if d.ThreadsDamaged+d.TornTails+len(d.Unreadable) > 0 {
		fmt.Fprint(w, " (rolloutctl verify has the details)")
	}
	fmt.Fprintln(w)
}

// human prints a byte count for people.
func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
