package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// runKill is the kill mode: a child process (this binary again) writes to
// several threads of a real workspace on disk and journals every call on
// its side channel; the parent kills it with SIGKILL at a random moment
// (most often a random delay after it is ready, sometimes a random delay
// after it starts, which can fall inside Open) and verifies the workspace.
// The workspace is continued by the next iteration (its child resumes
// threads the last one left, torn tails and interrupted turns included)
// for cfg.keepFor iterations, then a new one begins.
func runKill(ctx context.Context, cfg *config, st *stats) {
	base := filepath.Join(cfg.dir, "kill")
	var led *ledger
	var ws string
	var existing []string
	for iter := 0; iter < cfg.iterations; iter++ {
		if iter%cfg.keepFor == 0 {
			ws, led, existing = filepath.Join(base, fmt.Sprintf("ws-%d", iter)), newLedger(), nil
		}
		c := cfg.checker("kill", iter)
		existing = killIteration(ctx, cfg, c, ws, led, existing)
		c.st.Iterations = 1
		st.add(c.st)
		if c.st.Failures == 0 && (iter+1)%cfg.keepFor == 0 {
			_ = os.RemoveAll(ws) // done with it; a failing one is kept
		}
	}
}

// killIteration runs one child on the workspace ws, kills it and verifies
// what it left; it returns the threads found.
func killIteration(ctx context.Context, cfg *config, c *checker, ws string, led *ledger, existing []string) []string {
	iter := c.iter
	base := filepath.Dir(ws)
	rng := iterRand(cfg.seed, "kill", iter)
	cont, created := pickThreads(rng, existing, "k", iter, cfg.threads)
	cc := childConfig{Role: "kill", Workspace: ws, Seed: rng.Uint64(), Iter: iter, Existing: cont, Created: created,
		Meta: rng.IntN(2) == 0, Large: cfg.large, MaxRun: time.Minute}
	acked0 := led.acked()
	ch, err := startChild(cfg, cc, led, false)
	if err != nil {
		c.failf(failOther, "start the child: %v", err)
		return existing
	}
	start := time.Now()
	var delay time.Duration
	if rng.IntN(8) == 0 {
		// From the start: the kill may land in Open (state.db,
		// workspace.json, rebuild) or in resuming the threads.
		delay = time.Duration(rng.Int64N(int64(150 * time.Millisecond)))
		c.count("kills_from_start", 1)
	} else {
		select {
		case <-led.signal(fmt.Sprintf("ready-%d", iter)):
		case <-ch.exited:
		case <-time.After(time.Minute):
			c.failf(failOther, "the child was not ready after a minute")
		}
		start = time.Now()
		delay = cfg.minDelay + time.Duration(rng.Int64N(int64(cfg.maxDelay-cfg.minDelay)+1))
	}
	select {
	case <-time.After(time.Until(start.Add(delay))):
		ch.kill()
		c.count("kills", 1)
	case <-ch.exited:
		ch.wait()
		c.failf(failOther, "the child exited before it was killed (%v); %s", ch.waitErr, ch.tail())
	}
	c.st.Acknowledged = led.acked() - acked0
	if ps := led.takeProblems(); len(ps) > 0 {
		for _, p := range ps {
			c.failf(failOther, "child: %s", p)
		}
		c.failf(failOther, "child %s", ch.tail())
	}
	return c.verify(ctx, wsRef{dir: ws, scratch: base, logger: cfg.logger}, led, false)
}

// childKill is the child of the kill mode: it opens the workspace and
// writes until it is killed.
func childKill(ctx context.Context, cc childConfig, j journal, logger *slog.Logger) int {
	db, err := rolloutdb.Open(ctx, cc.Workspace, rolloutdb.Options{Sync: rollout.SyncAlways, Logger: logger})
	if err != nil {
		j("E open the workspace: " + oneLine(err.Error()))
		return 2
	}
	j(fmt.Sprintf("R ready-%d", cc.Iter))
	deadline := time.Now().Add(cc.MaxRun)
	h := &host{ctx: ctx, db: db, j: j, exact: !cc.Meta, reopen: 0.05, large: cc.Large,
		stop:   func() bool { return time.Now().After(deadline) },
		onErr:  func(err error, _ int64) error { return err },
		report: func(s string) { j("E " + oneLine(s)) },
	}
	runWorkers(h, cc.Existing, cc.Created, cc.Seed, fmt.Sprintf("k%d", cc.Iter), cc.Meta, true)
	if err := db.Close(); err != nil {
		j("E close: " + oneLine(err.Error()))
	}
	return 0
}
