package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
)

// config is the run's sizes, printed in --json.
type config struct {
	Records      int    `json:"records"`
	Writers      []int  `json:"writers"`
	Threads      int    `json:"threads"`
	Warmup       int    `json:"warmup"`
	Rounds       int    `json:"rounds"`
	LongTurn     int    `json:"long_turn"`
	RewriteMax   int    `json:"rewrite_max"`
	ReplayTurns  int    `json:"replay_turns"`
	ReplayRepeat int    `json:"replay_repeat"`
	ListThreads  int    `json:"list_threads"`
	ListRepeat   int    `json:"list_repeat"`
	Seed         uint64 `json:"seed"`
	// CompressAbove is rolloutdb's Options.CompressAbove (0: its default).
	CompressAbove int `json:"compress_above,omitempty"`
	// MaxProjectionLag is rolloutdb's Options.MaxProjectionLag (0: its
	// default).
	MaxProjectionLag int      `json:"max_projection_lag,omitempty"`
	Quick            bool     `json:"quick"`
	Systems          []string `json:"systems"`
	Scenarios        []string `json:"scenarios,omitempty"`
	DataDir          string   `json:"data_dir"`
	// Fleet runs the --fleet scenario alone; FleetCfg is its setup.
	Fleet      bool         `json:"fleet,omitempty"`
	FleetCfg   *fleetConfig `json:"fleet_config,omitempty"`
	Keep       bool         `json:"keep"`
	CPUProfile string       `json:"-"`
}

// report is the --json document.
type report struct {
	Machine machine  `json:"machine"`
	Config  *config  `json:"config"`
	Results []result `json:"results"`
}

