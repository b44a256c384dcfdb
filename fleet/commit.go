package fleet

import (
	"context"
	"crypto/sha256"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// An entry is one frame submitted to a commit round.
type entry struct {
	t         *Thread
	off       int64
	seq       uint64
	epoch     int64
	data      []byte
	res       rollout.AppendResult
	submitted time.Time

	done chan struct{}
	err  error
}

// Wait returns once the frame's round is over: nil if it committed.
func (e *entry) Wait() error {
	<-e.done
	return e.err
}

// The committer runs one commit round at a time: every frame submitted
// since the last round went out goes to PostgreSQL in one statement. One
// round in flight means a thread's frames commit in order, and a round
// that fails takes with it the later frames of its threads (fail), so no
// frame is ever committed after a gap. (Several rounds in flight, a
// thread in one at a time, measured worse on two cores shared with
// PostgreSQL: 0.8x the records/s with 2 and 0.6x with 4, the rounds
// smaller and PostgreSQL's work per frame larger; docs/BENCHMARKS.md.)
// Before a round goes out, gather may hold it back for the threads of
// the last round to submit again: it delays the round, never reorders
// the queue, and a round still takes the queue's head.
type committer struct {
	l *Log

	mu     sync.Mutex
	cond   sync.Cond
	queue  []*entry
	closed bool
	exited chan struct{}
	// The gather (mu): rounds taken and the last one finished; the threads
	// of the round in flight (flying), those of the round finished (want)
	// and how many of these have submitted since (back); when it finished;
	// patient says the threads of a finished round came back in time.
	taken, finished uint64
	flying          int
	want, back      int
	ended           time.Time
	patient         bool

	rounds, frames, bytes, retries, failed atomic.Int64
}

// Metrics counts a Log's commit rounds.
type Metrics struct {
	Rounds  int64 `json:"rounds"`  // commit rounds that committed something (an append with other writes is one)
	Frames  int64 `json:"frames"`  // frames committed
	Bytes   int64 `json:"bytes"`   // of frames committed
	Retries int64 `json:"retries"` // attempts repeated after an unknown outcome
	Failed  int64 `json:"failed"`  // frames not acknowledged
}

// Metrics returns the commit counters.
func (l *Log) Metrics() Metrics {
	c := l.com
	return Metrics{Rounds: c.rounds.Load(), Frames: c.frames.Load(), Bytes: c.bytes.Load(), Retries: c.retries.Load(), Failed: c.failed.Load()}
}

func newCommitter(l *Log) *committer {
	c := &committer{l: l, exited: make(chan struct{})}
	c.cond.L = &c.mu
	return c
}

func (c *committer) submit(e *entry) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return &rollout.ClosedError{What: "fleet: log"}
	}
	e.submitted = time.Now()
	c.queue = append(c.queue, e)
	c.cameBack(e.t, e.submitted)
	c.cond.Signal()
	return nil
}

// cameBack counts a thread of the round last finished that submits again.
// The caller holds c.mu.
func (c *committer) cameBack(t *Thread, at time.Time) {
	if t.round != c.finished || t.back == c.finished {
		return
	}
	t.back = c.finished
	c.back++
	if !c.patient && c.back >= c.want && at.Sub(c.ended) <= c.l.opts.RoundWindow {
		c.patient = true // they came back within a window
	}
}

