package pgindex

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The applier's queue is projection's projector (projection/projector.go)
// with the same contract: Enqueue returns at once while fewer than
// MaxLag records wait, a cycle applies everything pending in one
// transaction (one commit shared by every frame that waited for it),
// and Settle waits for what was enqueued before it. A failure never
// fails an append: the log is the authority, and the next read catches
// the rows up from it.

// pendingThread is what the applier holds for one thread.
type pendingThread struct {
	batches []projection.Batch
	catchUp bool // too much queued: read the Source instead
	loc     string
}

type projector struct {
	s *Store

	mu          sync.Mutex
	cond        *sync.Cond
	pending     map[string]*pendingThread
	queued      int // records pending
	inflight    int // records taken by the cycle being applied
	stalls      uint64
	stalled     time.Duration
	since       time.Time // when the oldest pending record was queued
	flightSince time.Time
	oldest      map[string]time.Time // per thread pending, when its first batch came
	appliedRecs int64
	cycles      int64
	enqueued    uint64 // tickets handed out
	applied     uint64 // tickets applied (or given up on)
	urgent      bool   // a Settle waits: apply now, do not linger
	idle        bool
	lingering   bool
	closed      bool
	done        chan struct{}
}

func newProjector(s *Store) *projector {
	p := &projector{s: s, pending: map[string]*pendingThread{}, oldest: map[string]time.Time{}, done: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// Enqueue hands the index one published frame of this host, in frame
// order per thread. It returns at once while the applier holds fewer
// than Options.MaxLag records unapplied, and waits for it otherwise. A
// batch whose FileID is set is a thread's header frame: the thread's row
// is made from it without reading the log.
func (s *Store) Enqueue(b projection.Batch) {
	if len(b.Records) == 0 {
		return
	}
	if err := rollout.ValidateThreadID(b.Thread); err != nil {
		s.opts.Logger.Error("rolloutdb: fleet index given an invalid thread id; ignored", "err", err.Error())
		return
	}
	if b.Location == "" {
		b.Location = projection.LocationActive
	}
	now := time.Now()
	p := s.proj
	p.mu.Lock()
	defer p.mu.Unlock()
	if lim := s.opts.MaxLag; lim > 0 && !p.closed && p.queued+p.inflight >= lim {
		// The frame is durable already; what waits is its caller's next
		// append. A cycle applies everything it holds, so the wait is at
		// most two cycles.
		t0 := time.Now()
		p.stalls++
		p.urgent = true
		p.cond.Broadcast()
		for !p.closed && p.queued+p.inflight >= lim {
			p.cond.Wait()
		}
		p.stalled += time.Since(t0)
	}
	if p.closed {
		return
	}
	p.enqueued++
	if p.queued == 0 && len(p.pending) == 0 {
		p.since = now
	}
	pt := p.pending[b.Thread]
	if pt == nil {
		pt = &pendingThread{}
		p.pending[b.Thread] = pt
		p.oldest[b.Thread] = now
	}
	pt.loc = b.Location
	if !pt.catchUp {
		if p.queued+len(b.Records) > s.opts.QueueLimit {
			p.queued -= countRecords(pt.batches)
			pt.batches, pt.catchUp = nil, true
		} else {
			pt.batches = append(pt.batches, b)
			p.queued += len(b.Records)
		}
	}
	if p.idle || (p.lingering && p.queued >= lingerRecords) {
		p.cond.Broadcast()
	}
}

func countRecords(bs []projection.Batch) int {
	n := 0
	for _, b := range bs {
		n += len(b.Records)
	}
	return n
}

// Settle waits until everything enqueued before it was applied (or
// failed, and left to the next read).
func (s *Store) Settle(ctx context.Context) error {
	if err := s.live(); err != nil {
		return err
	}
	p := s.proj
	p.mu.Lock()
	defer p.mu.Unlock()
	target := p.enqueued
	if p.applied < target {
		p.urgent = true
		p.cond.Broadcast()
	}
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	for p.applied < target && !p.closed {
		if err := ctx.Err(); err != nil {
			return err
		}
		p.cond.Wait()
	}
	return nil
}

// lingerRecords is the batch that is applied at once, without lingering.
const lingerRecords = 256

func (p *projector) run() {
	defer close(p.done)
	for {
		p.mu.Lock()
		for len(p.pending) == 0 && !p.closed {
			p.idle = true
			p.cond.Wait()
		}
		p.idle = false
		if len(p.pending) == 0 && p.closed {
			p.mu.Unlock()
			return
		}
		p.linger()
		work, ticket := p.pending, p.enqueued
		taken := 0
		for _, pt := range work {
			taken += countRecords(pt.batches)
		}
		p.pending, p.oldest, p.inflight = map[string]*pendingThread{}, map[string]time.Time{}, taken
		p.queued -= taken
		p.flightSince = p.since
		p.mu.Unlock()

		if err := p.apply(work); err != nil {
			p.s.opts.Logger.Warn("rolloutdb: fleet index could not apply published frames; reads will catch up from the log", "err", err.Error())
		}
		p.mu.Lock()
		p.cycles++
		oldest := time.Time{}
		for _, at := range p.oldest {
			if oldest.IsZero() || at.Before(oldest) {
				oldest = at
			}
		}
		if !oldest.IsZero() {
			p.since = oldest
		}
		p.appliedRecs += int64(p.inflight)
		p.applied, p.inflight = ticket, 0
		p.cond.Broadcast()
		p.mu.Unlock()
	}
}

// linger (mu held) waits a little for more frames when the batch is
// small. A Settle, an Enqueue held by MaxLag, or Close cuts it short.
func (p *projector) linger() {
	defer func() { p.urgent = false }()
	d := p.s.opts.Linger
	if d <= 0 || p.urgent || p.closed || p.queued >= lingerRecords {
		return
	}
	deadline := time.Now().Add(d)
	t := time.AfterFunc(d, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer t.Stop()
	p.lingering = true
	for !p.urgent && !p.closed && p.queued < lingerRecords && time.Now().Before(deadline) {
		p.cond.Wait()
	}
	p.lingering = false
}

func (p *projector) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	<-p.done
}

// chunkTimeout bounds a transaction of the applier.
const chunkTimeout = time.Minute

// applyChunk bounds the threads one cycle's transaction applies: their
// rows stay locked until it commits.
const applyChunk = 256

// apply applies a cycle's work, in transactions of up to applyChunk
// threads in id order (the order every transaction locks rows in, so
// that two hosts' cycles do not deadlock).
func (p *projector) apply(work map[string]*pendingThread) error {
	ids := make([]string, 0, len(work))
	for id := range work {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var failed error
	for chunk := range slices.Chunk(ids, applyChunk) {
		// A chunk that cannot finish (the database gone) fails, rather
		// than hold the appends MaxLag waits on: what it held is caught
		// up by the next read.
		ctx, cancel := context.WithTimeout(context.Background(), chunkTimeout)
		err := p.s.withSlot(ctx, func() error {
			return p.s.write(ctx, "apply published frames", func(t *txn) error {
				locs := make([]string, len(chunk))
				for i, id := range chunk {
					locs[i] = work[id].loc
				}
				rows, err := p.s.lockRows(ctx, t, chunk, locs)
				if err != nil {
					return err
				}
				for _, id := range chunk {
					if err := p.s.applyThread(ctx, t, rows[id], work[id]); err != nil {
						return err
					}
				}
				return nil
			})
		})
		cancel()
		if err != nil {
			failed = err
		}
	}
	return failed
}

// Metrics returns the applier's counters, in projection's terms.
func (s *Store) Metrics() projection.Metrics {
	p := s.proj
	p.mu.Lock()
	m := projection.Metrics{LagRecords: p.queued + p.inflight, Applied: p.appliedRecs, Cycles: p.cycles, Stalls: p.stalls, Stalled: p.stalled}
	oldest := p.since
	if p.inflight > 0 {
		oldest = p.flightSince
	}
	if m.LagRecords > 0 && !oldest.IsZero() {
		m.LagTime = time.Since(oldest)
	}
	p.mu.Unlock()
	m.CatchUps, m.Damaged = s.catchUps.Load(), s.damaged.Load()
	if r := s.progress.Load(); r != nil {
		cp := *r
		m.Rebuild = &cp
	}
	return m
}
