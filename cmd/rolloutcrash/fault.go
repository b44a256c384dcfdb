package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// runFault is the fault mode: writers append through a FaultFS that fails
// writes and fsyncs at random (ENOSPC, EIO, short writes), and now and then
// a create, link, remove or directory sync, for a random number of
// operations; then the faults stop. While they last every failed call is
// retried with the same content on the same thread handle, as a host
// would. What it proves:
//   - the library returns errors and acknowledges nothing it did not write
//     durably: after the faults, and again after a power cut, every
//     acknowledged record is there, and a failed frame is never left for a
//     later acknowledged one to follow (a retry would otherwise leave the
//     record twice);
//   - it continues once the fault clears, on the same handles (the writer
//     cuts what a failed write or fsync left and syncs before the next
//     append, as docs/FORMAT.md promises): every call begun after the
//     faults stopped succeeds, and every thread makes progress.
func runFault(ctx context.Context, cfg *config, st *stats) {
	var m memWorkspace
	for iter := 0; iter < cfg.iterations; iter++ {
		m.next(cfg, "fault", iter)
		c := cfg.checker("fault", iter)
		rng := iterRand(cfg.seed, "fault", iter)
		rate := 0.02 + rng.Float64()*0.15
		faultOps := cfg.ops/10 + rng.Int64N(cfg.ops-cfg.ops/10)
		// After the faults stop every thread must have calls acknowledged;
		// the run ends when each has had cleanQuota, or after cap more
		// operations (those short of it fail).
		const cleanQuota, cap = 3, 50_000
		frng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		var mu sync.Mutex // frng
		var armed atomic.Bool
		var n, clearedAt atomic.Int64
		done := make(chan struct{})
		var stopOnce sync.Once
		mem := m.mem
		ffs := &vfs.FaultFS{FS: mem, Hook: func(o vfs.Op, name string) error {
			if !armed.Load() || o == vfs.OpOpen {
				return nil
			}
			k := n.Add(1)
			switch {
			case k == faultOps:
				clearedAt.Store(k)
				return nil
			case k == faultOps+cap:
				stopOnce.Do(func() { close(done) })
				return nil
			case k > faultOps:
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			err := pickFault(frng, o, rate, cfg.namespaceFaults)
			if err != nil {
				c.count("faults_"+string(o), 1)
			}
			return err
		}}
		ws := wsRef{fs: ffs, dir: memDir, statePath: m.statePath, scratch: m.scratch, logger: cfg.logger}
		db, err := ws.open(ctx, m.statePath)
		if err != nil {
			c.failf(failUnreadable, "open the workspace: %v", err)
			st.add(c.st)
			m.mem = nil
			continue
		}
		stopped := func() bool {
			select {
			case <-done:
				return true
			default:
				return false
			}
		}
		meta := rng.IntN(2) == 0
		h := &host{ctx: ctx, db: db, j: m.led.journal(), exact: !meta, large: cfg.large,
			stop:      stopped,
			clock:     n.Load,
			clearedAt: clearedAt.Load,
			onErr: func(err error, started int64) error {
				if at := clearedAt.Load(); at != 0 && started >= at {
					return errors.Wrap(err, "a call begun after the faults stopped failed")
				}
				c.count("errors_"+errClass(err), 1)
				return nil // retry: the fault may clear
			},
			report: func(s string) { c.failf(failOther, "writer: %s", s) },
		}
		cont, created := pickThreads(rng, m.existing, "f", iter, cfg.threads)
		var met atomic.Int64
		h.cleanQuota = cleanQuota
		h.quotaMet = func() {
			if met.Add(1) == int64(len(cont)+len(created)) {
				stopOnce.Do(func() { close(done) })
			}
		}
		acked0 := m.led.acked()
		armed.Store(true)
		workers := runWorkers(h, cont, created, rng.Uint64(), fmt.Sprintf("f%d", iter), meta, true)
		armed.Store(false)
		if clearedAt.Load() == 0 {
			c.failf(failOther, "the workload ended before the faults stopped (%d operations)", n.Load())
		}
		for _, w := range workers {
			debugf("fault %d: thread %s: %d calls acknowledged after the faults stopped at op %d (now %d), %d in all, err %v", iter, w.id, w.clean.Load(), clearedAt.Load(), n.Load(), w.acks.Load(), w.err)
			if w.err == nil && w.clean.Load() < cleanQuota {
				c.failf(failOther, "thread %s: %d calls begun after the faults stopped were acknowledged in %d operations; want %d", w.id, w.clean.Load(), n.Load()-clearedAt.Load(), cleanQuota)
			}
		}
		c.st.Acknowledged = m.led.acked() - acked0

		// The process lives on: every failed frame has been cut.
		c.checkRollouts(mem, filepath.Join(memDir, ".craft"), db.WorkspaceID(), m.led, filepath.Join(memDir, ".craft"), true)
		if err := db.Close(); err != nil {
			c.failf(failOther, "close the workspace after the faults stopped: %v", err)
		}
		// And after a power cut.
		m.mem = mem.Crash(rand.New(rand.NewPCG(rng.Uint64(), 7)), false)
		c.count("crashes", 1)
		m.existing = c.verify(ctx, wsRef{fs: m.mem, dir: memDir, statePath: m.statePath, scratch: m.scratch, logger: cfg.logger}, m.led, true)
		c.st.Iterations = 1
		st.add(c.st)
	}
	if m.statePath != "" {
		removeDB(m.statePath)
	}
}

// pickFault chooses the fault for one operation, or nil: writes and fsyncs
// fail at rate (a full disk, an I/O error, a write cut short), truncates
// too (the writer's cut-back must be retried), and the namespace
// operations of creating a thread less often.
func pickFault(rng *rand.Rand, o vfs.Op, rate float64, namespace bool) error {
	switch o {
	case vfs.OpWrite:
		if rng.Float64() >= rate {
			return nil
		}
		switch rng.IntN(3) {
		case 0:
			return errENOSPC
		case 1:
			return errEIO
		default:
			return &vfs.ShortWrite{N: rng.IntN(4096), Err: errENOSPC}
		}
	case vfs.OpSync:
		if rng.Float64() >= rate {
			return nil
		}
		if rng.IntN(3) == 0 {
			return errENOSPC
		}
		return errEIO
	case vfs.OpTruncate:
		if rng.Float64() >= rate {
			return nil
		}
		return errEIO
	default: // create, link, rename, remove, syncdir
		if !namespace || rng.Float64() >= rate/2 {
			return nil
		}
		return errEIO
	}
}
