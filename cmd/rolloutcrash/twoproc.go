package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// runTwoproc is the twoproc mode: this process writes to threads of a real
// workspace while a second process opens the same workspace and
//   - tries to become a second writer of each thread (DB.OpenThread,
//     DB.Resume, rollout.Open): it must be refused with
//     rollout.ErrThreadLocked, and never touch the file;
//   - reads each rollout read-only, over and over: what it sees must be a
//     gapless prefix with no damage (a torn tail at the very end, a frame
//     being written, is allowed), reaching at least every record this
//     process had acknowledged before the read began (told over its stdin),
//     never changing a record it saw before, and holding only records some
//     writer attempted (checked here from its V lines);
//   - reads the thread through its own DB (ThreadInfo, Turns): the
//     projection is at least as far as the acknowledged records and shows
//     only attempted items.
//
// Then this process closes its threads and tells the child, which must now
// be able to open each one and append to it (the lock goes with the
// writer). The workspace is verified as in the other modes.
func runTwoproc(ctx context.Context, cfg *config, st *stats) {
	base := filepath.Join(cfg.dir, "twoproc")
	var led *ledger
	var ws string
	var existing []string
	for iter := 0; iter < cfg.iterations; iter++ {
		if iter%cfg.keepFor == 0 {
			ws, led, existing = filepath.Join(base, fmt.Sprintf("ws-%d", iter)), newLedger(), nil
		}
		c := cfg.checker("twoproc", iter)
		twoprocIteration(ctx, cfg, c, iterRand(cfg.seed, "twoproc", iter), ws, led, &existing)
		c.st.Iterations = 1
		st.add(c.st)
		if c.st.Failures == 0 && (iter+1)%cfg.keepFor == 0 {
			_ = os.RemoveAll(ws)
		}
	}
}