// gather waits, up to Options.RoundWindow, for the threads of the round
// just committed to submit again before the next round goes out. A host
// whose appenders each wait for their ack before their next append
// otherwise commits its threads in two alternating halves: the round
// that goes out as one half's acks are delivered holds only the other
// half, which queued meanwhile. The wait is skipped once a window passed
// without them (appenders that do not come back at once), until a round's
// threads all come back within one again. The caller holds c.mu.
func (c *committer) gather() {
	w := c.l.opts.RoundWindow
	if w <= 0 || !c.patient || c.back >= c.want {
		return
	}
	deadline := time.Now().Add(w)
	timer := time.AfterFunc(w, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	for c.back < c.want && !c.closed && time.Now().Before(deadline) {
		c.cond.Wait()
	}
	timer.Stop()
	c.patient = c.back >= c.want
}

// close lets the rounds queued finish, then stops.
func (c *committer) close() {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	<-c.exited
}

func (c *committer) run() {
	defer close(c.exited)
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.closed {
			c.cond.Wait()
		}
		if len(c.queue) == 0 {
			c.mu.Unlock()
			return
		}
		c.gather()
		n, size := 0, 0
		for n < len(c.queue) && (n == 0 || size+len(c.queue[n].data) <= c.l.opts.MaxRoundBytes) {
			size += len(c.queue[n].data)
			n++
		}
		round := make([]*entry, n)
		copy(round, c.queue)
		c.queue = append(c.queue[:0], c.queue[n:]...)
		c.taken++
		c.flying = 0
		for _, e := range round {
			if e.t.round != c.taken {
				e.t.round = c.taken
				c.flying++
			}
		}
		c.mu.Unlock()
		c.commit(round)
		c.mu.Lock()
		c.finished, c.want, c.back, c.ended = c.taken, c.flying, 0, time.Now()
		for _, e := range c.queue { // submitted while the round was in flight
			c.cameBack(e.t, c.ended)
		}
		c.mu.Unlock()
		c.l.note.noteRound(round)
	}
}

