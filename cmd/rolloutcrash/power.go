package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/errors"
	rjournal "github.com/rolloutdb/rolloutdb/journal"
	"github.com/rolloutdb/rolloutdb/vfs"
)

var (
	errCrash  = errors.New("power cut")
	errENOSPC = syscall.ENOSPC
	errEIO    = syscall.EIO
)

// memWorkspace is a workspace on a MemFS that iterations continue: each
// one crashes it and the next goes on with what survived.
type memWorkspace struct {
	mem       *vfs.MemFS
	led       *ledger
	existing  []string
	statePath string
	scratch   string
}

const memDir = "/ws"

// next returns the workspace for iteration iter: the one left by the last
// iteration, or a new one every cfg.keepFor iterations.
func (m *memWorkspace) next(cfg *config, mode string, iter int) {
	if iter%cfg.keepFor != 0 && m.mem != nil {
		return
	}
	if m.statePath != "" {
		removeDB(m.statePath)
	}
	m.mem, m.led, m.existing = vfs.NewMemFS(), newLedger(), nil
	m.scratch = filepath.Join(cfg.dir, mode)
	// state.db lives on the real disk: it survives the power cut whole,
	// which is the harder case for read-repair (it may hold rows of
	// frames the cut took away).
	m.statePath = filepath.Join(m.scratch, fmt.Sprintf("state-%d.db", iter))
}

// runPower is the power mode: writers append to several threads of a MemFS
// workspace with SyncAlways from several goroutines; after a random number
// of file-system operations the FaultFS hook cuts the power (MemFS.Crash:
// each unsynced write survives whole, torn or not at all) while the others
// are mid-call; the workspace is reopened on what survived and verified.
func runPower(ctx context.Context, cfg *config, st *stats) {
	var m memWorkspace
	for iter := 0; iter < cfg.iterations; iter++ {
		m.next(cfg, "power", iter)
		c := cfg.checker("power", iter)
		rng := iterRand(cfg.seed, "power", iter)
		crashAt := 1 + rng.Int64N(cfg.ops)
		crashRng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		// Where the cut lands: at any operation, or at one of the rarer
		// moments the journal brings (a rollout's fdatasync, which the
		// journal does in the background to release a segment; the release
		// of a segment itself; the replay at the next open).
		target := cutTargets[rng.IntN(len(cutTargets))]
		if target != cutAny && target != cutReplay {
			crashAt = 1 + rng.Int64N(6)
		}
		c.count("cut_"+string(target), 1)
		mem := m.mem
		var once sync.Once
		var crashed atomic.Pointer[vfs.MemFS]
		crash := func() { once.Do(func() { crashed.Store(mem.Crash(crashRng, false)) }) }
		var armed atomic.Bool
		var n atomic.Int64
		ffs := &vfs.FaultFS{FS: mem, Hook: func(o vfs.Op, name string) error {
			if !armed.Load() || o == vfs.OpOpen || !target.matches(o, name) {
				return nil
			}
			if n.Add(1) == crashAt {
				crash() // the others are blocked in, or about to enter, the file system
				return errCrash
			}
			return nil
		}}
		ws := wsRef{fs: ffs, dir: memDir, statePath: m.statePath, scratch: m.scratch, logger: cfg.logger}
		db, err := ws.open(ctx, m.statePath)
		if err != nil {
			c.failf(failUnreadable, "open the workspace: %v", err)
			st.add(c.st)
			m.mem = nil
			continue
		}
		meta := rng.IntN(2) == 0
		h := &host{ctx: ctx, db: db, j: m.led.journal(), exact: !meta, reopen: 0.05, large: cfg.large,
			stop: func() bool { return crashed.Load() != nil },
			onErr: func(err error, _ int64) error {
				if crashed.Load() != nil || errors.Is(err, vfs.ErrCrashed) || errors.Is(err, errCrash) {
					return errStop
				}
				return err
			},
			report: func(s string) { c.failf(failOther, "writer: %s", s) },
		}
		cont, created := pickThreads(rng, m.existing, "p", iter, cfg.threads)
		acked0 := m.led.acked()
		armed.Store(true)
		debugf("power %d: workload on %d+%d threads", iter, len(cont), len(created))
		runWorkers(h, cont, created, rng.Uint64(), fmt.Sprintf("p%d", iter), meta, true)
		debugf("power %d: crashed after %d operations", iter, n.Load())
		crash() // if every writer ended first: the cut comes at rest
		_ = db.Close()
		c.st.Acknowledged = m.led.acked() - acked0
		c.count("crashes", 1)
		c.count("crash_ops", n.Load())
		m.mem = crashed.Load()
		if target == cutReplay {
			// The next open replays the journal the cut left: cut that too,
			// at one of its operations, then open again and verify.
			m.mem = cutDuringOpen(ctx, c, m, rng, cfg.logger)
		}
		m.existing = c.verify(ctx, wsRef{fs: m.mem, dir: memDir, statePath: m.statePath, scratch: m.scratch, logger: cfg.logger}, m.led, false)
		c.st.Iterations = 1
		st.add(c.st)
	}
	if m.statePath != "" {
		removeDB(m.statePath)
	}
}

