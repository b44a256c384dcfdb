package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// hostEnv, set in a process's environment, makes rolloutbench a host
// process of the --fleet scenario instead of the benchmark (hostMain).
const hostEnv = "ROLLOUTBENCH_HOST"

// hostSpec is what a host process is told first, on its first line of
// standard input: which system it runs and which threads it appends to.
type hostSpec struct {
	System string `json:"system"`
	// DSN is the fleet workspace's (sysFleet) or the database's (sysNaive).
	DSN string `json:"dsn,omitempty"`
	// Dir is the local workspace (sysLocal).
	Dir      string `json:"dir,omitempty"`
	HostName string `json:"host_name,omitempty"`
	// Table is the naive writer's table.
	Table string `json:"table,omitempty"`
	// Threads are the indices of the run's threads this process appends
	// to, one goroutine each.
	Threads          []int  `json:"threads"`
	Seed             uint64 `json:"seed"`
	MaxProjectionLag int    `json:"max_projection_lag,omitempty"`
	// RoundWindow is the fleet's FleetOptions.RoundWindow (0: its
	// default).
	RoundWindow time.Duration `json:"round_window,omitempty"`
	// CPUProfile, if set, is where the process writes its CPU profile.
	CPUProfile string `json:"cpu_profile,omitempty"`
}

// hostCmd is one line of standard input after the spec: a round of
// Records appends to each thread, or close.
type hostCmd struct {
	Op      string `json:"op"` // "round" or "close"
	Records int    `json:"records,omitempty"`
	Phase   string `json:"phase,omitempty"` // item ids' prefix: "w" warm-up, "m" measured
}

// hostReply is one line of standard output: ready (after the spec), a
// round's figures, or, after close, what each thread holds.
type hostReply struct {
	Err   string `json:"err,omitempty"`
	Ready bool   `json:"ready,omitempty"`
	// Start and End bound the round's appends (Unix ns); Settled is when
	// the work after acknowledging (the index) was done.
	Start   int64   `json:"start,omitempty"`
	End     int64   `json:"end,omitempty"`
	Settled int64   `json:"settled,omitempty"`
	Lat     []int64 `json:"lat,omitempty"` // each append's latency, ns
	// Commits and Frames are the round's commit rounds (fleet) or journal
	// commits (local) and the frames they made durable; Stalls the appends
	// that waited for the index (MaxProjectionLag).
	Commits int64 `json:"commits,omitempty"`
	Frames  int64 `json:"frames,omitempty"`
	Stalls  int64 `json:"stalls,omitempty"`
	// CPU is the process's CPU time (user and system, ns) over the round,
	// its settling included.
	CPU int64 `json:"cpu,omitempty"`
	// Acked is, after close, the records acknowledged per thread (in the
	// order of hostSpec.Threads); Paths the local rollouts.
	Acked []int64  `json:"acked,omitempty"`
	Paths []string `json:"paths,omitempty"`
}

// hostStore is one host process's side of the --fleet scenario.
type hostStore interface {
	// Append appends one record to the i-th of the process's threads and
	// returns once it is acknowledged.
	Append(ctx context.Context, i int, it rollout.Item) error
	Settle(ctx context.Context) error
	// Counters are the commits, frames and index stalls so far.
	Counters() (commits, frames, stalls int64)
	Close() error
	Paths() []string
}