func twoprocIteration(ctx context.Context, cfg *config, c *checker, rng *rand.Rand, ws string, led *ledger, existing *[]string) {
	base := filepath.Dir(ws)
	ref := wsRef{dir: ws, scratch: base, logger: cfg.logger}
	db, err := ref.open(ctx, "")
	if err != nil {
		c.failf(failUnreadable, "open the workspace: %v", err)
		return
	}
	cont, created := pickThreads(rng, *existing, "w", c.iter, cfg.threads)
	threads := append(append([]string{}, cont...), created...)

	// Acknowledged seqs go to the child as they happen.
	acks := make(chan string, 1<<14)
	led.mu.Lock()
	led.onAck = func(thread string, _, last uint64) {
		if last == 0 {
			return
		}
		select {
		case acks <- fmt.Sprintf("S %s %d\n", thread, last):
		default: // the child is behind: a later ack says more
		}
	}
	led.mu.Unlock()
	defer func() {
		led.mu.Lock()
		led.onAck = nil
		led.mu.Unlock()
	}()

	var stop atomic.Bool
	gate := make(chan struct{}) // the writers write once the reader is ready
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	defer openGate()
	var held sync.WaitGroup
	held.Add(len(threads))
	h := &host{ctx: ctx, db: db, j: led.journal(), exact: true, large: cfg.large, pace: 20 * time.Millisecond, maxCalls: int(cfg.ops / 4),
		opened: func(string) { held.Done() }, gate: gate,
		stop:   stop.Load,
		onErr:  func(err error, _ int64) error { return err },
		report: func(s string) { c.failf(failOther, "writer: %s", s) },
	}
	acked0 := led.acked()
	writersDone := make(chan struct{})
	go func() {
		defer close(writersDone)
		runWorkers(h, cont, created, rng.Uint64(), fmt.Sprintf("w%d", c.iter), false, false)
	}()
	// The child starts once every thread has its writer.
	allHeld := make(chan struct{})
	go func() {
		held.Wait()
		close(allHeld)
	}()
	select {
	case <-allHeld:
	case <-writersDone:
		c.failf(failOther, "the writers ended before they all held their threads")
	}

	cc := childConfig{Role: "twoproc", Workspace: ws, Seed: rng.Uint64(), Iter: c.iter, Existing: threads,
		Phase1: cfg.phase1}
	ch, err := startChild(cfg, cc, led, true)
	if err != nil {
		stop.Store(true)
		openGate()
		<-writersDone
		db.Close()
		c.failf(failOther, "start the child: %v", err)
		return
	}
	debugf("twoproc %d: child started", c.iter)
	pumpDone := make(chan struct{})
	go func() {
		defer close(pumpDone)
		for s := range acks {
			if _, err := ch.stdin.Write([]byte(s)); err != nil {
				return
			}
		}
	}()
	select {
	case <-led.signal(fmt.Sprintf("ready-%d", c.iter)):
	case <-ch.exited:
	case <-time.After(time.Minute):
		c.failf(failOther, "the reading process was not ready after a minute")
	}
	openGate()
	select {
	case <-led.signal(fmt.Sprintf("phase1-%d", c.iter)):
	case <-ch.exited:
	case <-time.After(2*cfg.phase1 + time.Minute):
		c.failf(failOther, "the reading process did not finish its first phase")
	}
	debugf("twoproc %d: phase 1 over, %d acknowledged", c.iter, led.acked()-acked0)
	stop.Store(true)
	<-writersDone // every thread closed: the locks are released
	led.mu.Lock()
	led.onAck = nil
	led.mu.Unlock()
	close(acks)
	<-pumpDone
	if _, err := ch.stdin.Write([]byte("X\n")); err != nil {
		c.failf(failOther, "tell the reading process the threads are closed: %v", err)
	}
	_ = ch.stdin.Close()
	select {
	case <-ch.exited:
		ch.wait()
	case <-time.After(time.Minute):
		ch.kill()
		c.failf(failOther, "the second process did not finish a minute after the threads were closed")
	}
	debugf("twoproc %d: child done", c.iter)
	if ch.waitErr != nil {
		c.failf(failOther, "the second process failed: %v; %s", ch.waitErr, ch.tail())
	}
	c.st.Acknowledged = led.acked() - acked0

	// What the second process saw was attempted, and where it was
	// acknowledged.
	led.mu.Lock()
	for _, v := range led.takeViewsLocked() {
		tl := led.threads[v.thread]
		var o *op
		if tl != nil {
			o = tl.byKey[v.key]
		}
		switch {
		case o == nil:
			c.failf(failOther, "thread %s: the reading process saw a record (seq %d, key %s) no writer attempted", v.thread, v.seq, v.key)
		case v.seq != 0 && o.ack != 0 && o.first != 0 && (v.seq < o.first || v.seq > o.last):
			c.failf(failOther, "thread %s: the reading process saw op %s's record at seq %d; it was acknowledged at %d-%d", v.thread, o.id, v.seq, o.first, o.last)
		}
		c.st.count("records_seen_by_reader", 1)
	}
	for k, v := range led.counters {
		c.st.count(k, v)
	}
	led.counters = map[string]int64{}
	led.mu.Unlock()
	// No crash here: the workspace this process has open (its state.db
	// shared with the other process) is the one to check.
	*existing = c.verifyDB(ctx, ref, db, led, false)
	if err := db.Close(); err != nil {
		c.failf(failOther, "close the workspace: %v", err)
	}
}

