package fleet

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The listener is a Log's one listening connection, shared by all its
// followers and watchers: it LISTENs on the workspace's channel while any
// of them runs, and wakes the followers of each thread a notice names
// (and every follower for "*"), and hands the notice to the watchers.
//
// Notices are wake-ups that may be lost (a host that died between its
// commit and its notice, a listening connection that broke). So each
// follower and watcher also looks on its own every PollInterval, and
// every one of them looks once each time the listening connection has
// (re)started LISTENing, for what it may have missed before. A listening
// connection that has been quiet for listenPingEvery is pinged, and made
// again if it does not answer: a connection that silently stopped working
// costs followers their low latency, not their records.

// listenPingEvery is how long a quiet listening connection waits before
// it is checked, in poll intervals.
const listenPingEvery = 5

// join registers a follower (f), or a watcher (nil), and starts the
// listening connection for the first one.
func (l *Log) join(f *Follower) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return &rollout.ClosedError{What: "fleet: log"}
	}
	lv := &l.live
	lv.Lock()
	defer lv.Unlock()
	if f != nil {
		ft := lv.threads[f.tid]
		if ft == nil {
			ft = &followed{followers: map[*Follower]struct{}{}, reads: map[[2]int64]*read{}}
			lv.threads[f.tid] = ft
		}
		ft.followers[f] = struct{}{}
	}
	if lv.users++; lv.users == 1 {
		ctx, cancel := context.WithCancel(l.bg)
		lv.cancel = cancel
		l.done.Add(1)
		go func() { defer l.done.Done(); l.listen(ctx) }()
	}
	return nil
}

// goLive runs fn in a goroutine Close waits for, unless the Log is closed.
func (l *Log) goLive(fn func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.done.Add(1)
	go func() { defer l.done.Done(); fn() }()
	return true
}

// leave unregisters a follower or a watcher; the last one stops the
// listening connection.
func (l *Log) leave(f *Follower) {
	lv := &l.live
	lv.Lock()
	defer lv.Unlock()
	if f != nil {
		if ft := lv.threads[f.tid]; ft != nil {
			delete(ft.followers, f)
			if len(ft.followers) == 0 {
				delete(lv.threads, f.tid)
			}
		}
	}
	if lv.users--; lv.users == 0 {
		lv.cancel()
		lv.cancel = nil
	}
}

// listen keeps a listening connection until ctx is done.
func (l *Log) listen(ctx context.Context) {
	backoff := 50 * time.Millisecond
	quiet := listenPingEvery * l.opts.PollInterval
	for ctx.Err() == nil {
		conn, err := l.connect(ctx, "listen", l.opts.testing.listenDSN, map[string]string{
			// The server learns soon of a listening connection that broke
			// (a listener that stops reading holds back the notification
			// queue of the whole database).
			"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3",
		})
		if err == nil {
			_, err = conn.Exec(ctx, `LISTEN `+pgx.Identifier{channelName(l.ws)}.Sanitize())
			if err != nil {
				closeQuietly(conn)
			}
		}
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, l.opts.PollInterval)
			continue
		}
		backoff = 50 * time.Millisecond
		l.listens.Add(1)
		// Whatever was told before LISTEN took effect was not heard.
		l.wakeAll()
		for {
			wctx, cancel := context.WithTimeout(ctx, quiet)
			n, err := conn.WaitForNotification(wctx)
			timedOut := wctx.Err() != nil
			cancel()
			if err == nil {
				l.received.Add(1)
				l.dispatch(n.Payload)
				continue
			}
			if ctx.Err() != nil {
				break
			}
			if timedOut {
				pctx, cancel := context.WithTimeout(ctx, l.opts.CommitTimeout)
				err = conn.Ping(pctx)
				cancel()
			}
			if err != nil {
				l.listenLost.Add(1) // broke, or went silent
				break
			}
		}
		closeQuietly(conn)
	}
}

func closeQuietly(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// dispatch wakes the followers of the threads a notice names, and hands
// it to the watchers.
func (l *Log) dispatch(payload string) {
	changes, all := parseNotice(payload)
	if all {
		l.wakeAll()
		return
	}
	lv := &l.live
	lv.Lock()
	for _, c := range changes {
		if ft := lv.threads[c.tid]; ft != nil {
			ft.poke()
		}
	}
	w := lv.watch
	lv.Unlock()
	if w != nil {
		w.tell(changes)
	}
}

// wakeAll wakes every follower, and has the watchers look at every thread.
func (l *Log) wakeAll() {
	lv := &l.live
	lv.Lock()
	for _, ft := range lv.threads {
		ft.poke()
	}
	w := lv.watch
	lv.Unlock()
	if w != nil {
		w.rescan()
	}
}
