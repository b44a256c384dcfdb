package projection

import (
	"context"
	"database/sql"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// Batch is one appended frame, as the writer acknowledged it.
type Batch struct {
	Thread string
	// Location is where the rollout is: LocationActive (default) or
	// LocationArchived.
	Location string
	// Offset, End and DataCRC are the frame's offset, the offset just past
	// it and its payload CRC (rollout.AppendResult).
	Offset, End int64
	DataCRC     uint32
	// FileID is the rollout's file id, given with a thread's first frame
	// (its header, seq 1): the projector then makes the thread's row from
	// the frame, without reading the rollout. Zero otherwise.
	FileID uint64
	// Records are the frame's records with the Seq and Time the writer
	// gave them. The projector keeps them until applied: they must not be
	// changed after Enqueue.
	Records []rollout.Record

	ticket uint64 // the Enqueue's (what Flush waits for)
	at     int64  // when it was enqueued (unix ns)
}

// pendingThread is what the projector holds for one thread.
type pendingThread struct {
	batches []Batch
	catchUp bool // too much queued: read the rollout instead
	loc     string
	// minTicket is the least ticket of what it holds, dropped batches
	// included (an overflow to catchUp): Flush waits for it.
	minTicket uint64
}

// note counts a batch's ticket in the thread's least.
func (pt *pendingThread) note(ticket uint64) {
	if pt.minTicket == 0 || ticket < pt.minTicket {
		pt.minTicket = ticket
	}
}

// projector applies enqueued batches on its own goroutine, everything
// pending at once in one transaction: the batch size grows with the load,
// and a commit (an fsync) is shared by every append that waited for it.
type projector struct {
	s *Store

	mu          sync.Mutex
	cond        *sync.Cond
	pending     map[string]*pendingThread
	queued      int    // records pending
	inflight    int    // records taken by the cycle being applied
	stalls      uint64 // Enqueues that waited for the lag to drop below MaxLag
	stalled     time.Duration
	since       time.Time // when the oldest pending record was queued
	flightSince time.Time // when the oldest record of the cycle in flight was
	appliedRecs int64
	cycles      int64
	enqueued    uint64 // tickets handed out
	applied     uint64 // tickets applied (or given up on)
	urgent      bool   // a Flush waits: apply now, do not linger
	idle        bool   // the projector waits for work
	lingering   bool   // the projector waits for more of a small batch
	lingerLimit int    // of lingerLimit records
	closed      bool
	done        chan struct{}
}

func newProjector(s *Store) *projector {
	p := &projector{s: s, pending: map[string]*pendingThread{}, done: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// Enqueue hands an appended frame to the projector. It returns at once
// while the projector holds fewer than Options.MaxLag records unapplied,
// and waits for it otherwise. The projection may lag; reads catch up from
// the rollout when it does.
func (s *Store) Enqueue(b Batch) {
	if len(b.Records) == 0 {
		return
	}
	if err := rollout.ValidateThreadID(b.Thread); err != nil {
		s.opts.Logger.Error("rolloutdb: projector given an invalid thread id; ignored", "err", err.Error())
		return
	}
	if b.Location == "" {
		b.Location = LocationActive
	}
	b.at = noteAppend()
	p := s.proj
	p.mu.Lock()
	defer p.mu.Unlock()
	if lim := s.opts.MaxLag; lim > 0 && !p.closed && p.queued+p.inflight >= lim {
		// The frame is durable already; what waits is its caller's next
		// append. The projector applies everything it holds at once, so
		// the wait is at most two of its cycles.
		t0 := time.Now()
		p.stalls++
		p.urgent = true
		p.cond.Broadcast() // the projector, lingering: apply now
		for !p.closed && p.queued+p.inflight >= lim {
			p.cond.Wait() // the projector broadcasts after each cycle
		}
		p.stalled += time.Since(t0)
	}
	if p.closed {
		return
	}
	p.enqueued++
	b.ticket = p.enqueued
	if p.queued == 0 && len(p.pending) == 0 {
		p.since = time.Unix(0, b.at)
	}
	pt := p.pending[b.Thread]
	if pt == nil {
		pt = &pendingThread{}
		p.pending[b.Thread] = pt
	}
	pt.loc = b.Location
	pt.note(b.ticket)
	if !pt.catchUp {
		if p.queued+len(b.Records) > s.opts.QueueLimit {
			p.queued -= countRecords(pt.batches)
			pt.batches, pt.catchUp = nil, true
		} else {
			pt.batches = append(pt.batches, b)
			p.queued += len(b.Records)
		}
	}
	// Wake the projector only when it has something to decide: it waits
	// for its first record, or lingers until the batch is large enough.
	// (One wake per append would cost the appenders a scheduler round
	// trip each.)
	if p.idle || (p.lingering && p.queued >= p.lingerLimit) {
		p.cond.Broadcast()
	}
}

func countRecords(bs []Batch) int {
	n := 0
	for _, b := range bs {
		n += len(b.Records)
	}
	return n
}

// Settle waits until the projector and the search index have applied
// everything handed to them before it (reads need only Flush: the index
// may lag, and Search catches it up itself).
func (s *Store) Settle(ctx context.Context) error {
	if err := s.Flush(ctx); err != nil {
		return err
	}
	return s.idx.flush(ctx)
}

// Flush waits until everything enqueued before it was applied (or failed
// and left to read-repair).
func (s *Store) Flush(ctx context.Context) error {
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
		p.pending, p.inflight = map[string]*pendingThread{}, taken
		p.queued -= taken
		p.flightSince = p.since
		p.mu.Unlock()

		if err := p.apply(work); err != nil {
			p.s.guard(&err)
			// Nothing is lost: the rollouts hold it all, and the rows
			// left behind are caught up by the next read.
			p.s.opts.Logger.Warn("rolloutdb: projector could not apply appended records; reads will catch up from the rollouts", "err", err.Error())
		}
		p.mu.Lock()
		p.cycles++
		if len(p.pending) > 0 {
			// The lag is the oldest record queued since.
			oldest := int64(math.MaxInt64)
			for _, pt := range p.pending {
				for _, b := range pt.batches {
					oldest = min(oldest, b.at)
				}
			}
			if oldest != math.MaxInt64 {
				p.since = time.Unix(0, oldest)
			}
		}
		p.appliedRecs += int64(p.inflight)
		p.applied, p.inflight = ticket, 0
		p.cond.Broadcast()
		p.mu.Unlock()
	}
}

// lingerRecords is the batch that is applied at once, without lingering.
// While appends arrive (see gate.go) the projector lingers longer, for
// hotLingerRecords: a batch then carries many records of each thread, and
// what is paid per thread and per transaction is paid less often. No read
// waits for it: Flush cuts a linger short.
const (
	lingerRecords    = 256
	hotLinger        = 100 * time.Millisecond
	hotLingerRecords = 4096
)

// linger (mu held) waits a little for more appends when the batch is
// small: a host streaming items one by one would otherwise pay a state.db
// transaction for each. A Flush (a read), an Enqueue held by MaxLag, or
// Close cuts it short.
func (p *projector) linger() {
	defer func() { p.urgent = false }()
	d, limit := p.s.opts.Linger, lingerRecords
	if d > 0 && appendsHot() {
		d, limit = max(d, hotLinger), hotLingerRecords
	}
	if d <= 0 || p.urgent || p.closed || p.queued >= limit {
		return
	}
	deadline := time.Now().Add(d)
	t := time.AfterFunc(d, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer t.Stop()
	p.lingering, p.lingerLimit = true, limit
	for !p.urgent && !p.closed && p.queued < limit && time.Now().Before(deadline) {
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

// apply applies a cycle's work in one transaction.
func (p *projector) apply(work map[string]*pendingThread) error {
	ctx := context.Background()
	ids := make([]string, 0, len(work))
	for id := range work {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	done := bgEnter()
	defer done()
	return p.s.write(ctx, func(tx *sql.Tx) error {
		for _, id := range ids {
			if err := p.s.applyThread(ctx, tx, id, work[id]); err != nil {
				return err
			}
		}
		return nil
	})
}

// applyThread applies one thread's queued frames from memory while they
// continue the projection exactly; anything else (a row that is missing
// or elsewhere, an overflowed queue, a frame that does not follow the last
// applied) is caught up from the rollout.
//
// Frames of one thread arrive in frame order (the facade's ordered
// publish), so a gap is never a frame still on its way: it is one another
// writer wrote (another process, an earlier handle), and only the rollout
// has it.
func (s *Store) applyThread(ctx context.Context, tx *sql.Tx, id string, pt *pendingThread) (err error) {
	f := rolloutFile{id: id, location: pt.loc}
	if pt.catchUp {
		_, err := s.catchUp(ctx, tx, f)
		return ignoreMissing(err)
	}
	bs := pt.batches
	// The row as this store last committed it, if no other process has
	// committed since: it needs neither reading nor its anchor checking
	// (the frames it applied are this process's own, acknowledged).
	th := s.takeRow(id)
	if th == nil {
		if th, err = s.loadThread(ctx, tx, id); err != nil {
			return err
		}
		if th != nil && th.Location == pt.loc {
			// The row continues from its anchor only if the file still
			// holds it (after a crash that lost frames already projected,
			// it does not).
			if ok, err := s.stillAnchored(f, th); err != nil || !ok {
				th = nil
			}
		}
	}
	if th == nil && created(bs[0]) {
		// A thread this process created: its first frame is all it holds.
		tid, err := s.deleteThreadRows(ctx, tx, id, true)
		if err != nil {
			return err
		}
		th = &threadRow{TID: tid, ID: id, Location: pt.loc, RolloutPath: f.rel(), FileID: bs[0].FileID,
			ProjectedOffset: rollout.FileHeaderSize, FileSize: rollout.FileHeaderSize}
		return s.applyBatches(ctx, tx, f, th, bs, true)
	}
	if th == nil || th.Location != pt.loc || th.FileID == 0 || strings.HasSuffix(th.RolloutPath, rollout.ColdExt) {
		_, err := s.catchUp(ctx, tx, f)
		return ignoreMissing(err)
	}
	return s.applyBatches(ctx, tx, f, th, bs, false)
}

// created reports whether b is the header frame of a thread, given with
// its file id.
func created(b Batch) bool {
	return b.FileID != 0 && b.Offset == rollout.FileHeaderSize && len(b.Records) > 0 &&
		b.Records[0].Seq == 1 && b.Records[0].Kind == rollout.KindThreadOpened
}

// applyBatches applies acknowledged frames that continue th (fresh: a row
// made for a new thread), catching up from the rollout at a gap.
func (s *Store) applyBatches(ctx context.Context, tx *sql.Tx, f rolloutFile, th *threadRow, bs []Batch, fresh bool) error {
	a := s.newApplier(ctx, tx, th, fresh)
	a.acked = true
	for _, b := range bs {
		switch {
		case b.End <= th.ProjectedOffset:
			continue // read-repair got there first (the anchor vouches for it)
		case b.Offset != th.ProjectedOffset || b.Records[0].Seq != th.ProjectedSeq+1:
			// The applier's turn in progress goes to the catch-up through
			// the transaction's caches (takeTurnCache): a long open turn
			// is not loaded again from its rows.
			if err := a.finish(); err != nil {
				return err
			}
			_, err := s.catchUp(ctx, tx, f)
			return ignoreMissing(err)
		}
		for _, rec := range b.Records {
			if err := a.record(b.Offset, rec); err != nil {
				return err
			}
		}
		if th.FileSize == th.ProjectedOffset {
			th.FileSize = b.End // the file ended where the projection did
		}
		th.ProjectedOffset = b.End
		th.AnchorOffset, th.AnchorSeq, th.AnchorCRC = b.Offset, b.Records[0].Seq, b.DataCRC
	}
	return a.finish()
}

// stillAnchored checks a row's anchor against its rollout.
func (s *Store) stillAnchored(f rolloutFile, th *threadRow) (bool, error) {
	file, err := s.opts.FS.Open(filepath.Join(s.opts.Root, filepath.FromSlash(f.rel())))
	if err != nil {
		return false, err
	}
	defer file.Close()
	return anchored(file, th), nil
}

// ignoreMissing drops an error saying the rollout does not exist: a rollout
// deleted or moved since it was appended to is found by the next read.
func ignoreMissing(err error) error {
	if vfs.IsNotExist(err) {
		return nil
	}
	return err
}

// Metrics is a snapshot of the projector's and the read path's counters.
type Metrics struct {
	// LagRecords are acknowledged records not yet applied; LagTime how
	// long the oldest of them has waited.
	LagRecords int           `json:"lag_records"`
	LagTime    time.Duration `json:"lag_time"`
	// Applied records, in Cycles transactions.
	Applied int64 `json:"applied"`
	Cycles  int64 `json:"cycles"`
	// Stalls counts appends that waited for the projector (MaxLag), for
	// Stalled in all.
	Stalls  uint64        `json:"stalls"`
	Stalled time.Duration `json:"stalled"`
	// CatchUps counts threads brought up from their rollouts rather than
	// from queued frames: read-repair (a row behind or missing), the
	// projector's own (a gap, an overflowed queue), rebuilds.
	CatchUps int64 `json:"catch_ups"`
	// Damaged counts records and regions the projection found damaged or
	// rejected (each is also a diagnostic of its thread).
	Damaged int64 `json:"damaged"`
	// Rebuild is the progress of the rebuild running, if any.
	Rebuild *RebuildProgress `json:"rebuild,omitempty"`
}

// Metrics returns the projector's counters.
func (s *Store) Metrics() Metrics {
	p := s.proj
	p.mu.Lock()
	m := Metrics{LagRecords: p.queued + p.inflight, Applied: p.appliedRecs, Cycles: p.cycles, Stalls: p.stalls, Stalled: p.stalled}
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