// commit makes one round durable, retrying a commit of unknown outcome
// until the oldest frame's CommitTimeout.
func (c *committer) commit(round []*entry) {
	deadline := round[0].submitted.Add(c.l.opts.CommitTimeout)
	pending := round
	backoff := 10 * time.Millisecond
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := c.attempt(ctx, pending)
		cancel()
		pending = unsettled(pending)
		if err == nil || len(pending) == 0 {
			return
		}
		if !isUnavailable(err) {
			// A definite failure: the statement rolled back.
			c.fail(pending, errors.Mark(errors.Wrap(err, "fleet: commit"), rollout.ErrNotDurable), false)
			return
		}
		if time.Now().Add(backoff).After(deadline) {
			c.fail(pending, unavailable(err, "commit"), false)
			return
		}
		c.retries.Add(1)
		time.Sleep(backoff)
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// attempt inserts the frames and settles each: committed (done), or
// fenced (failed). An error leaves the frames it did not settle as they
// were, for the next attempt.
func (c *committer) attempt(ctx context.Context, pending []*entry) error {
	committed, err := c.insert(ctx, pending)
	if err != nil {
		return err
	}
	var rest []*entry
	n, size := int64(0), int64(0)
	for _, e := range pending {
		if committed[frameKey{e.t.tid, e.off}] {
			n, size = n+1, size+int64(len(e.data))
			e.t.committed(e)
			close(e.done)
		} else {
			rest = append(rest, e)
		}
	}
	if n > 0 {
		c.rounds.Add(1)
		c.frames.Add(n)
		c.bytes.Add(size)
	}
	if len(rest) == 0 {
		return nil
	}
	// Not inserted: there already (an earlier attempt of this round), or
	// refused by the fence.
	return c.verify(ctx, rest)
}

type frameKey struct{ tid, off int64 }

// insert inserts the round's frames whose threads pass the fence, and
// returns the frames it inserted.
func (c *committer) insert(ctx context.Context, round []*entry) (map[frameKey]bool, error) {
	var etid, eepoch, einc []int64
	seen := map[int64]bool{}
	ftid := make([]int64, len(round))
	foff := make([]int64, len(round))
	fseq := make([]int64, len(round))
	fepoch := make([]int64, len(round))
	fdata := make([][]byte, len(round))
	for i, e := range round {
		if !seen[e.t.tid] {
			seen[e.t.tid] = true
			etid, eepoch, einc = append(etid, e.t.tid), append(eepoch, e.epoch), append(einc, e.t.inc)
		}
		ftid[i], foff[i], fseq[i], fepoch[i], fdata[i] = e.t.tid, e.off, int64(e.seq), e.epoch, e.data
	}
	rows, err := c.l.pool.Query(ctx, `WITH e AS (
			SELECT * FROM unnest($3::bigint[], $4::bigint[], $5::bigint[]) AS e(tid, epoch, inc)
		), ok AS (
			SELECT th.tid FROM rolloutdb.threads th JOIN e ON e.tid = th.tid
			WHERE th.epoch = e.epoch AND th.owner = $2 AND th.owner_inc = e.inc
			  AND EXISTS (SELECT 1 FROM rolloutdb.hosts h WHERE h.ws = $1 AND h.host = $2 AND h.incarnation = e.inc AND h.lease_until > now())
			FOR KEY SHARE OF th
		)
		INSERT INTO rolloutdb.frames (tid, off, seq, epoch, data)
		SELECT f.tid, f.off, f.seq, f.epoch, f.data
		FROM unnest($6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bytea[]) AS f(tid, off, seq, epoch, data)
		JOIN ok ON ok.tid = f.tid
		ON CONFLICT (tid, off) DO NOTHING
		RETURNING tid, off`,
		c.l.ws, c.l.opts.Host, etid, eepoch, einc, ftid, foff, fseq, fepoch, fdata)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := make(map[frameKey]bool, len(round))
	for rows.Next() {
		var k frameKey
		if err := rows.Scan(&k.tid, &k.off); err != nil {
			return nil, err
		}
		got[k] = true
	}
	return got, rows.Err()
}

// verify settles frames the insert did not insert: one already there with
// the same bytes committed (an earlier attempt of the round did it); one
// missing was refused by the fence, and one different is another writer's.
// Both of those fail their thread for good (ErrFenced).
func (c *committer) verify(ctx context.Context, rest []*entry) error {
	tids := make([]int64, len(rest))
	offs := make([]int64, len(rest))
	for i, e := range rest {
		tids[i], offs[i] = e.t.tid, e.off
	}
	rows, err := c.l.pool.Query(ctx, `SELECT x.tid, x.off, sha256(f.data)
		FROM unnest($1::bigint[], $2::bigint[]) AS x(tid, off)
		LEFT JOIN rolloutdb.frames f ON f.tid = x.tid AND f.off = x.off`, tids, offs)
	if err != nil {
		return err
	}
	sums := map[frameKey][]byte{}
	for rows.Next() {
		var k frameKey
		var sum []byte
		if err := rows.Scan(&k.tid, &k.off, &sum); err != nil {
			rows.Close()
			return err
		}
		sums[k] = sum
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var fenced []*entry
	for _, e := range rest {
		sum, ok := sums[frameKey{e.t.tid, e.off}]
		if ok && sum != nil {
			if want := sha256.Sum256(e.data); string(sum) == string(want[:]) {
				c.frames.Add(1)
				c.bytes.Add(int64(len(e.data)))
				e.t.committed(e)
				close(e.done) // committed
				continue
			}
		}
		fenced = append(fenced, e)
	}
	for _, e := range fenced {
		c.fail([]*entry{e}, errors.WithHint(errors.Wrapf(ErrFenced, "thread %s: frame at %d not written", e.t.id, e.off),
			"the thread was taken over by another host, or this host's lease expired: open it again"), true)
	}
	return nil
}

// unsettled returns the entries not yet failed or closed.
func unsettled(es []*entry) []*entry {
	var out []*entry
	for _, e := range es {
		if e.err == nil {
			select {
			case <-e.done:
			default:
				out = append(out, e)
			}
		}
	}
	return out
}

// fail ends entries with err, and with them every later frame of their
// threads still queued: nothing of a thread commits after a frame that did
// not. fenced marks the threads fenced for good; otherwise they are in
// doubt until their next append resolves them.
func (c *committer) fail(es []*entry, err error, fenced bool) {
	threads := map[*Thread]bool{}
	for _, e := range es {
		threads[e.t] = true
	}
	// The threads are in doubt (or fenced) before any waiter hears of the
	// failure: an appender that retries at once must find the thread to
	// resolve, not append after the frame that failed.
	for t := range threads {
		t.failed(err, fenced)
	}
	c.mu.Lock()
	kept := c.queue[:0]
	var later []*entry
	for _, e := range c.queue {
		if threads[e.t] {
			later = append(later, e)
		} else {
			kept = append(kept, e)
		}
	}
	c.queue = kept
	c.mu.Unlock()
	for _, e := range slices.Concat(es, later) {
		if e.err == nil {
			select {
			case <-e.done: // committed already
				continue
			default:
			}
			e.err = err
			c.failed.Add(1)
			close(e.done)
		}
	}
}