// pickThreads chooses the threads an iteration writes: some of those that
// exist (resumed) and new ones, at least two and at most max in all.
func pickThreads(rng *rand.Rand, existing []string, prefix string, iter, max int) (cont, created []string) {
	max = at(max, 2)
	for _, i := range rng.Perm(len(existing))[:min(len(existing), 1+rng.IntN(max))] {
		cont = append(cont, existing[i])
	}
	n := rng.IntN(3)
	if len(existing) >= 3*max {
		n = 0 // enough threads: a workspace continued long grows no more
	}
	n = min(at(n, 2-len(cont)), max-len(cont))
	for i := range n {
		created = append(created, fmt.Sprintf("%s-%d-%d", prefix, iter, i))
	}
	return cont, created
}

// at is the larger of a and b ("at least b").
func at(a, b int) int { return max(a, b) }

// iterRand is the random source of one iteration of a mode: the same seed
// makes the same choices (not the same interleavings).
func iterRand(seed uint64, mode string, iter int) *rand.Rand {
	var h uint64 = 14695981039346656037
	for _, b := range []byte(mode) {
		h = (h ^ uint64(b)) * 1099511628211
	}
	return rand.New(rand.NewPCG(seed, h^uint64(iter)))
}

// cutTarget is the kind of operation a power cut is placed among.
type cutTarget string

const (
	cutAny         cutTarget = "any"             // any operation of the workload
	cutRolloutSync cutTarget = "rollout_sync"    // a rollout's fdatasync
	cutRelease     cutTarget = "segment_release" // a journal segment's rename (reuse) or removal
	cutReplay      cutTarget = "replay"          // an operation of the next open, which replays the journal
)

var cutTargets = []cutTarget{cutAny, cutAny, cutRolloutSync, cutRelease, cutReplay}

func (t cutTarget) matches(o vfs.Op, name string) bool {
	inJournal := strings.Contains(name, "/"+rjournal.Dir+"/")
	switch t {
	case cutRolloutSync:
		return o == vfs.OpSync && !inJournal && strings.Contains(name, "/threads/")
	case cutRelease:
		return (o == vfs.OpRename || o == vfs.OpRemove) && inJournal
	}
	return true
}

// cutDuringOpen opens the workspace a power cut left, cutting the power
// again at a random operation of the open (its journal replay, its
// read-repair), and returns the file system as that second cut left it
// (or as the open left it, if it finished first).
func cutDuringOpen(ctx context.Context, c *checker, m memWorkspace, rng *rand.Rand, logger *slog.Logger) *vfs.MemFS {
	mem := m.mem
	cutAt := 1 + rng.Int64N(30) // an open takes a few dozen operations
	crashRng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
	var n atomic.Int64
	var once sync.Once
	var crashed atomic.Pointer[vfs.MemFS]
	ffs := &vfs.FaultFS{FS: mem, Hook: func(o vfs.Op, _ string) error {
		if o == vfs.OpOpen {
			return nil
		}
		if n.Add(1) == cutAt {
			once.Do(func() { crashed.Store(mem.Crash(crashRng, false)) })
		}
		if crashed.Load() != nil {
			return errCrash
		}
		return nil
	}}
	db, err := wsRef{fs: ffs, dir: memDir, statePath: m.statePath, scratch: m.scratch, logger: logger}.open(ctx, m.statePath)
	if err == nil {
		_ = db.Close()
	}
	if out := crashed.Load(); out != nil {
		c.count("replay_cut", 1)
		return out
	}
	return mem
}
