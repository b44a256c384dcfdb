package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"time"
)

func main() {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// config is a run's settings.
type config struct {
	iterations int
	seed       uint64
	dir        string // this run's directory (workspaces, state.dbs)
	keepFor    int    // iterations a workspace is continued before a new one
	threads    int    // at most this many threads written per iteration
	// minDelay..maxDelay: when the kill comes after the child is ready.
	minDelay, maxDelay time.Duration
	phase1             time.Duration // twoproc: how long the second process reads
	namespaceFaults    bool          // fault mode: fail create, link, remove and directory syncs too
	large              float64       // probability that a text is large (40-340 KiB)
	ops                int64         // power: the cut comes within this many file operations; fault: faults last up to this many
	lease              time.Duration // fleet: the hosts' lease
	faults             []string      // fleet: the faults, one per iteration in turn
	until              time.Time     // fleet: no iteration starts after this (zero: none)
	exe                string        // the binary children run (this one)
	logger             *slog.Logger
	errOut             io.Writer
}

func (cfg *config) checker(mode string, iter int) *checker {
	return &checker{mode: mode, seed: cfg.seed, iter: iter, st: &stats{}, out: cfg.errOut}
}

var modes = []struct {
	name string
	run  func(context.Context, *config, *stats)
}{
	{"kill", runKill},
	{"power", runPower},
	{"fault", runFault},
	{"twoproc", runTwoproc},
	{"fleet", runFleet},
}

// summary is the run's result; with --json it is printed as one document.
type summary struct {
	stats
	Seed    uint64            `json:"seed"`
	Dir     string            `json:"dir,omitempty"` // kept: something failed
	Elapsed float64           `json:"elapsed_seconds"`
	Modes   map[string]*stats `json:"modes"`
}

// run is the harness; it returns the exit code: 0 only if nothing was lost,
// no rollout was unreadable, no projection differed and no other check
// failed.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rolloutcrash", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: rolloutcrash [--mode kill|power|fault|twoproc|all|fleet] [--fleet] [--iterations N] [--seed S] [--dir DIR] [--json]")
		fs.PrintDefaults()
	}
	mode := fs.String("mode", "all", "kill, power, fault, twoproc, all (the four), or fleet")
	iterations := fs.Int("iterations", 20, "iterations of each mode")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()%1_000_000), "random seed (printed; the same seed makes the same choices)")
	dir := fs.String("dir", "", "parent directory of the run's workspaces (default: the system temp directory); the run's own directory is removed on success and kept on failure")
	asJSON := fs.Bool("json", false, "print the summary as one JSON document")
	keepFor := fs.Int("continue", 8, "iterations a workspace is continued before a new one is started")
	threads := fs.Int("threads", 4, "most threads written concurrently per iteration (at least 2)")
	minDelay := fs.Duration("min-delay", 5*time.Millisecond, "kill mode: shortest delay after the child is ready")
	maxDelay := fs.Duration("max-delay", 250*time.Millisecond, "kill mode: longest delay after the child is ready")
	phase1 := fs.Duration("read-for", 300*time.Millisecond, "twoproc mode: how long the second process reads while the first writes")
	timeout := fs.Duration("iteration-timeout", 5*time.Minute, "a mode that runs longer than this per iteration is taken to hang: its goroutines are dumped and the run fails")
	namespaceFaults := fs.Bool("namespace-faults", true, "fault mode: fail creates, links, removes and directory syncs too, not only writes, fsyncs and truncates")
	large := fs.Float64("large", 0.01, "probability that a text the workload writes is large (40-340 KiB; tool outputs over 32 KiB are spilled to artifacts in the kill and twoproc modes)")
	ops := fs.Int64("ops", 800, "power mode: the power is cut within this many file-system operations; fault mode: faults are injected for up to this many; twoproc mode: each writer makes at most a quarter as many calls")
	verbose := fs.Bool("v", false, "pass the library's log to stderr")
	fleetMode := fs.Bool("fleet", false, "the fleet mode (same as --mode fleet): host processes on PostgreSQL, which the run starts (postgresql-15's binaries)")
	lease := fs.Duration("lease", time.Second, "fleet mode: the hosts' lease time to live")
	duration := fs.Duration("duration", 0, "fleet mode: start no iteration after this long (0: run every --iterations); the summary counts the iterations run")
	faults := fs.String("faults", strings.Join(fleetFaults, ","), "fleet mode: the faults, one per iteration in turn (kill: a host SIGKILLed; stop: a host SIGSTOPped past its lease; pgkill: PostgreSQL killed and restarted; promote: its standby promoted; partition: a host cut off)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "rolloutcrash: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *fleetMode {
		*mode = "fleet"
	}
	var selected []string
	for _, m := range modes {
		// "all" is the local modes: the fleet mode needs PostgreSQL.
		if (*mode == "all" && m.name != "fleet") || *mode == m.name {
			selected = append(selected, m.name)
		}
	}
	if len(selected) == 0 {
		fmt.Fprintf(stderr, "rolloutcrash: unknown mode %q (kill, power, fault, twoproc, all, fleet)\n", *mode)
		return 2
	}
	if *iterations < 1 || *keepFor < 1 || *maxDelay < *minDelay || *minDelay < 0 || *ops < 10 || *large < 0 || *large > 0.2 || *lease < 100*time.Millisecond {
		fmt.Fprintln(stderr, "rolloutcrash: --iterations and --continue must be positive, --min-delay <= --max-delay, --ops >= 10, 0 <= --large <= 0.2 and --lease >= 100ms")
		return 2
	}
	var faultList []string
	for _, f := range strings.Split(*faults, ",") {
		if !slices.Contains(fleetFaults, f) {
			fmt.Fprintf(stderr, "rolloutcrash: unknown fault %q (%s)\n", f, strings.Join(fleetFaults, ", "))
			return 2
		}
		faultList = append(faultList, f)
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "rolloutcrash: find this binary to run children: %v\n", err)
		return 1
	}
	runDir, err := os.MkdirTemp(*dir, "rolloutcrash-")
	if err != nil {
		fmt.Fprintf(stderr, "rolloutcrash: %v\n", err)
		return 1
	}
	logOut := io.Discard
	if *verbose {
		logOut = stderr
	}
	cfg := &config{iterations: *iterations, seed: *seed, dir: runDir, keepFor: *keepFor, threads: max(*threads, 2),
		minDelay: *minDelay, maxDelay: *maxDelay, phase1: *phase1, namespaceFaults: *namespaceFaults, large: *large, ops: *ops, lease: *lease, faults: faultList, exe: exe,
		logger: slog.New(slog.NewTextHandler(logOut, nil)), errOut: stderr}

	start := time.Now()
	if *duration > 0 {
		cfg.until = start.Add(*duration)
	}
	sum := summary{Seed: *seed, Modes: map[string]*stats{}}
	for _, m := range modes {
		if !contains(selected, m.name) {
			continue
		}
		st := &stats{}
		done := watchdog(*timeout*time.Duration(*iterations), m.name, stderr)
		m.run(ctx, cfg, st)
		close(done)
		sum.Modes[m.name] = st
		sum.add(st)
	}
	sum.Elapsed = time.Since(start).Seconds()
	failed := sum.Lost > 0 || sum.Unreadable > 0 || sum.ProjectionMismatches > 0 || sum.Failures > 0
	if failed {
		sum.Dir = runDir
	} else {
		_ = os.RemoveAll(runDir)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(sum)
	} else {
		printSummary(stdout, &sum, selected)
	}
	if failed {
		fmt.Fprintf(stderr, "rolloutcrash: FAILED (%d checks). Workspaces kept in %s\n", sum.Failures, runDir)
		fmt.Fprintf(stderr, "reproduce with the same choices: %s --seed %d --iterations %d --mode <mode> (each FAIL line names its mode and iteration; workspaces are continued for %d iterations)\n",
			"rolloutcrash", *seed, *iterations, *keepFor)
		return 1
	}
	return 0
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func printSummary(w io.Writer, s *summary, selected []string) {
	fmt.Fprintf(w, "rolloutcrash seed %d: %d iterations, %d records acknowledged, %d lost, %d rollouts unreadable, %d projection mismatches, %d failed checks in all (%.1fs)\n",
		s.Seed, s.Iterations, s.Acknowledged, s.Lost, s.Unreadable, s.ProjectionMismatches, s.Failures, s.Elapsed)
	for _, name := range selected {
		m := s.Modes[name]
		var cs []string
		for k, v := range m.Counters {
			cs = append(cs, fmt.Sprintf("%s=%d", k, v))
		}
		sort.Strings(cs)
		fmt.Fprintf(w, "  %-8s %4d iterations %8d acknowledged %3d lost %3d unreadable %3d mismatches %3d failed  %s\n",
			name, m.Iterations, m.Acknowledged, m.Lost, m.Unreadable, m.ProjectionMismatches, m.Failures, strings.Join(cs, " "))
	}
}

// watchdog fails the run if a mode takes longer than d: a hang in the
// library (a lost wakeup, a lock never released) would otherwise hang the
// harness silently. It dumps every goroutine first.
func watchdog(d time.Duration, mode string, stderr io.Writer) chan struct{} {
	done := make(chan struct{})
	go func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			fmt.Fprintf(stderr, "FAIL [mode=%s] the mode did not finish in %v: a hang? goroutines:\n", mode, d)
			_ = pprof.Lookup("goroutine").WriteTo(stderr, 2)
			os.Exit(1)
		}
	}()
	return done
}

// debugf prints progress when ROLLOUTCRASH_DEBUG is set.
func debugf(format string, args ...any) {
	if os.Getenv("ROLLOUTCRASH_DEBUG") != "" {
		fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
	}
}
