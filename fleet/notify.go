package fleet

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// The notifier tells the workspace's other hosts (and this one's
// followers) what this host committed: one notice after each commit round
// that committed frames, and one after each lifecycle change, sent from a
// connection of its own, never from the append's transaction (a pending
// NOTIFY takes a lock global to the database at commit, which would
// serialise every host's commit rounds).
//
// It never slows a commit round: the committer only records the round's
// threads and their new ends (noteRound), under a lock held for that, and
// the notifier's goroutine sends. While a notice is in flight, what later
// rounds record is coalesced, one end per thread, into the next notice.
// A notice that fails is kept, coalesced with what comes after, and sent
// again after a pause; it never fails an append (followers elsewhere poll
// meanwhile).
type notifier struct {
	l    *Log
	conn *pgx.Conn // the notifier's goroutine only

	pending struct {
		sync.Mutex
		ends    map[int64]int64 // tid -> end, since the last notice
		changes []change        // lifecycle changes, in order
		all     bool            // too much to tell: "*"
	}
	wake   chan struct{} // capacity 1: something is pending
	stop   chan struct{}
	exited chan struct{}

	sent, failed atomic.Int64
	warned       bool // the notifier's goroutine: the outage was logged
}

// FollowMetrics counts a Log's notices and its listening connection.
type FollowMetrics struct {
	Notices        int64 `json:"notices"`         // notifications sent
	NoticeFailures int64 `json:"notice_failures"` // sends that failed (what they held went in a later one)
	Listens        int64 `json:"listens"`         // LISTENs begun: the first, then one per new connection
	ListensLost    int64 `json:"listens_lost"`    // listening connections that broke or went silent
	Received       int64 `json:"received"`        // notifications received
	Reads          int64 `json:"reads"`           // queries of frames by followers (those of a thread at one place share one)
}

// FollowMetrics returns the counters of notices sent and received.
func (l *Log) FollowMetrics() FollowMetrics {
	return FollowMetrics{Notices: l.note.sent.Load(), NoticeFailures: l.note.failed.Load(),
		Listens: l.listens.Load(), ListensLost: l.listenLost.Load(), Received: l.received.Load(),
		Reads: l.reads.Load()}
}

// maxNotifyBackoff bounds the pause between a failed notice and the next
// try.
const maxNotifyBackoff = time.Second

// maxPendingThreads bounds the threads a notifier holds while it cannot
// send; past it, the next notice is "*".
const maxPendingThreads = 4096

func newNotifier(l *Log) *notifier {
	n := &notifier{l: l, wake: make(chan struct{}, 1), stop: make(chan struct{}), exited: make(chan struct{})}
	n.pending.ends = map[int64]int64{}
	return n
}

// noteRound records the frames a commit round committed. The committer
// calls it after each round, with every entry of the round: those that
// committed have no error (the committer settles every entry, in its own
// goroutine, before the round is over).
func (n *notifier) noteRound(round []*entry) {
	if n.l.opts.NoNotify {
		return
	}
	p := &n.pending
	p.Lock()
	for _, e := range round {
		if e.err == nil {
			// Not e.res: WritePrepared sets it after the submit.
			p.ends[e.t.tid] = max(p.ends[e.t.tid], e.off+int64(len(e.data)))
		}
	}
	n.overflowLocked()
	p.Unlock()
	n.signal()
}

// noteChange records a lifecycle change, or (changeAppended) a thread's
// new end after its frames were cut back.
func (n *notifier) noteChange(c change) {
	if n.l.opts.NoNotify {
		return
	}
	p := &n.pending
	p.Lock()
	if c.kind == changeAppended {
		p.ends[c.tid] = c.end
	} else {
		p.changes = append(p.changes, c)
	}
	n.overflowLocked()
	p.Unlock()
	n.signal()
}

func (n *notifier) overflowLocked() {
	p := &n.pending
	if len(p.ends)+len(p.changes) > maxPendingThreads {
		p.all, p.changes = true, nil
		clear(p.ends)
	}
}

func (n *notifier) signal() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// run sends what is pending, one flush at a time, until close.
func (n *notifier) run() {
	defer close(n.exited)
	defer n.closeConn()
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-n.wake:
		case <-n.stop:
			n.flush(n.l.opts.CommitTimeout) // what the last rounds committed
			return
		}
		if n.flush(n.l.opts.CommitTimeout) {
			backoff = 50 * time.Millisecond
			continue
		}
		// Kept for the next try; what comes meanwhile joins it.
		select {
		case <-time.After(backoff):
			n.signal()
		case <-n.stop:
			n.flush(n.l.opts.CommitTimeout)
			return
		}
		backoff = min(2*backoff, maxNotifyBackoff)
	}
}

// flush sends what is pending, and reports whether it could. What it could
// not send is pending again.
func (n *notifier) flush(timeout time.Duration) bool {
	p := &n.pending
	p.Lock()
	ends, changes, all := p.ends, p.changes, p.all
	if len(ends) == 0 && len(changes) == 0 && !all {
		p.Unlock()
		return true
	}
	p.ends, p.changes, p.all = make(map[int64]int64, len(ends)), nil, false
	p.Unlock()

	cs := changes
	for tid, end := range ends {
		cs = append(cs, change{tid: tid, end: end})
	}
	payloads := notices(cs)
	if all {
		payloads = []string{"*"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for i, payload := range payloads {
		if err := n.send(ctx, payload); err != nil {
			n.failed.Add(1)
			if !n.warned {
				n.warned = true
				n.l.opts.Logger.Warn("rolloutdb: fleet notifications failing; followers on other hosts poll meanwhile", "host", n.l.opts.Host, "err", err)
			}
			n.requeue(ends, changes, all || i > 0)
			return false
		}
		n.sent.Add(1)
	}
	if n.warned {
		n.warned = false
		n.l.opts.Logger.Info("rolloutdb: fleet notifications sent again", "host", n.l.opts.Host)
	}
	return true
}

// requeue puts back what a failed flush took; partly sent, it is all
// told again. What was recorded meanwhile is newer, and wins.
func (n *notifier) requeue(ends map[int64]int64, changes []change, all bool) {
	p := &n.pending
	p.Lock()
	defer p.Unlock()
	for tid, end := range ends {
		if _, newer := p.ends[tid]; !newer {
			p.ends[tid] = end
		}
	}
	p.changes = append(changes, p.changes...)
	p.all = p.all || all
	n.overflowLocked()
}

func (n *notifier) send(ctx context.Context, payload string) error {
	if n.conn == nil {
		conn, err := n.l.connect(ctx, "notify", n.l.opts.testing.notifyDSN, map[string]string{
			// A notice is a wake-up, not data: its transaction need not
			// wait for the WAL to be flushed (it would cost a flush per
			// round; listeners are told at commit either way).
			"synchronous_commit": "off",
		})
		if err != nil {
			return err
		}
		n.conn = conn
	}
	if _, err := n.conn.Exec(ctx, `SELECT pg_notify($1, $2)`, channelName(n.l.ws), payload); err != nil {
		n.closeConn()
		return err
	}
	return nil
}

func (n *notifier) closeConn() {
	if n.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = n.conn.Close(ctx)
		cancel()
		n.conn = nil
	}
}

// close sends what is pending, then stops. The committer has stopped.
func (n *notifier) close() {
	close(n.stop)
	<-n.exited
}
