package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// printTable writes the readable report: the machine, the sizes, one table
// per kind of scenario, the ratios, and the notes.
func printTable(w io.Writer, rep *report) {
	m, c := rep.Machine, rep.Config
	fmt.Fprintf(w, "rolloutbench: %s/%s, %d CPUs (%s), %d MiB, %s, kernel %s\n", m.GOOS, m.GOARCH, m.CPUs, m.CPUModel, m.MemMB, m.GoVersion, m.Kernel)
	fmt.Fprintf(w, "data: %s on %s %s", m.Dir, m.FSType, m.FSDevice)
	if !m.FsyncMeaningful {
		fmt.Fprint(w, "  (WARNING: a memory file system, fsync is free: append figures are meaningless)")
	}
	fmt.Fprintln(w)
	if r := m.Raw; r.AppendSync > 0 {
		fmt.Fprintf(w, "disk, 1 KiB records each durable before the next: append+fdatasync %s/s, overwrite in place on pre-zeroed space %s/s (%.2fx), 64 files %s/s, 64 writers sharing one group-committed file %s/s (%.1fx the 64 files)\n",
			num(r.AppendSync), num(r.OverwriteSync), r.OverwriteSync/r.AppendSync, num(r.Files64), num(r.Shared64), r.Shared64/r.Files64)
	}
	if c.FleetCfg == nil {
		fmt.Fprintf(w, "sizes: %d records per append scenario (+ warm-up %d), writers %s, %d threads; rewrite capped at %d records a thread; replay %d turns (median of %d); list %d threads (%d pages); seed %d\n",
			c.Records, c.Warmup, joinInts(c.Writers), c.Threads, c.RewriteMax, c.ReplayTurns, c.ReplayRepeat, c.ListThreads, c.ListRepeat, c.Seed)
	}

	var appends, longs, replays, lists, sizes, fleets []result
	for _, r := range rep.Results {
		switch {
		case strings.HasPrefix(r.Scenario, "fleet-"):
			fleets = append(fleets, r)
		case r.Scenario == "append-long-turn":
			longs = append(longs, r)
		case strings.HasPrefix(r.Scenario, "append-"):
			appends = append(appends, r)
		case r.Scenario == "replay":
			replays = append(replays, r)
		case strings.HasPrefix(r.Scenario, "list-"):
			lists = append(lists, r)
		default:
			sizes = append(sizes, r)
		}
	}
	tab := func(title, header string, rows []result, line func(r result) string) {
		if len(rows) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s\n", title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, header+"\t")
		prev := ""
		for _, r := range rows {
			if r.Scenario != prev && prev != "" && strings.HasPrefix(r.Scenario, "append-") {
				fmt.Fprintln(tw, strings.Repeat("\t", strings.Count(header, "\t")+1)) // empty cells keep the columns
			}
			prev = r.Scenario
			fmt.Fprintln(tw, line(r)+"\t")
		}
		_ = tw.Flush()
	}
	tab("Durable appends (each append acknowledged = durable; latency of every append call)",
		"scenario\tsystem\trecords\trecords/s\tp50 µs\tp99 µs\tdisk B/rec\tof which log\twritten B/rec\trolloutdb is", appends,
		func(r result) string {
			return fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s", r.Scenario, r.System, r.Records, num(r.RecordsPerSec), num(r.P50us), num(r.P99us),
				num(r.BytesPerRecord), num(r.LogBytesPerRecord), num(r.WrittenBytesPerRecord), advantage(r, "faster", "slower"))
		})
	if f := c.FleetCfg; f != nil {
		own := "given by --dsn"
		if f.OwnCluster {
			own = "rolloutbench's own (fsync on), on CPUs " + cpuList(f.PGCPUs)
		}
		fmt.Fprintf(w, "fleet: PostgreSQL %s; host processes on CPUs %s; %d records of %d B a thread in %d rounds (+ warm-up); seed %d; workspace %s\n",
			own, cpuList(f.HostCPUs), c.Records/max(1, c.Threads), f.RecordBytes, c.Rounds, c.Seed, f.Workspace)
	}
	tab("Fleet: every thread appending at once, each record acknowledged before its next (latency of every append)",
		"scenario\tsystem\thosts\trecords\trecords/s\tsettled/s\tp50 µs\tp99 µs\tframes/commit\tPG CPU µs/rec\thost CPU µs/rec\tfleet is", fleets,
		func(r result) string {
			return fmt.Sprintf("%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", r.Scenario, r.System, r.Hosts, r.Records, num(r.RecordsPerSec), num(r.SettledRecordsPerSec),
				num(r.P50us), num(r.P99us), num(r.FramesPerCommit), num(r.PGCPUusPerRecord), num(r.HostCPUusPerRecord), fleetAdvantage(r))
		})
	tab("One open turn taking many items (each block timed with the system settled: projection and index done)",
		"system\titems\tfirst block/s\tlast block/s\tlast/first\tall records/s", longs,
		func(r result) string {
			return fmt.Sprintf("%s\t%d\t%s\t%s\t%.2fx\t%s", r.System, r.Records, num(r.FirstRecordsPerSec), num(r.LastRecordsPerSec), r.LastRecordsPerSec/r.FirstRecordsPerSec, num(r.RecordsPerSec))
		})
	tab("Replay of one large thread (median of the timed runs; warm page cache)",
		"system\trecords\tturns\ttime ms\trecords/s\tMB/s of its file\trolloutdb is", replays,
		func(r result) string {
			return fmt.Sprintf("%s\t%d\t%d\t%s\t%s\t%.0f\t%s", r.System, r.Records, r.Turns, num(r.Ms), num(r.RecordsPerSec), r.MBPerSec, advantage(r, "faster", "slower"))
		})
	tab("List: the 50 most recently updated threads (warm page cache)",
		"scenario\tsystem\tp50 ms\tp99 ms\trolloutdb is", lists,
		func(r result) string {
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", r.Scenario, r.System, num(r.P50us/1e3), num(r.P99us/1e3), advantage(r, "faster", "slower"))
		})
	tab("On-disk size of the large thread",
		"scenario\tsystem\tsize\tB/record\twith index\trolloutdb is", sizes,
		func(r result) string {
			total := ""
			if r.TotalBytes > 0 {
				total = humanBytes(r.TotalBytes)
			}
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", r.Scenario, r.System, humanBytes(r.Bytes), num(r.BytesPerRecord), total, advantage(r, "smaller", "larger"))
		})

	// The ratios, one line per system.
	var systems []string
	for _, r := range rep.Results {
		if strings.HasPrefix(r.Scenario, "fleet-") {
			continue // the fleet table has its own column
		}
		if r.System != sysRolloutdb && !slices.Contains(systems, r.System) {
			systems = append(systems, r.System)
		}
	}
	if len(systems) > 0 {
		fmt.Fprintf(w, "\nrolloutdb against each (above 1x rolloutdb wins, below it loses)\n")
		for _, s := range systems {
			var parts []string
			for _, r := range rep.Results {
				if r.System == s && r.RolloutdbAdvantage > 0 {
					parts = append(parts, fmt.Sprintf("%s %s", r.Scenario, ratio(r.RolloutdbAdvantage)))
				}
			}
			fmt.Fprintf(w, "  rolloutdb is, vs %s: %s\n", s, strings.Join(parts, ", "))
		}
	}
	first := true
	for _, r := range rep.Results {
		if r.Note == "" {
			continue
		}
		if first {
			fmt.Fprintf(w, "\nNotes\n")
			first = false
		}
		fmt.Fprintf(w, "  %s, %s: %s\n", r.Scenario, r.System, r.Note)
	}
}

// fleetAdvantage reads rolloutdb_advantage of a fleet scenario's row.
func fleetAdvantage(r result) string {
	if r.RolloutdbAdvantage == 0 {
		return "-" // the base
	}
	return advantage(r, "faster", "slower")
}

// advantage reads rolloutdb_advantage: "18.3x faster", or, when rolloutdb
// loses, "0.25x (4.0x slower)".
func advantage(r result, better, worse string) string {
	a := r.RolloutdbAdvantage
	switch {
	case r.System == sysRolloutdb:
		return "-"
	case a == 0:
		return "?"
	case a >= 1:
		return fmt.Sprintf("%s %s", ratio(a), better)
	default:
		return fmt.Sprintf("%s (%.1fx %s)", ratio(a), 1/a, worse)
	}
}

// ratio prints a ratio with two significant digits below 1 (0.0032x), two
// decimals above.
func ratio(a float64) string {
	if a < 1 {
		return fmt.Sprintf("%.2gx", a)
	}
	return fmt.Sprintf("%.2fx", a)
}

// num prints a figure with thousands separators and sensible precision.
func num(v float64) string {
	switch {
	case v == 0:
		return ""
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}