// hostMain is a host process: it reads a spec and commands from stdin and
// answers each on stdout, until close or the end of stdin (its
// coordinator gone).
func hostMain(stdin io.Reader, stdout, stderr io.Writer) int {
	ctx := context.Background()
	in := bufio.NewScanner(stdin)
	out := json.NewEncoder(stdout)
	fail := func(err error) int {
		_ = out.Encode(hostReply{Err: fmt.Sprintf("%+v", err)})
		return 1
	}
	if !in.Scan() {
		return fail(errors.New("rolloutbench host: no spec on stdin"))
	}
	var spec hostSpec
	if err := json.Unmarshal(in.Bytes(), &spec); err != nil {
		return fail(errors.Wrap(err, "rolloutbench host: spec"))
	}
	if spec.CPUProfile != "" {
		f, err := os.Create(spec.CPUProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			return fail(errors.Wrap(err, "rolloutbench host: --cpuprofile"))
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := openHostStore(ctx, spec, logger)
	if err != nil {
		return fail(errors.Wrapf(err, "rolloutbench host %s (%s)", spec.HostName, spec.System))
	}
	acked := make([]int64, len(spec.Threads))
	next := make([]int, len(spec.Threads))
	stream := fleetItems(spec.Seed)
	if err := out.Encode(hostReply{Ready: true}); err != nil {
		return 1
	}
	for in.Scan() {
		var cmd hostCmd
		if err := json.Unmarshal(in.Bytes(), &cmd); err != nil {
			return fail(errors.CombineErrors(errors.Wrap(err, "rolloutbench host: command"), st.Close()))
		}
		if cmd.Op == "close" {
			err := st.Close()
			if err != nil {
				return fail(err)
			}
			if err := out.Encode(hostReply{Acked: acked, Paths: st.Paths()}); err != nil {
				return 1
			}
			return 0
		}
		rep, err := hostRound(ctx, st, spec, cmd, stream, next, acked)
		if err != nil {
			return fail(errors.CombineErrors(err, st.Close()))
		}
		if err := out.Encode(rep); err != nil {
			_ = st.Close()
			return 1
		}
	}
	// The coordinator is gone: what was acknowledged stays.
	_ = st.Close()
	return 1
}

// hostRound appends cmd.Records records to each of the process's threads,
// a goroutine a thread, each record acknowledged before the next, then
// settles.
func hostRound(ctx context.Context, st hostStore, spec hostSpec, cmd hostCmd, stream []rollout.Item, next []int, acked []int64) (hostReply, error) {
	c0, f0, s0 := st.Counters()
	cpu0 := processCPU()
	lat := make([][]int64, len(spec.Threads))
	errs := make([]error, len(spec.Threads))
	var wg sync.WaitGroup
	start := time.Now()
	for i, t := range spec.Threads {
		lat[i] = make([]int64, 0, cmd.Records)
		wg.Go(func() {
			for range cmd.Records {
				k := next[i]
				it := stream[(t*7919+k)%len(stream)]
				it.ID = fmt.Sprintf("%s-%d-%d", cmd.Phase, t, k)
				t0 := time.Now()
				if err := st.Append(ctx, i, it); err != nil {
					errs[i] = errors.Wrapf(err, "thread %d, record %d", t, k)
					return
				}
				lat[i] = append(lat[i], int64(time.Since(t0)))
				next[i]++
				acked[i]++
			}
		})
	}
	wg.Wait()
	end := time.Now()
	if err := errors.Join(errs...); err != nil {
		return hostReply{}, err
	}
	if err := st.Settle(ctx); err != nil {
		return hostReply{}, err
	}
	settled := time.Now()
	c1, f1, s1 := st.Counters()
	rep := hostReply{Start: start.UnixNano(), End: end.UnixNano(), Settled: settled.UnixNano(),
		Commits: c1 - c0, Frames: f1 - f0, Stalls: s1 - s0, CPU: int64(processCPU() - cpu0)}
	for _, l := range lat {
		rep.Lat = append(rep.Lat, l...)
	}
	return rep, nil
}

func openHostStore(ctx context.Context, spec hostSpec, logger *slog.Logger) (hostStore, error) {
	switch spec.System {
	case sysFleet, sysLocal:
		where := spec.DSN
		opts := rolloutdb.Options{Sync: rollout.SyncAlways, Logger: logger, MaxProjectionLag: spec.MaxProjectionLag}
		if spec.System == sysLocal {
			where = spec.Dir
		} else {
			opts.Fleet = rolloutdb.FleetOptions{HostName: spec.HostName, RoundWindow: spec.RoundWindow}
		}
		db, err := rolloutdb.Open(ctx, where, opts)
		if err != nil {
			return nil, err
		}
		s := &facadeHost{db: db, threads: make([]*rolloutdb.Thread, len(spec.Threads)), turns: make([]*rolloutdb.Turn, len(spec.Threads))}
		err = parallel(len(spec.Threads), func(i int) error {
			th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: threadID(spec.Threads[i])})
			if err != nil {
				return err
			}
			tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{ID: "turn-0", Model: "model-1"})
			if err != nil {
				return errors.CombineErrors(err, th.Close())
			}
			s.threads[i], s.turns[i] = th, tu
			return nil
		})
		if err != nil {
			return nil, errors.CombineErrors(err, s.Close())
		}
		return s, nil
	case sysFleetLog:
		l, err := fleet.Open(ctx, spec.DSN, fleet.Options{Host: spec.HostName, Logger: logger, RoundWindow: spec.RoundWindow})
		if err != nil {
			return nil, err
		}
		s := &logHost{l: l, threads: make([]*fleet.Thread, len(spec.Threads))}
		err = parallel(len(spec.Threads), func(i int) error {
			th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: threadID(spec.Threads[i]), WorkspaceID: l.WorkspaceID()})
			s.threads[i] = th
			return err
		})
		if err != nil {
			return nil, errors.CombineErrors(err, s.Close())
		}
		return s, nil
	case sysNaive:
		s := &naiveHost{table: spec.Table, threads: spec.Threads, seq: make([]int64, len(spec.Threads))}
		for range spec.Threads {
			c, err := pgx.Connect(ctx, spec.DSN)
			if err != nil {
				return nil, errors.CombineErrors(err, s.Close())
			}
			s.conns = append(s.conns, c)
		}
		return s, nil
	}
	return nil, errors.Newf("unknown system %q", spec.System)
}