func main() {
	if isHost() {
		os.Exit(hostMain(os.Stdin, os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// sizes are the defaults of the size flags, full and --quick.
type sizes struct{ records, warmup, rounds, longTurn, rewriteMax, replayTurns, replayRepeat, listThreads, listRepeat int }

var (
	fullSizes  = sizes{records: 8000, warmup: 50, rounds: 8, longTurn: 20000, rewriteMax: 1000, replayTurns: 5000, replayRepeat: 5, listThreads: 10000, listRepeat: 10}
	quickSizes = sizes{records: 600, warmup: 20, rounds: 2, longTurn: 3000, rewriteMax: 200, replayTurns: 500, replayRepeat: 3, listThreads: 2000, listRepeat: 5}
)

func parseFlags(args []string, stderr io.Writer) (*config, string, bool, error) {
	fs := flag.NewFlagSet("rolloutbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: rolloutbench [flags]\n\nCompares durable appends, replay, listing and on-disk size of rolloutdb\nwith a JSONL file fsynced per record, a session rewritten per save,\nSQLite, and pebble with Sync writes (see go doc ./cmd/rolloutbench).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	cfg := &config{}
	d := fullSizes
	fs.IntVar(&cfg.Records, "records", d.records, "records per append scenario (all appenders together)")
	writers := fs.String("writers", "1,8,64", "concurrent appenders on one thread, one scenario each")
	fs.IntVar(&cfg.Threads, "threads", 64, "threads appended at once in the many-threads scenario")
	fs.IntVar(&cfg.Warmup, "warmup", d.warmup, "warm-up records per scenario, not measured (split over the threads)")
	fs.IntVar(&cfg.LongTurn, "long-turn", d.longTurn, "items appended into one open turn in the append-long-turn scenario")
	fs.IntVar(&cfg.Rounds, "rounds", d.rounds, "rounds of each append scenario: the systems take turns, a round each, so that a drifting disk weighs on each alike")
	fs.IntVar(&cfg.RewriteMax, "rewrite-max", d.rewriteMax, "records a rewrite session may reach (warm-up included): it is O(n^2)")
	fs.IntVar(&cfg.ReplayTurns, "replay-turns", d.replayTurns, "turns of the thread replayed and archived")
	fs.IntVar(&cfg.ReplayRepeat, "replay-repeat", d.replayRepeat, "timed replays per system (after one warm-up); the median is reported")
	fs.IntVar(&cfg.ListThreads, "list-threads", d.listThreads, "threads in the list scenario")
	fs.IntVar(&cfg.ListRepeat, "list-repeat", d.listRepeat, "timed pages per system (after one first call)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the generated workload")
	fs.IntVar(&cfg.CompressAbove, "compress-above", 0, "rolloutdb's Options.CompressAbove: frames of at least this many bytes are zstd-compressed (0: the library default, 4096; -1: never)")
	fs.IntVar(&cfg.MaxProjectionLag, "max-projection-lag", 0, "rolloutdb's Options.MaxProjectionLag: records the projector may hold unapplied before appends wait for it (0: the library default, 8192; -1: no bound)")
	fs.BoolVar(&cfg.Quick, "quick", false, "small sizes (under a minute on 2 cores); explicit size flags still win")
	systems := fs.String("systems", "", "comma-separated systems to run (default: all but rollout-writer-fsync, which runs only when named)")
	scenarios := fs.String("scenarios", "", "comma-separated scenario prefixes to run: append, replay, list, size (default: all; size needs replay)")
	dir := fs.String("dir", "", "parent directory of the data (default: the current directory); a fresh subdirectory is made in it")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the data directory")
	asJSON := fs.Bool("json", false, "print one JSON document on stdout instead of a table")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	fs.BoolVar(&cfg.Fleet, "fleet", false, "run the fleet scenario alone: --threads threads over --hosts host processes of one fleet workspace in PostgreSQL, against the local engine and a naive writer (a row per record, a transaction each)")
	hosts := fs.Int("hosts", 4, "--fleet: host processes of the fleet workspace (and of the naive writer)")
	dsn := fs.String("dsn", "", "--fleet: the PostgreSQL database to use (postgres://...); default: a throwaway cluster of rolloutbench's own (fsync on)")
	defaultPG, defaultHosts := "", ""
	if n := runtime.NumCPU(); n >= 2 {
		defaultPG, defaultHosts = "0", fmt.Sprintf("1-%d", n-1)
	}
	pgCPUs := fs.String("pg-cpus", defaultPG, "--fleet: CPUs rolloutbench's own PostgreSQL is bound to, every backend with it, as taskset -c takes them (\"all\": unbound)")
	statements := fs.Int("pg-statements", 0, "--fleet: print on stderr the N statements that took rolloutbench's own PostgreSQL longest (pg_stat_statements), all systems together")
	roundWindow := fs.Duration("round-window", 0, "--fleet: the fleet hosts' FleetOptions.RoundWindow (0: the library default; negative: rounds never wait)")
	hostCPUs := fs.String("host-cpus", defaultHosts, "--fleet: CPUs the host processes are bound to (\"all\": unbound)")
	if err := fs.Parse(args); err != nil {
		return nil, "", false, err
	}
	if fs.NArg() > 0 {
		return nil, "", false, errors.Newf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.Fleet {
		// The fleet's sizes: appends are slower, and a round must be long
		// enough for the hosts' rounds to settle into their rhythm.
		d, w, r := 64000, 640, 4
		if cfg.Quick {
			d, w, r = 6400, 64, 2
		}
		if !set["records"] {
			cfg.Records = d
		}
		if !set["warmup"] {
			cfg.Warmup = w
		}
		if !set["rounds"] {
			cfg.Rounds = r
		}
		fc := &fleetConfig{Hosts: *hosts, DSN: *dsn, OwnCluster: *dsn == "", Statements: *statements, RoundWindow: *roundWindow}
		var err error
		if fc.HostCPUs, err = parseCPUs(*hostCPUs); err != nil {
			return nil, "", false, errors.Wrap(err, "--host-cpus")
		}
		if fc.PGCPUs, err = parseCPUs(*pgCPUs); err != nil {
			return nil, "", false, errors.Wrap(err, "--pg-cpus")
		}
		if !fc.OwnCluster {
			if set["pg-cpus"] && len(fc.PGCPUs) > 0 {
				return nil, "", false, errors.New("--pg-cpus binds rolloutbench's own cluster: with --dsn, bind the server yourself")
			}
			fc.PGCPUs = nil
		}
		if fc.Hosts < 1 || cfg.Threads < fc.Hosts {
			return nil, "", false, errors.Newf("--hosts must be from 1 to --threads (%d)", cfg.Threads)
		}
		if set["scenarios"] {
			return nil, "", false, errors.New("--scenarios does not apply to --fleet")
		}
		cfg.FleetCfg = fc
		cfg.Systems = slices.Clone(fleetSystems)
		if *systems != "" {
			cfg.Systems = nil
			for _, s := range strings.Split(*systems, ",") {
				s = strings.TrimSpace(s)
				if !slices.Contains(fleetSystems, s) {
					return nil, "", false, errors.Newf("--systems: unknown system %q with --fleet (known: %s)", s, strings.Join(fleetSystems, ", "))
				}
				cfg.Systems = append(cfg.Systems, s)
			}
		}
		if !slices.Contains(cfg.Systems, sysFleet) && !slices.Contains(cfg.Systems, sysFleetLog) {
			return nil, "", false, errors.Newf("--systems must include %s or %s: every ratio is taken against the fleet", sysFleet, sysFleetLog)
		}
		if cfg.Records < 1 || cfg.Threads < 1 {
			return nil, "", false, errors.New("--records and --threads must be at least 1")
		}
		return cfg, *dir, *asJSON, nil
	}
	if cfg.Quick {
		q := quickSizes
		apply := func(name string, p *int, v int) {
			if !set[name] {
				*p = v
			}
		}
		apply("records", &cfg.Records, q.records)
		apply("warmup", &cfg.Warmup, q.warmup)
		apply("rounds", &cfg.Rounds, q.rounds)
		apply("long-turn", &cfg.LongTurn, q.longTurn)
		apply("rewrite-max", &cfg.RewriteMax, q.rewriteMax)
		apply("replay-turns", &cfg.ReplayTurns, q.replayTurns)
		apply("replay-repeat", &cfg.ReplayRepeat, q.replayRepeat)
		apply("list-threads", &cfg.ListThreads, q.listThreads)
		apply("list-repeat", &cfg.ListRepeat, q.listRepeat)
	}
	for _, w := range strings.Split(*writers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 1 {
			return nil, "", false, errors.Newf("--writers: %q is not a positive number", w)
		}
		cfg.Writers = append(cfg.Writers, n)
	}
	var known []string
	for _, s := range allSystems() {
		known = append(known, s.name)
		if !s.extra {
			cfg.Systems = append(cfg.Systems, s.name)
		}
	}
	if *systems != "" {
		cfg.Systems = nil
		for _, s := range strings.Split(*systems, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(known, s) {
				return nil, "", false, errors.Newf("--systems: unknown system %q (known: %s)", s, strings.Join(known, ", "))
			}
			cfg.Systems = append(cfg.Systems, s)
		}
	}
	if !slices.Contains(cfg.Systems, sysRolloutdb) {
		return nil, "", false, errors.New("--systems must include rolloutdb: every ratio is taken against it")
	}
	if *scenarios != "" {
		for _, s := range strings.Split(*scenarios, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains([]string{"append", "replay", "list", "size"}, s) {
				return nil, "", false, errors.Newf("--scenarios: unknown %q (append, replay, list, size)", s)
			}
			cfg.Scenarios = append(cfg.Scenarios, s)
		}
	}
	for name, v := range map[string]int{"records": cfg.Records, "threads": cfg.Threads, "replay-turns": cfg.ReplayTurns, "list-threads": cfg.ListThreads} {
		if v < 1 {
			return nil, "", false, errors.Newf("--%s must be at least 1", name)
		}
	}
	return cfg, *dir, *asJSON, nil
}

// wants says whether a scenario group (append, replay, list, size) runs.
func (c *config) wants(group string) bool {
	return len(c.Scenarios) == 0 || slices.Contains(c.Scenarios, group)
}

// run is the program: it returns the exit code (0 ok, 1 failed, 2 usage).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, parent, asJSON, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "rolloutbench:", err)
		return 2
	}
	if parent == "" {
		parent = "."
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		fmt.Fprintln(stderr, "rolloutbench:", err)
		return 1
	}
	root, err := os.MkdirTemp(parent, ".rolloutbench-tmp-")
	if err == nil {
		root, err = filepath.Abs(root)
	}
	if err != nil {
		fmt.Fprintln(stderr, "rolloutbench:", err)
		return 1
	}
	cfg.DataDir = root
	if !cfg.Keep {
		defer os.RemoveAll(root)
	}
	e := &env{cfg: cfg, stderr: stderr, root: root,
		logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	rep := report{Machine: describeMachine(root), Config: cfg}
	if !rep.Machine.FsyncMeaningful {
		e.progress("WARNING: %s is on %s: fsync costs nothing there and the append figures mean nothing; use --dir on a real disk", root, rep.Machine.FSType)
	}
	e.progress("rolloutbench: data in %s (%s), %d CPUs, %s", root, rep.Machine.FSType, rep.Machine.CPUs, rep.Machine.GoVersion)
	if cfg.wants("append") && !cfg.Fleet {
		rawDir := filepath.Join(root, "raw")
		n := 2000
		if cfg.Quick {
			n = 640
		}
		if err := os.MkdirAll(rawDir, 0o755); err == nil {
			if rep.Machine.Raw, err = measureRawLimits(rawDir, n); err != nil {
				fmt.Fprintln(stderr, "rolloutbench: raw disk limits:", err)
				return 1
			}
		}
		r := rep.Machine.Raw
		e.progress("raw limits (1 KiB records, durable): append+fdatasync %.0f/s, overwrite pre-zeroed %.0f/s, 64 files %.0f/s, 64 sharing one file %.0f/s",
			r.AppendSync, r.OverwriteSync, r.Files64, r.Shared64)
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(stderr, "rolloutbench:", err)
			return 1
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	start := time.Now()
	if cfg.Fleet {
		rep.Results, err = runFleet(ctx, e)
	} else {
		rep.Results, err = runAll(ctx, e)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rolloutbench: %+v\n", err)
		return 1
	}
	e.progress("done in %s", ms(time.Since(start)))
	computeRatios(rep.Results)
	for i := range rep.Results {
		rep.Results[i].round()
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "rolloutbench:", err)
			return 1
		}
		return 0
	}
	printTable(stdout, &rep)
	return 0
}

// runAll runs every scenario, each system in turn within it.
func runAll(ctx context.Context, e *env) ([]result, error) {
	cfg := e.cfg
	var systems []system
	for _, s := range allSystems() {
		if slices.Contains(cfg.Systems, s.name) {
			systems = append(systems, s)
		}
	}
	var out []result
	if cfg.wants("append") {
		stream := newWorkload(cfg.Seed, 1).itemStream(4096)
		type scen struct {
			name             string
			threads, writers int
		}
		var scens []scen
		for _, n := range cfg.Writers {
			scens = append(scens, scen{fmt.Sprintf("append-1thread-%dwriters", n), 1, n})
		}
		scens = append(scens, scen{fmt.Sprintf("append-%dthreads", cfg.Threads), cfg.Threads, 1})
		for _, sc := range scens {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			e.progress("%s (%d rounds, the systems taking turns)", sc.name, cfg.Rounds)
			rs, err := runAppend(ctx, e, systems, sc.name, sc.threads, sc.writers, stream)
			if err != nil {
				return nil, errors.Wrapf(err, "%s", sc.name)
			}
			out = append(out, rs...)
		}
		e.progress("append-long-turn (%d items into one open turn)", cfg.LongTurn)
		for _, sys := range systems {
			if sys.capped {
				continue // a rewrite per save is quadratic by design: nothing to learn
			}
			r, err := runLongTurn(ctx, e, sys, cfg.LongTurn, stream)
			if err != nil {
				return nil, errors.Wrap(err, "append-long-turn")
			}
			out = append(out, r)
		}
	}
	var sizes []result
	if cfg.wants("replay") || cfg.wants("size") { // sizes are those of the replayed thread
		bt := newWorkload(cfg.Seed, 2).bigThread(cfg.ReplayTurns)
		e.progress("replay (%d turns, %d records)", len(bt.turns), bt.records)
		for _, s := range systems {
			if s.openReplay == nil {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			rs, err := runReplay(ctx, e, s, bt)
			if err != nil {
				return nil, errors.Wrapf(err, "replay")
			}
			if cfg.wants("replay") {
				out = append(out, rs[0])
			}
			if cfg.wants("size") {
				sizes = append(sizes, rs[1:]...)
			}
		}
	}
	if cfg.wants("list") {
		lt := newWorkload(cfg.Seed, 3).listThreads(cfg.ListThreads)
		name := fmt.Sprintf("list-%d", lt.n)
		e.progress("%s", name)
		for _, s := range systems {
			if s.openList == nil {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			r, err := runList(ctx, e, s, name, lt)
			if err != nil {
				return nil, errors.Wrapf(err, "%s", name)
			}
			out = append(out, r)
		}
	}
	// Sizes last in the output, active before archived.
	slices.SortStableFunc(sizes, func(a, b result) int { return strings.Compare(a.Scenario, b.Scenario) })
	return append(out, sizes...), nil
}

// round keeps the figures to what they can mean.
func (r *result) round() {
	to := func(v *float64, places float64) {
		p := math.Pow(10, places)
		*v = math.Round(*v*p) / p
	}
	to(&r.Seconds, 3)
	to(&r.RecordsPerSec, 1)
	to(&r.P50us, 1)
	to(&r.P99us, 1)
	to(&r.BytesPerRecord, 1)
	to(&r.LogBytesPerRecord, 1)
	to(&r.WrittenBytesPerRecord, 1)
	to(&r.Ms, 3)
	to(&r.MBPerSec, 1)
	to(&r.RolloutdbAdvantage, 4)
	to(&r.SettledRecordsPerSec, 1)
	to(&r.FramesPerCommit, 2)
	to(&r.PGCPUusPerRecord, 1)
	to(&r.HostCPUusPerRecord, 1)
}

// computeRatios sets, on every row, how many times better rolloutdb does.
func computeRatios(rs []result) {
	// The fleet scenario's ratios are the fleet's: through the facade, or
	// its Log alone when the facade did not run.
	fleetBase := sysFleetLog
	for _, r := range rs {
		if r.System == sysFleet {
			fleetBase = sysFleet
		}
	}
	isBase := func(r result) bool {
		if strings.HasPrefix(r.Scenario, "fleet-") {
			return r.System == fleetBase
		}
		return r.System == sysRolloutdb
	}
	base := map[string]result{}
	for _, r := range rs {
		if isBase(r) {
			base[r.Scenario] = r
		}
	}
	for i := range rs {
		r := &rs[i]
		b, ok := base[r.Scenario]
		if !ok || isBase(*r) {
			continue
		}
		switch {
		case strings.HasPrefix(r.Scenario, "append-"), strings.HasPrefix(r.Scenario, "fleet-"):
			if r.RecordsPerSec > 0 {
				r.RolloutdbAdvantage = b.RecordsPerSec / r.RecordsPerSec
			}
		case strings.HasPrefix(r.Scenario, "size-"):
			if b.Bytes > 0 {
				r.RolloutdbAdvantage = float64(r.Bytes) / float64(b.Bytes)
			}
		default: // replay, list: time
			if b.Ms > 0 {
				r.RolloutdbAdvantage = r.Ms / b.Ms
			}
		}
	}
}
