package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// fixtureTime anchors the times of generated threads, so that every system
// sorts them alike.
var fixtureTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// env is what every scenario needs.
type env struct {
	cfg    *config
	logger *slog.Logger
	stderr io.Writer
	root   string // data directory of the run
}

func (e *env) progress(format string, args ...any) {
	fmt.Fprintf(e.stderr, format+"\n", args...)
}

// result is one system's figures in one scenario. Fields that do not apply
// are left out.
type result struct {
	System   string `json:"system"`
	Scenario string `json:"scenario"`
	Threads  int    `json:"threads,omitempty"`
	Writers  int    `json:"writers,omitempty"`
	// Records measured (the warm-up not included); for replay and sizes,
	// the records of the thread.
	Records       int64   `json:"records,omitempty"`
	WarmupRecords int64   `json:"warmup_records,omitempty"`
	Seconds       float64 `json:"seconds,omitempty"`
	RecordsPerSec float64 `json:"records_per_sec,omitempty"`
	P50us         float64 `json:"p50_us,omitempty"`
	P99us         float64 `json:"p99_us,omitempty"`
	// BytesPerRecord is the on-disk growth (or size) per record, everything
	// the system keeps; LogBytesPerRecord is the rollout alone (rolloutdb).
	BytesPerRecord        float64 `json:"bytes_per_record,omitempty"`
	LogBytesPerRecord     float64 `json:"log_bytes_per_record,omitempty"`
	WrittenBytesPerRecord float64 `json:"written_bytes_per_record,omitempty"`
	// Ms is, for replay, the median time of one full replay; for list, the
	// p50 of one page; for size-archived, the time archiving took.
	Ms       float64 `json:"ms,omitempty"`
	MBPerSec float64 `json:"mb_per_sec,omitempty"`
	// Bytes is, in size scenarios, the size of the thread's file;
	// TotalBytes adds state.db (rolloutdb).
	Bytes      int64 `json:"bytes,omitempty"`
	TotalBytes int64 `json:"total_bytes,omitempty"`
	// VerifiedRecords counts items read back from disk after an append
	// scenario (the warm-up included). Turns counts turns a replay
	// returned.
	VerifiedRecords int64 `json:"verified_records,omitempty"`
	Turns           int   `json:"turns,omitempty"`
	// RolloutdbAdvantage is how many times better rolloutdb does (records/s
	// over theirs, their time or size over its). Below 1, rolloutdb loses.
	RolloutdbAdvantage float64 `json:"rolloutdb_advantage,omitempty"`
	Capped             bool    `json:"capped,omitempty"`
	// Rounds is how many rounds the append scenario ran in, the systems
	// taking turns (see runAppend).
	Rounds int `json:"rounds,omitempty"`
	// FirstRecordsPerSec and LastRecordsPerSec (append-long-turn): the
	// rates over the first and the last block of the turn.
	FirstRecordsPerSec float64 `json:"first_records_per_sec,omitempty"`
	LastRecordsPerSec  float64 `json:"last_records_per_sec,omitempty"`
	Note               string  `json:"note,omitempty"`
	// Fleet scenario: Hosts is the system's host processes;
	// SettledRecordsPerSec the rate with the time until its index had
	// caught up (the facade's) counted; FramesPerCommit the frames each
	// commit round (fleet) or journal commit (local) made durable;
	// PGCPUusPerRecord the CPU the PostgreSQL server used per record
	// (rolloutbench's own cluster only), HostCPUusPerRecord the host
	// processes' (their settling included); IndexStalls the appends that
	// waited for the index (MaxProjectionLag).
	Hosts                int     `json:"hosts,omitempty"`
	SettledRecordsPerSec float64 `json:"settled_records_per_sec,omitempty"`
	FramesPerCommit      float64 `json:"frames_per_commit,omitempty"`
	PGCPUusPerRecord     float64 `json:"pg_cpu_us_per_record,omitempty"`
	HostCPUusPerRecord   float64 `json:"host_cpu_us_per_record,omitempty"`
	IndexStalls          int64   `json:"index_stalls,omitempty"`
}

