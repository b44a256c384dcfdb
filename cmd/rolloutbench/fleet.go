package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/internal/pgtest"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The systems of the --fleet scenario.
const (
	sysFleet    = "rolloutdb-fleet" // the fleet engine, one workspace over host processes
	sysFleetLog = "fleet-log"       // package fleet's Log alone: the fleet without the facade's index
	sysLocal    = "rolloutdb-local" // the local engine (the journal), one process
	sysNaive    = "naive-pg"        // a row per record, each in its own transaction
)

var fleetSystems = []string{sysFleet, sysFleetLog, sysLocal, sysNaive}

// fleetConfig is the --fleet scenario's, printed in --json.
type fleetConfig struct {
	Hosts int `json:"hosts"`
	// OwnCluster says rolloutbench started a throwaway PostgreSQL
	// (internal/pgtest, fsync on) rather than using --dsn.
	OwnCluster bool `json:"own_cluster"`
	// PGCPUs are the CPUs the own cluster is bound to (every backend
	// inherits it); HostCPUs those of the host processes. Empty: unbound.
	PGCPUs   []int `json:"pg_cpus,omitempty"`
	HostCPUs []int `json:"host_cpus,omitempty"`
	// Workspace is the fleet workspace's name, NaiveTable the naive
	// writer's table, in the database (left there with --dsn).
	Workspace  string `json:"workspace"`
	NaiveTable string `json:"naive_table"`
	// RecordBytes is the mean body size of a record appended.
	RecordBytes int    `json:"record_bytes"`
	DSN         string `json:"-"`
	// RoundWindow is the fleet hosts' FleetOptions.RoundWindow (0: the
	// default).
	RoundWindow time.Duration `json:"round_window,omitempty"`
	// Statements is how many of pg_stat_statements' to print at the end
	// (own cluster only).
	Statements int `json:"-"`
}

// fleetItems are the --fleet scenario's records: agent messages of 1,000
// bytes of text (a 1 KiB record with its envelope), drawn from the seed.
func fleetItems(seed uint64) []rollout.Item {
	w := newWorkload(seed, 4)
	out := make([]rollout.Item, 256)
	for i := range out {
		var b strings.Builder
		for b.Len() < 1000 {
			b.WriteString(w.sentence(w.between(8, 40)))
			b.WriteString(". ")
		}
		out[i] = rollout.Item{Type: rollout.ItemAgentMessage, Status: rollout.ItemCompleted, Text: b.String()[:1000]}
	}
	return out
}

// hostProc is a running host process (hostMain).
type hostProc struct {
	name   string
	cmd    *exec.Cmd
	in     *json.Encoder
	stdout *os.File
	out    *json.Decoder
	done   chan error
}

// ask sends a command and waits for the answer.
func (p *hostProc) ask(cmd any) (hostReply, error) {
	if err := p.in.Encode(cmd); err != nil {
		return hostReply{}, errors.Wrapf(err, "%s: send", p.name)
	}
	return p.reply()
}

func (p *hostProc) reply() (hostReply, error) {
	var r hostReply
	if err := p.out.Decode(&r); err != nil {
		return r, errors.Wrapf(err, "%s: no answer (see its stderr above)", p.name)
	}
	if r.Err != "" {
		return r, errors.Newf("%s: %s", p.name, r.Err)
	}
	return r, nil
}

// lockedWriter serialises the host processes' stderr into one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// startHost starts this program as a host process bound to cpus, hands
// it the spec and waits until it is ready (its threads made).
func startHost(ctx context.Context, e *env, spec hostSpec, cpus []int, stderr io.Writer) (*hostProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, errors.Wrap(err, "find this program")
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), hostEnv+"=1")
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// A pipe of this function's own, not StdoutPipe: Wait, which runs as
	// soon as the process exits, would close that one under a reply not
	// read yet (the answer to close, sent just before the process exits).
	stdout, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = w
	p := &hostProc{name: spec.System + " " + spec.HostName, cmd: cmd, in: json.NewEncoder(stdin), stdout: stdout,
		out: json.NewDecoder(bufio.NewReaderSize(stdout, 1<<20)), done: make(chan error, 1)}
	err = startPinned(cmd, cpus, p.done)
	w.Close() // the child has it
	if err != nil {
		stdout.Close()
		return nil, errors.Wrapf(err, "%s: start", p.name)
	}
	if err := p.in.Encode(spec); err != nil {
		return nil, errors.CombineErrors(errors.Wrapf(err, "%s: spec", p.name), p.kill())
	}
	if _, err := p.reply(); err != nil {
		return nil, errors.CombineErrors(err, p.kill())
	}
	return p, nil
}