// childTwoproc is the second process of the twoproc mode.
func childTwoproc(ctx context.Context, cc childConfig, j journal, logger *slog.Logger) int {
	db, err := rolloutdb.Open(ctx, cc.Workspace, rolloutdb.Options{Sync: rollout.SyncAlways, Logger: logger})
	if err != nil {
		j("E open the workspace in a second process: " + oneLine(err.Error()))
		return 2
	}
	defer db.Close()
	failf := func(format string, args ...any) { j("E " + oneLine(fmt.Sprintf(format, args...))) }

	var mu sync.Mutex
	acked := map[string]uint64{}
	released := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 3 && f[0] == "S":
				n, _ := strconv.ParseUint(f[2], 10, 64)
				mu.Lock()
				acked[f[1]] = max(acked[f[1]], n)
				mu.Unlock()
			case len(f) == 1 && f[0] == "X":
				close(released)
				return
			}
		}
	}()
	ackedFor := func(id string) uint64 {
		mu.Lock()
		defer mu.Unlock()
		return acked[id]
	}

	seen := map[string]map[uint64]int64{}
	items := map[string]bool{}
	counts := map[string]int64{}
	j(fmt.Sprintf("R ready-%d", cc.Iter))
	deadline := time.Now().Add(cc.Phase1)
	for round := 0; round == 0 || time.Now().Before(deadline); round++ {
		for _, id := range cc.Existing {
			path, err := rollout.ActivePath(db.DataDir(), id)
			if err != nil {
				failf("thread %s: %v", id, err)
				continue
			}
			// A second writer is refused while the first holds the thread.
			tries := []struct {
				name string
				open func() (func() error, error)
			}{
				{"DB.OpenThread", func() (func() error, error) {
					th, err := db.OpenThread(ctx, id)
					if err != nil {
						return nil, err
					}
					return th.Close, nil
				}},
			}
			if round%3 == 0 {
				tries = append(tries,
					struct {
						name string
						open func() (func() error, error)
					}{"DB.Resume", func() (func() error, error) {
						th, _, err := db.Resume(ctx, id, rolloutdb.ResumeOptions{})
						if err != nil {
							return nil, err
						}
						return th.Close, nil
					}},
					struct {
						name string
						open func() (func() error, error)
					}{"rollout.Open", func() (func() error, error) {
						w, _, err := rollout.Open(ctx, path, id, rollout.Options{})
						if err != nil {
							return nil, err
						}
						return w.Close, nil
					}})
			}
			for _, t := range tries {
				closeFn, err := t.open()
				switch {
				case err == nil:
					_ = closeFn()
					failf("thread %s: %s in a second process succeeded while the first process holds the thread", id, t.name)
				case !errors.Is(err, rollout.ErrThreadLocked):
					failf("thread %s: %s in a second process: want rollout.ErrThreadLocked, got %v", id, t.name, err)
				default:
					counts["second_writer_refused"]++
				}
			}

			// A reader sees a consistent prefix.
			n := ackedFor(id)
			if !readPrefix(db, id, path, n, seen, j, failf, counts) {
				continue
			}
			if round%4 == 0 {
				st, err := recovery.ResumeFile(ctx, vfs.OS, path, recovery.Options{ThreadID: id, WorkspaceID: db.WorkspaceID()})
				switch {
				case err != nil:
					failf("thread %s: read-only resume in a second process: %v", id, err)
				case st.LastSeq < n:
					failf("thread %s: read-only resume ends at seq %d; seq %d was acknowledged before it began", id, st.LastSeq, n)
				}
				if err == nil {
					for _, s := range st.Report.Skipped {
						if s.Reason != recovery.ReasonRolledBack {
							failf("thread %s: read-only resume skipped %+v", id, s)
						}
					}
				}
				info, err := db.ThreadInfo(ctx, id)
				if err != nil {
					failf("thread %s: ThreadInfo in a second process: %v", id, err)
					continue
				}
				if info.ProjectedSeq < n {
					failf("thread %s: ThreadInfo in a second process is at seq %d; seq %d was acknowledged before it was asked", id, info.ProjectedSeq, n)
				}
				turns, err := db.Turns(ctx, id, max(1, info.Turns-20), info.Turns)
				if err != nil {
					failf("thread %s: Turns in a second process: %v", id, err)
					continue
				}
				for _, t := range turns {
					for _, it := range t.Items {
						full := []byte(it.Text)
						if it.Ref != nil {
							if full, err = readArtifact(nil, db.DataDir(), *it.Ref); err != nil {
								failf("thread %s: item %s paged by a second process: %v", id, it.ID, err)
								continue
							}
						}
						key := recordKey(rollout.KindItemAppended, t.ID, canonicalItem(it, full))
						if !items[key] {
							items[key] = true
							j("V " + id + " 0 " + key)
						}
					}
				}
			}
		}
	}
	for k, v := range counts {
		j(fmt.Sprintf("N %s %d", k, v))
	}
	j(fmt.Sprintf("R phase1-%d", cc.Iter))

	select {
	case <-released:
	case <-time.After(2 * time.Minute):
		failf("the first process never said it closed the threads")
		return 1
	}
	// The first writer is gone: this process may write now.
	for _, id := range cc.Existing {
		th, err := db.OpenThread(ctx, id)
		if err != nil {
			failf("thread %s: open in a second process after the first closed it: %v", id, err)
			continue
		}
		name := fmt.Sprintf("second-process-%d-%s", cc.Iter, id)
		body := rollout.MetadataUpdated{Name: &name}
		rec, _ := rollout.NewRecord(rollout.KindMetadataUpdated, "", body)
		op := fmt.Sprintf("x%d-%s", cc.Iter, id)
		j("A " + id + " " + op + " " + recordKey(rollout.KindMetadataUpdated, "", body))
		res, err := th.Append(ctx, []rollout.Record{rec}, rollout.AppendOptions{})
		if err != nil {
			j("F " + id + " " + op + " " + errClass(err))
			failf("thread %s: append in a second process after the first closed it: %v", id, err)
		} else {
			j(fmt.Sprintf("K %s %s %d %d", id, op, res.FirstSeq, res.LastSeq))
		}
		if err := th.Close(); err != nil {
			failf("thread %s: close in a second process: %v", id, err)
		}
	}
	return 0
}