func ms(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0fms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// scenarioDir makes a fresh directory for one system in one scenario.
func (e *env) scenarioDir(scenario, system string) (string, error) {
	dir := filepath.Join(e.root, scenario, system)
	return dir, os.MkdirAll(dir, 0o755)
}

// done removes a scenario's data unless it is kept.
func (e *env) done(dir string) {
	if !e.cfg.Keep {
		_ = os.RemoveAll(dir)
	}
}

// appendRun is one system's side of an append scenario across rounds.
type appendRun struct {
	sys         system
	dir         string
	store       appendStore
	expect      []atomic.Int64
	next        []int // per thread, the next item number (continues across rounds)
	budget      []int // per thread, records it may still append (rewrite is capped)
	lat         []time.Duration
	elapsed     time.Duration
	written     int64
	ioOK        bool
	size0, log0 int64
	warm        int
	capped      bool
	closed      bool
}

// runAppend measures durable appends of every system in one scenario:
// `threads` threads, and on one thread `writers` concurrent appenders
// (with several threads, one appender each). The systems take turns, a
// round each, the order rotating from round to round, so that a disk
// whose speed drifts during the run (a shared virtual disk's does, by 2x)
// weighs on each alike; each system's figure sums its rounds.
func runAppend(ctx context.Context, e *env, systems []system, scenario string, threads, writers int, stream []rollout.Item) (out []result, err error) {
	cfg := e.cfg
	rounds := max(1, cfg.Rounds)
	runs := make([]*appendRun, len(systems))
	defer func() {
		for _, r := range runs {
			if r != nil && !r.closed {
				err = errors.CombineErrors(err, r.store.Close())
			}
			if r != nil {
				e.done(r.dir)
			}
		}
	}()
	per := (cfg.Records + threads - 1) / threads // records per thread, all rounds
	if threads == 1 {
		per = cfg.Records
	}
	item := func(phase string, t, k int) rollout.Item {
		it := stream[(t*7919+k)%len(stream)]
		it.ID = fmt.Sprintf("%s-%d-%d", phase, t, k)
		return it
	}
	for i, sys := range systems {
		dir, err := e.scenarioDir(scenario, sys.name)
		if err != nil {
			return nil, err
		}
		store, err := sys.openAppend(ctx, e, dir, threads)
		if err != nil {
			return nil, errors.Wrapf(err, "%s: open", sys.name)
		}
		r := &appendRun{sys: sys, dir: dir, store: store, expect: make([]atomic.Int64, threads), next: make([]int, threads), budget: make([]int, threads)}
		runs[i] = r
		r.warm = max(1, cfg.Warmup/threads)
		total := per
		if sys.capped && cfg.RewriteMax > 0 {
			r.warm = min(r.warm, max(1, cfg.RewriteMax/4))
			if r.warm+total > cfg.RewriteMax {
				total, r.capped = max(1, cfg.RewriteMax-r.warm), true
			}
		}
		for t := range threads {
			r.budget[t] = total
			for k := range r.warm {
				if err := store.Append(ctx, t, item("w", t, k)); err != nil {
					return nil, errors.Wrapf(err, "%s: warm-up", sys.name)
				}
				r.expect[t].Add(1)
			}
		}
		if err := store.Settle(ctx); err != nil {
			return nil, err
		}
		if r.size0, err = dirSize(dir); err != nil {
			return nil, err
		}
		r.log0 = store.LogBytes()
	}
	goroutines := writers
	if threads > 1 {
		goroutines = threads
	}
	for round := range rounds {
		for k := range runs {
			r := runs[(k+round)%len(runs)]
			// This round's share of what the system still has to append.
			share := make([]int, threads)
			for t := range threads {
				share[t] = r.budget[t] / (rounds - round)
				r.budget[t] -= share[t]
			}
			lat, elapsed, err := appendRound(ctx, r, threads, goroutines, share, func(t, k int) rollout.Item { return item("m", t, k) })
			if err != nil {
				return nil, errors.Wrapf(err, "%s: append", r.sys.name)
			}
			r.lat = append(r.lat, lat...)
			r.elapsed += elapsed
			// What the system does after acknowledging (rolloutdb's
			// projector and index) is counted in written bytes, not time.
			wb0, ok := writeBytes()
			if err := r.store.Settle(ctx); err != nil {
				return nil, err
			}
			wb1, _ := writeBytes()
			r.written += wb1 - wb0
			r.ioOK = ok
		}
	}
	for _, r := range runs {
		size1, err := dirSize(r.dir)
		if err != nil {
			return nil, err
		}
		log1 := r.store.LogBytes()
		r.closed = true
		if err := r.store.Close(); err != nil {
			return nil, errors.Wrapf(err, "%s: close", r.sys.name)
		}
		// Read back what was acknowledged.
		counts, err := r.store.Count(ctx)
		if err != nil {
			return nil, errors.Wrapf(err, "%s: read back", r.sys.name)
		}
		var found int64
		for t, n := range counts {
			if int64(n) != r.expect[t].Load() {
				return nil, errors.Newf("%s: thread %d holds %d items on disk, %d were acknowledged", r.sys.name, t, n, r.expect[t].Load())
			}
			found += int64(n)
		}
		all := slices.Clone(r.lat)
		slices.Sort(all)
		n := int64(len(all))
		res := result{
			System: r.sys.name, Scenario: scenario, Threads: threads, Writers: writers,
			Records: n, WarmupRecords: int64(r.warm * threads), Seconds: r.elapsed.Seconds(),
			RecordsPerSec: float64(n) / r.elapsed.Seconds(),
			P50us:         us(percentile(all, 50)), P99us: us(percentile(all, 99)),
			BytesPerRecord:  float64(size1-r.size0) / float64(n),
			VerifiedRecords: found, Capped: r.capped, Rounds: rounds,
		}
		if threads > 1 {
			res.Writers = 0
		}
		if r.sys.name == sysRolloutdb || r.sys.name == sysThreadAppend {
			res.LogBytesPerRecord = float64(log1-r.log0) / float64(n)
		}
		if r.ioOK {
			res.WrittenBytesPerRecord = float64(r.written) / float64(n)
		}
		if n, ok := r.store.(noter); ok && n.Note() != "" {
			res.Note = n.Note()
		}
		if r.capped {
			res.Note = fmt.Sprintf("capped at %d records a thread (warm-up included; %d asked): each save rewrites the whole session, which reached %s",
				r.warm+int(n)/threads, r.warm+cfg.Records/threads, humanBytes(log1/int64(threads)))
		}
		e.progress("  %-24s %8d records %10.0f records/s  p50 %8.0fµs  p99 %8.0fµs  %7.0f B/record", r.sys.name, n, res.RecordsPerSec, res.P50us, res.P99us, res.BytesPerRecord)
		out = append(out, res)
	}
	return out, nil
}

// runLongTurn appends n items into one open turn of one thread, one at a
// time, in blocks of longTurnBlock (n/2 for a smaller n), and times each block with what the
// system does after acknowledging (rolloutdb's projector and search index)
// settled inside it: a cost that grows with the turn shows as a last block
// slower than the first.
func runLongTurn(ctx context.Context, e *env, sys system, n int, stream []rollout.Item) (res result, err error) {
	dir, err := e.scenarioDir("append-long-turn", sys.name)
	if err != nil {
		return res, err
	}
	defer e.done(dir)
	store, err := sys.openAppend(ctx, e, dir, 1)
	if err != nil {
		return res, errors.Wrapf(err, "%s: open", sys.name)
	}
	defer func() { err = errors.CombineErrors(err, store.Close()) }()
	block := min(longTurnBlock, max(1, n/2))
	blocks := max(2, n/block)
	rates := make([]float64, 0, blocks)
	var total time.Duration
	for b := range blocks {
		start := time.Now()
		for k := range block {
			it := stream[(b*block+k)%len(stream)]
			it.ID = fmt.Sprintf("long-%d-%d", b, k)
			if err := store.Append(ctx, 0, it); err != nil {
				return res, errors.Wrapf(err, "%s: append", sys.name)
			}
		}
		if err := store.Settle(ctx); err != nil {
			return res, err
		}
		d := time.Since(start)
		total += d
		rates = append(rates, float64(block)/d.Seconds())
	}
	res = result{
		System: sys.name, Scenario: "append-long-turn", Threads: 1, Writers: 1, Records: int64(blocks * block),
		Seconds: total.Seconds(), RecordsPerSec: float64(blocks*block) / total.Seconds(),
		FirstRecordsPerSec: rates[0], LastRecordsPerSec: rates[len(rates)-1],
		Note: fmt.Sprintf("blocks of %d, each timed with the system settled (its projection and index done)", block),
	}
	e.progress("  %-24s %d items in one turn: first %d at %.0f/s, last %d at %.0f/s (%.2fx)", sys.name, res.Records, block, res.FirstRecordsPerSec,
		block, res.LastRecordsPerSec, res.LastRecordsPerSec/res.FirstRecordsPerSec)
	return res, nil
}

const longTurnBlock = 1000

// appendRound appends share[t] records to each thread t of one system
// from `goroutines` appenders (one thread: all of them pull from one
// counter) and returns each append's latency and the wall time, written
// bytes included (/proc/self/io).
func appendRound(ctx context.Context, r *appendRun, threads, goroutines int, share []int, item func(t, k int) rollout.Item) ([]time.Duration, time.Duration, error) {
	lat := make([][]time.Duration, goroutines)
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	base := slices.Clone(r.next)
	wb0, _ := writeBytes()
	var wg sync.WaitGroup
	start := time.Now()
	for g := range goroutines {
		wg.Go(func() {
			for {
				t, k := g, 0
				if threads == 1 {
					t = 0
					i := int(next.Add(1) - 1)
					if i >= share[0] {
						return
					}
					k = base[0] + i
				} else {
					if len(lat[g]) >= share[g] {
						return
					}
					k = base[g] + len(lat[g])
				}
				it := item(t, k)
				t0 := time.Now()
				err := r.store.Append(ctx, t, it)
				d := time.Since(t0)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				r.expect[t].Add(1)
				lat[g] = append(lat[g], d)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	wb1, _ := writeBytes()
	r.written += wb1 - wb0
	for t := range threads {
		r.next[t] += share[t]
	}
	return slices.Concat(lat...), elapsed, firstErr
}

// runReplay builds the big thread in one system, replays it, measures it
// active, archives it and measures it again.
func runReplay(ctx context.Context, e *env, sys system, bt *bigThread) (out []result, err error) {
	dir, err := e.scenarioDir("replay", sys.name)
	if err != nil {
		return nil, err
	}
	defer e.done(dir)
	t0 := time.Now()
	store, err := sys.openReplay(ctx, e, dir, bt)
	if err != nil {
		return nil, errors.Wrapf(err, "%s: build", sys.name)
	}
	defer func() { err = errors.CombineErrors(err, store.Close()) }()
	syscall.Sync() // the fixture's dirty pages go out before anything is timed
	built := time.Since(t0)

	replay := func() (time.Duration, error) {
		start := time.Now()
		turns, err := store.Replay(ctx)
		d := time.Since(start)
		if err == nil && turns != len(bt.turns) {
			err = errors.Newf("%s: replay returned %d turns, want %d", sys.name, turns, len(bt.turns))
		}
		return d, err
	}
	if _, err := replay(); err != nil { // warm-up
		return nil, err
	}
	var times []time.Duration
	for range max(1, e.cfg.ReplayRepeat) {
		d, err := replay()
		if err != nil {
			return nil, err
		}
		times = append(times, d)
	}
	med := median(times)
	log, total := store.Size()
	r := result{
		System: sys.name, Scenario: "replay", Records: int64(bt.records), Turns: len(bt.turns),
		Ms: float64(med) / 1e6, RecordsPerSec: float64(bt.records) / med.Seconds(), MBPerSec: float64(log) / 1e6 / med.Seconds(),
		Bytes: log,
	}
	if ro, ok := store.(interface {
		resumeOnly(context.Context) (time.Duration, error)
	}); ok {
		var only []time.Duration
		for range max(1, e.cfg.ReplayRepeat) {
			d, err := ro.resumeOnly(ctx)
			if err != nil {
				return nil, err
			}
			only = append(only, d)
		}
		r.Note = fmt.Sprintf("DB.Resume; of which recovery.ResumeFile alone %s", ms(median(only)))
	}
	e.progress("  %-24s replay %s (%.0f records/s, %.0f MB/s of its %s file; built in %s)", sys.name, ms(med), r.RecordsPerSec, r.MBPerSec, humanBytes(log), ms(built))
	out = append(out, r)

	active := result{System: sys.name, Scenario: "size-active", Records: int64(bt.records), Bytes: log, BytesPerRecord: float64(log) / float64(bt.records)}
	if total != log {
		active.TotalBytes = total
		active.Note = fmt.Sprintf("the rollout; with state.db (a derived index, with full-text search) %s", humanBytes(total))
	}
	out = append(out, active)

	start := time.Now()
	alog, atotal, note, err := store.Archive(ctx)
	if err != nil {
		return nil, errors.Wrapf(err, "%s: archive", sys.name)
	}
	archived := result{
		System: sys.name, Scenario: "size-archived", Records: int64(bt.records), Bytes: alog,
		BytesPerRecord: float64(alog) / float64(bt.records), Ms: float64(time.Since(start)) / 1e6, Note: note,
	}
	if atotal != alog {
		archived.TotalBytes = atotal
		archived.Note += fmt.Sprintf("; with state.db %s", humanBytes(atotal))
	}
	e.progress("  %-24s active %s, archived %s", sys.name, humanBytes(log), humanBytes(alog))
	return append(out, archived), nil
}

// listThreads are the small threads of the list scenario: thread i was
// created at fixtureTime + i minutes and updated seconds later, so every
// system must list the same 50, newest first.
type listThreads struct {
	n     int
	turns []turn
}

func (w *workload) listThreads(n int) *listThreads {
	lt := &listThreads{n: n}
	for i := range n {
		lt.turns = append(lt.turns, w.smallTurn(i))
	}
	return lt
}

// smallTurn is a question and its answer.
func (w *workload) smallTurn(i int) turn {
	t := turn{id: fmt.Sprintf("turn-%06d", i), model: "model-1"}
	q, a := w.sentence(w.between(5, 25)), w.sentence(w.between(10, 80))
	t.user = rollout.Item{ID: t.id + "-u", Type: rollout.ItemUserMessage, Status: rollout.ItemCompleted, Text: q}
	t.items = []rollout.Item{{ID: t.id + "-a", Type: rollout.ItemAgentMessage, Status: rollout.ItemCompleted, Text: a}}
	t.history = [][]byte{fmt.Appendf(nil, `{"role":"user","content":%q}`, q), fmt.Appendf(nil, `{"role":"assistant","content":%q}`, a)}
	t.usage = rollout.Usage{InputTokens: 900, OutputTokens: 120, TotalTokens: 1020}
	return t
}

func (lt *listThreads) id(i int) string  { return fmt.Sprintf("list-%06d", i) }
func (lt *listThreads) turn(i int) *turn { return &lt.turns[i] }
func (lt *listThreads) created(i int) time.Time {
	return fixtureTime.Add(time.Duration(i) * time.Minute)
}
func (lt *listThreads) updated(i int) time.Time { return lt.created(i).Add(5 * time.Second) }
func (lt *listThreads) title(i int) string      { return firstWords(lt.turns[i].user.Text, 8) }
func (lt *listThreads) newest(k int) (ids []string) {
	for i := lt.n - 1; i >= max(0, lt.n-k); i-- {
		ids = append(ids, lt.id(i))
	}
	return ids
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	return strings.Join(f[:min(n, len(f))], " ")
}

// runList builds lt in one system and times pages of 50.
func runList(ctx context.Context, e *env, sys system, scenario string, lt *listThreads) (res result, err error) {
	dir, err := e.scenarioDir(scenario, sys.name)
	if err != nil {
		return res, err
	}
	defer e.done(dir)
	t0 := time.Now()
	store, err := sys.openList(ctx, e, dir, lt)
	if err != nil {
		return res, errors.Wrapf(err, "%s: build", sys.name)
	}
	defer func() { err = errors.CombineErrors(err, store.Close()) }()
	syscall.Sync()
	built := time.Since(t0)
	want := lt.newest(50)
	list := func() (time.Duration, error) {
		start := time.Now()
		ids, err := store.List(ctx)
		d := time.Since(start)
		if err == nil && !slices.Equal(ids, want) {
			err = errors.Newf("%s: listed %d threads %.3q..., want %.3q...", sys.name, len(ids), ids, want)
		}
		return d, err
	}
	first, err := list()
	if err != nil {
		return res, err
	}
	var times []time.Duration
	for range max(1, e.cfg.ListRepeat) {
		d, err := list()
		if err != nil {
			return res, err
		}
		times = append(times, d)
	}
	slices.Sort(times)
	p50 := percentile(times, 50)
	res = result{
		System: sys.name, Scenario: scenario, Threads: lt.n, Ms: float64(p50) / 1e6,
		P50us: us(p50), P99us: us(percentile(times, 99)),
		Note: fmt.Sprintf("first call %s", ms(first)),
	}
	if n, ok := store.(noter); ok {
		res.Note += "; " + n.Note()
	}
	e.progress("  %-24s page of 50 in %s (p50 of %d; first call %s; built in %s)", sys.name, ms(p50), len(times), ms(first), ms(built))
	return res, nil
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d B", n)
	}
}