// kill ends a host process that is not answering.
func (p *hostProc) kill() error {
	_ = p.cmd.Process.Kill()
	<-p.done
	return p.stdout.Close()
}

// fleetRun is one system's side of the --fleet scenario across rounds.
type fleetRun struct {
	sys                     string
	procs                   []*hostProc
	threads                 [][]int // each process's threads
	lat                     []time.Duration
	elapsed, settled, pgCPU time.Duration
	hostCPU                 time.Duration
	commits, frames, stalls int64
	acked                   []int64 // per thread, the warm-up included
	paths                   []string
	warm                    int
}

// round runs one round on every process of the system at once.
func (r *fleetRun) round(cmd hostCmd, timed bool, pgCPU func() time.Duration) error {
	reps := make([]hostReply, len(r.procs))
	errs := make([]error, len(r.procs))
	cpu0 := pgCPU()
	var wg sync.WaitGroup
	for i, p := range r.procs {
		wg.Go(func() { reps[i], errs[i] = p.ask(cmd) })
	}
	wg.Wait()
	cpu1 := pgCPU()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if !timed {
		return nil
	}
	start, end, settled := reps[0].Start, reps[0].End, reps[0].Settled
	for _, rep := range reps {
		start, end, settled = min(start, rep.Start), max(end, rep.End), max(settled, rep.Settled)
		for _, l := range rep.Lat {
			r.lat = append(r.lat, time.Duration(l))
		}
		r.commits += rep.Commits
		r.frames += rep.Frames
		r.stalls += rep.Stalls
		r.hostCPU += time.Duration(rep.CPU)
	}
	r.elapsed += time.Duration(end - start)
	r.settled += time.Duration(settled - start)
	r.pgCPU += cpu1 - cpu0
	return nil
}

// close closes every process of the system and collects what each thread
// was acknowledged.
func (r *fleetRun) close(threads int) error {
	r.acked = make([]int64, threads)
	var err error
	for i, p := range r.procs {
		rep, e := p.ask(hostCmd{Op: "close"})
		if e == nil {
			e = errors.CombineErrors(<-p.done, p.stdout.Close())
		} else {
			e = errors.CombineErrors(e, p.kill())
		}
		err = errors.CombineErrors(err, e)
		for k, t := range r.threads[i] {
			if k < len(rep.Acked) {
				r.acked[t] = rep.Acked[k]
			}
		}
		r.paths = append(r.paths, rep.Paths...)
	}
	r.procs = nil
	return err
}