// readPrefix reads a rollout another process is writing and checks that
// it is a prefix: no damage, seqs from 1 without a gap, at least through
// acked, and every record it saw before still there unchanged. New records
// are reported as V lines.
func readPrefix(db *rolloutdb.DB, id, path string, acked uint64, seen map[string]map[uint64]int64, j journal, failf func(string, ...any), counts map[string]int64) bool {
	src, size, closeFn, err := rollout.OpenRead(vfs.OS, path)
	if err != nil {
		failf("thread %s: open for reading in a second process: %v", id, err)
		return false
	}
	defer closeFn()
	r, err := rollout.NewReader(src, size, rollout.ReaderOptions{Path: path})
	if err != nil {
		failf("thread %s: read in a second process: %v", id, err)
		return false
	}
	s := seen[id] // seq -> frame offset
	if s == nil {
		s = map[uint64]int64{}
		seen[id] = s
	}
	var last uint64
	keys := keyReader{dataDir: db.DataDir()}
	for r.Next() {
		rec := r.Record()
		if rec.Seq != last+1 {
			failf("thread %s: a reader in a second process saw seq %d after %d", id, rec.Seq, last)
		}
		last = rec.Seq
		if rec.Seq == 1 {
			continue
		}
		if off, ok := s[rec.Seq]; ok {
			// Seen before (and reported): it must not have moved. (Its
			// content is checked by the frame's CRC.)
			if off != r.FrameOffset() {
				failf("thread %s: seq %d moved from offset %d to %d between two reads by a second process", id, rec.Seq, off, r.FrameOffset())
			}
			continue
		}
		key, err := keys.key(rec, r.FrameOffset())
		if err != nil {
			failf("thread %s: seq %d read by a second process: %v", id, rec.Seq, err)
			continue
		}
		s[rec.Seq] = r.FrameOffset()
		j(fmt.Sprintf("V %s %d %s", id, rec.Seq, key))
	}
	if err := r.Err(); err != nil {
		failf("thread %s: read in a second process: %v", id, err)
	}
	for _, d := range r.Damage() {
		failf("thread %s: a reader in a second process found damage: %v", id, d)
	}
	if r.TornTail() != nil {
		counts["torn_tail_seen_by_reader"]++
	}
	counts["reads"]++
	if last < acked {
		failf("thread %s: a reader in a second process saw up to seq %d; seq %d was acknowledged before it began", id, last, acked)
	}
	// Records seen before and now beyond the end: a prefix shrank.
	for seq := range s {
		if seq > last {
			failf("thread %s: seq %d, seen before by a second process, is gone (the rollout ends at %d)", id, seq, last)
			delete(s, seq)
		}
	}
	return true
}