// facadeHost appends through the facade, fleet or local: one open turn
// per thread, one record (Turn.Add) per append, as rolloutdb's append
// scenarios do.
type facadeHost struct {
	db      *rolloutdb.DB
	threads []*rolloutdb.Thread
	turns   []*rolloutdb.Turn
}

func (s *facadeHost) Append(ctx context.Context, i int, it rollout.Item) error {
	_, err := s.turns[i].Add(ctx, it)
	return err
}

func (s *facadeHost) Settle(ctx context.Context) error { return s.db.Settle(ctx) }

func (s *facadeHost) Counters() (commits, frames, stalls int64) {
	m := s.db.Metrics()
	return m.Journal.Commits, m.Journal.Entries, int64(m.Projection.Stalls)
}

func (s *facadeHost) Paths() []string {
	var out []string
	for _, th := range s.threads {
		if th != nil {
			out = append(out, th.Path())
		}
	}
	return out
}

func (s *facadeHost) Close() error {
	ctx := context.Background()
	err := parallel(len(s.threads), func(i int) error {
		if s.threads[i] == nil {
			return nil
		}
		_, err := s.turns[i].Commit(ctx, rolloutdb.Commit{})
		return errors.CombineErrors(err, s.threads[i].Close())
	})
	return errors.CombineErrors(err, s.db.Close())
}

// logHost appends to package fleet's Log alone, as the facade's fleet
// engine does under it, without the facade: no index (pgindex) in
// PostgreSQL beside the frames. It separates the log's cost from the
// facade's, as rollout-writer does for a local workspace.
type logHost struct {
	l       *fleet.Log
	threads []*fleet.Thread
}

func (s *logHost) Append(ctx context.Context, i int, it rollout.Item) error {
	rec, err := rollout.NewRecord(rollout.KindItemAppended, "turn-0", it)
	if err != nil {
		return err
	}
	_, err = s.threads[i].Append(ctx, []rollout.Record{rec}, rollout.AppendOptions{})
	return err
}

func (s *logHost) Settle(context.Context) error { return nil }

func (s *logHost) Counters() (commits, frames, stalls int64) {
	m := s.l.Metrics()
	return m.Rounds, m.Frames, 0
}

func (s *logHost) Paths() []string { return nil }

func (s *logHost) Close() error {
	var err error
	for _, th := range s.threads {
		if th != nil {
			err = errors.CombineErrors(err, th.Close())
		}
	}
	return errors.CombineErrors(err, s.l.Close())
}

// naiveHost is the naive writer: each record one row, inserted in its own
// transaction (autocommit) on the thread's own connection.
type naiveHost struct {
	table   string
	threads []int
	conns   []*pgx.Conn
	seq     []int64
}

func (s *naiveHost) Append(ctx context.Context, i int, it rollout.Item) error {
	rec, err := rollout.NewRecord(rollout.KindItemAppended, "turn-0", it)
	if err != nil {
		return err
	}
	s.seq[i]++
	_, err = s.conns[i].Exec(ctx, `INSERT INTO `+pgx.Identifier{s.table}.Sanitize()+` (thread, seq, body) VALUES ($1, $2, $3)`, s.threads[i], s.seq[i], rec.Body)
	return err
}

func (s *naiveHost) Settle(context.Context) error { return nil }

func (s *naiveHost) Counters() (commits, frames, stalls int64) { return 0, 0, 0 }

func (s *naiveHost) Paths() []string { return nil }

func (s *naiveHost) Close() error {
	var err error
	for _, c := range s.conns {
		err = errors.CombineErrors(err, c.Close(context.Background()))
	}
	return err
}

// isHost reports whether this process was started as a host process.
func isHost() bool { return os.Getenv(hostEnv) != "" }

// processCPU is this process's CPU time so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