// runFleet is the --fleet scenario: cfg.Threads threads appended at once,
// each record acknowledged before the thread's next, over Hosts host
// processes of one fleet workspace; the same workload on the local engine
// in one process, and on the naive writer over Hosts processes. The
// systems take turns, a round each, as runAppend's do.
func runFleet(ctx context.Context, e *env) (out []result, err error) {
	cfg, fc := e.cfg, e.cfg.FleetCfg
	dsn := fc.DSN
	pgCPU := func() time.Duration { return 0 }
	if dsn == "" {
		po := pgtest.Options{CPUs: fc.PGCPUs, MaxConnections: 100 + cfg.Threads*2 + fc.Hosts*16}
		if fc.Statements > 0 {
			po.Settings = map[string]string{"shared_preload_libraries": "pg_stat_statements"}
		}
		c, err := pgtest.Start(ctx, po)
		if err != nil {
			return nil, err
		}
		defer func() { err = errors.CombineErrors(err, c.Stop()) }()
		if dsn, err = c.CreateDatabase(ctx, "rolloutbench"); err != nil {
			return nil, err
		}
		if fc.Statements > 0 {
			defer printStatements(dsn, fc.Statements, e.stderr)
		}
		e.progress("PostgreSQL %s (fsync on) on CPUs %s, hosts on %s", c.Addr(), cpuList(fc.PGCPUs), cpuList(fc.HostCPUs))
		pgCPU = func() time.Duration { return serverCPU(c.DataDir()) }
	}
	// Two runs on one --dsn never share a workspace or a table.
	stamp := fmt.Sprintf("%s_%d", time.Now().UTC().Format("20060102t150405"), os.Getpid())
	fc.Workspace, fc.NaiveTable = "rolloutbench-"+stamp, "rolloutbench_naive_"+stamp
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, errors.Wrap(err, "--dsn")
	}
	q := u.Query()
	q.Set("workspace", fc.Workspace)
	u.RawQuery = q.Encode()
	fleetDSN := u.String()
	q.Set("workspace", fc.Workspace+"-log")
	u.RawQuery = q.Encode()
	logDSN := u.String()
	if err := naiveTable(ctx, dsn, fc.NaiveTable); err != nil {
		return nil, err
	}
	items := fleetItems(cfg.Seed)
	var body int
	for _, it := range items {
		rec, err := rollout.NewRecord(rollout.KindItemAppended, "turn-0", it)
		if err != nil {
			return nil, err
		}
		body += len(rec.Body)
	}
	fc.RecordBytes = body / len(items)

	stderr := &lockedWriter{w: e.stderr}
	var runs []*fleetRun
	defer func() {
		for _, r := range runs {
			for _, p := range r.procs {
				_ = p.kill()
			}
		}
	}()
	localDir := filepath.Join(e.root, "fleet-local")
	for _, sys := range cfg.Systems {
		r := &fleetRun{sys: sys}
		runs = append(runs, r)
		procs := fc.Hosts
		if sys == sysLocal {
			procs = 1 // a local workspace's threads are one process's
		}
		specs := make([]hostSpec, procs)
		for h := range procs {
			var ts []int
			for t := h * cfg.Threads / procs; t < (h+1)*cfg.Threads/procs; t++ {
				ts = append(ts, t)
			}
			r.threads = append(r.threads, ts)
			specs[h] = hostSpec{System: sys, HostName: fmt.Sprintf("host-%d", h), Threads: ts, Seed: cfg.Seed, MaxProjectionLag: cfg.MaxProjectionLag, RoundWindow: fc.RoundWindow}
			if cfg.CPUProfile != "" {
				specs[h].CPUProfile = fmt.Sprintf("%s.%s.%s", cfg.CPUProfile, sys, specs[h].HostName)
			}
			switch sys {
			case sysFleet:
				specs[h].DSN = fleetDSN
			case sysFleetLog:
				specs[h].DSN = logDSN
			case sysLocal:
				specs[h].Dir = localDir
			case sysNaive:
				specs[h].DSN, specs[h].Table = dsn, fc.NaiveTable
			}
		}
		// The hosts start side by side: each makes its threads.
		r.procs = make([]*hostProc, procs)
		errs := make([]error, procs)
		var wg sync.WaitGroup
		for h := range procs {
			wg.Go(func() { r.procs[h], errs[h] = startHost(ctx, e, specs[h], fc.HostCPUs, stderr) })
		}
		wg.Wait()
		r.procs = slices.DeleteFunc(r.procs, func(p *hostProc) bool { return p == nil })
		if err := errors.Join(errs...); err != nil {
			return nil, errors.Wrapf(err, "%s: start", sys)
		}
		r.warm = max(1, cfg.Warmup/cfg.Threads)
		if err := r.round(hostCmd{Op: "round", Records: r.warm, Phase: "w"}, false, pgCPU); err != nil {
			return nil, errors.Wrapf(err, "%s: warm-up", sys)
		}
	}
	rounds := max(1, cfg.Rounds)
	per := max(1, cfg.Records/cfg.Threads) // records per thread, all rounds
	done := 0
	for round := range rounds {
		n := (per - done) / (rounds - round)
		done += n
		if n == 0 {
			continue
		}
		for k := range runs {
			r := runs[(k+round)%len(runs)]
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if err := r.round(hostCmd{Op: "round", Records: n, Phase: "m"}, true, pgCPU); err != nil {
				return nil, errors.Wrapf(err, "%s: round %d", r.sys, round)
			}
		}
	}
	for _, r := range runs {
		if err := r.close(cfg.Threads); err != nil {
			return nil, errors.Wrapf(err, "%s: close", r.sys)
		}
	}
	scenario := fmt.Sprintf("fleet-%dthreads-%dhosts", cfg.Threads, fc.Hosts)
	for _, r := range runs {
		wsDSN := fleetDSN
		if r.sys == sysFleetLog {
			wsDSN = logDSN
		}
		counts, err := countFleetRun(ctx, r, wsDSN, dsn, fc.NaiveTable, cfg.Threads)
		if err != nil {
			return nil, errors.Wrapf(err, "%s: read back", r.sys)
		}
		var found, warm int64
		for t, n := range counts {
			if n != r.acked[t] {
				return nil, errors.Newf("%s: thread %d holds %d records, %d were acknowledged", r.sys, t, n, r.acked[t])
			}
			found += n
			warm += int64(r.warm)
		}
		slices.Sort(r.lat)
		n := int64(len(r.lat))
		res := result{
			System: r.sys, Scenario: scenario, Threads: cfg.Threads, Hosts: len(r.threads),
			Records: n, WarmupRecords: warm, Seconds: r.elapsed.Seconds(),
			RecordsPerSec: float64(n) / r.elapsed.Seconds(), SettledRecordsPerSec: float64(n) / r.settled.Seconds(),
			P50us: us(percentile(r.lat, 50)), P99us: us(percentile(r.lat, 99)),
			VerifiedRecords: found, Rounds: rounds, IndexStalls: r.stalls,
		}
		if r.commits > 0 {
			res.FramesPerCommit = float64(r.frames) / float64(r.commits)
		}
		res.HostCPUusPerRecord = us(r.hostCPU) / float64(n)
		if r.pgCPU > 0 {
			res.PGCPUusPerRecord = us(r.pgCPU) / float64(n)
		}
		e.progress("  %-16s %8d records %9.0f records/s (settled %7.0f)  p50 %7.0fµs  p99 %7.0fµs  %5.1f frames/commit  CPU/record: PostgreSQL %5.1f µs, hosts %5.1f µs",
			r.sys, n, res.RecordsPerSec, res.SettledRecordsPerSec, res.P50us, res.P99us, res.FramesPerCommit, res.PGCPUusPerRecord, res.HostCPUusPerRecord)
		out = append(out, res)
	}
	return out, nil
}

// naiveTable makes the naive writer's table.
func naiveTable(ctx context.Context, dsn, table string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `CREATE TABLE `+pgx.Identifier{table}.Sanitize()+` (thread int, seq bigint, body bytea, PRIMARY KEY (thread, seq))`)
	return errors.CombineErrors(err, conn.Close(ctx))
}

// countFleetRun reads back, with code of its own, the records each thread
// of a system holds: the fleet's threads through package fleet (as a
// rollout's bytes), the local rollouts from disk, the naive writer's rows.
func countFleetRun(ctx context.Context, r *fleetRun, fleetDSN, dsn, table string, threads int) ([]int64, error) {
	out := make([]int64, threads)
	switch r.sys {
	case sysFleet, sysFleetLog:
		l, err := fleet.Open(ctx, fleetDSN, fleet.Options{Host: "rolloutbench-read-back"})
		if err != nil {
			return nil, err
		}
		defer l.Close()
		for t := range threads {
			s, err := l.Read(ctx, threadID(t))
			if err != nil {
				return nil, err
			}
			n, err := countItems(s, s.Size(), l.Path(threadID(t)))
			s.Close()
			if err != nil {
				return nil, err
			}
			out[t] = int64(n)
		}
	case sysLocal:
		for _, p := range r.paths {
			t, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "thread-"), rollout.RolloutExt))
			if err != nil || t < 0 || t >= threads {
				return nil, errors.Newf("%s: not one of the run's threads", p)
			}
			n, err := countRolloutItems(p)
			if err != nil {
				return nil, err
			}
			out[t] = int64(n)
		}
	case sysNaive:
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return nil, err
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, `SELECT thread, count(*) FROM `+pgx.Identifier{table}.Sanitize()+` GROUP BY thread`)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var t int
			var n int64
			if err := rows.Scan(&t, &n); err != nil {
				return nil, err
			}
			if t < 0 || t >= threads {
				return nil, errors.Newf("row of thread %d: not one of the run's", t)
			}
			out[t] = n
		}
		return out, rows.Err()
	}
	return out, nil
}

// countItems counts the item_appended records of a rollout's bytes; any
// damage is an error.
func countItems(src io.ReaderAt, size int64, path string) (int, error) {
	r, err := rollout.NewReader(src, size, rollout.ReaderOptions{Path: path})
	if err != nil {
		return 0, err
	}
	n := 0
	for r.Next() {
		if r.Record().Kind == rollout.KindItemAppended {
			n++
		}
	}
	if err := r.Err(); err != nil {
		return n, err
	}
	if len(r.Damage()) > 0 || r.TornTail() != nil {
		return n, errors.Newf("%s: damaged (%d regions, torn tail %v)", path, len(r.Damage()), r.TornTail() != nil)
	}
	return n, nil
}

// serverCPU is the CPU time (user and system) the server of a data
// directory has used so far: its postmaster's and every child's now
// running, from /proc (0 where that cannot be read). A backend that
// exited takes its time with it; the hosts' connections live the whole
// run.
func serverCPU(dataDir string) time.Duration {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15); comm may hold
		// spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(s)))
		if len(f) < 13 || (pid != pm && f[1] != strconv.Itoa(pm)) {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + st
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every
// Linux this runs on.
const clockTicks = 100

// cpuList prints CPUs as taskset -c takes them ("all" for none).
func cpuList(cpus []int) string {
	if len(cpus) == 0 {
		return "all"
	}
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// parseCPUs reads a CPU list: "0", "1,3", "1-3"; "" or "all" is none.
func parseCPUs(s string) ([]int, error) {
	if s == "" || s == "all" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if isRange && err == nil {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a {
			return nil, errors.Newf("%q is not a CPU list (as taskset -c takes: 0,2-3)", s)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}

// printStatements prints the n statements that took the server longest
// (pg_stat_statements, loaded by --pg-statements), to find where its time
// goes.
func printStatements(dsn string, n int, w io.Writer) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		fmt.Fprintln(w, "rolloutbench: --pg-statements:", err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		fmt.Fprintln(w, "rolloutbench: --pg-statements:", err)
		return
	}
	rows, err := conn.Query(ctx, `SELECT calls, total_exec_time, rows, left(regexp_replace(query, '\s+', ' ', 'g'), 150)
		FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT $1`, n)
	if err != nil {
		fmt.Fprintln(w, "rolloutbench: --pg-statements:", err)
		return
	}
	defer rows.Close()
	fmt.Fprintf(w, "PostgreSQL's statements, longest first (all systems of the run):\n%8s %10s %9s %9s  %s\n", "calls", "total ms", "µs/call", "rows", "statement")
	for rows.Next() {
		var calls, nrows int64
		var total float64
		var q string
		if err := rows.Scan(&calls, &total, &nrows, &q); err != nil {
			fmt.Fprintln(w, "rolloutbench: --pg-statements:", err)
			return
		}
		fmt.Fprintf(w, "%8d %10.1f %9.1f %9d  %s\n", calls, total, total*1000/float64(max(calls, 1)), nrows, q)
	}
}
