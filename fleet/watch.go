package fleet

import (
	"context"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/follow"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// Watcher yields follow.Events for the workspace's threads, whichever
// host changed them, in the shape of follow.Watcher:
//
//	w, err := l.Watch(ctx)
//	defer w.Close()
//	for w.Next() {
//		ev := w.Event()
//	}
//
// Events are notifications, delivered at least once, as follow.Watcher's
// are: an event stands for every change of its kind to its thread since
// the last one read (they are merged while unread), and one may come
// twice. They come from the notices of every host (see notifier), and,
// for what a lost notice did not tell, from a look at every thread of the
// workspace each poll interval: one query per Log, whatever the number of
// its watchers, whose cost grows with the threads (an index probe each).
type Watcher struct {
	s      *watchState
	ctx    context.Context
	mu     sync.Mutex
	queue  []follow.Event
	queued map[follow.Event]bool // unread, to merge repeats
	wake   chan struct{}
	ev     follow.Event
	err    error
	closed bool
}

// watchState is what a Log's watchers know of the workspace's threads,
// kept by one goroutine (run) while any watcher runs.
type watchState struct {
	l     *Log
	refs  int           // Log.live: the watchers, and Watch calls starting
	ready chan struct{} // closed once the first look is done (err, known)
	err   error
	stop  context.CancelFunc
	known map[int64]threadState // run's, once ready

	mu       sync.Mutex
	watchers []*Watcher
	pending  []change      // told by notices, not applied yet
	all      bool          // look at every thread
	wake     chan struct{} // capacity 1
}

// threadState is what a watch last knew of a thread.
type threadState struct {
	id, location string
	end          int64
}

// Watch starts watching the workspace's threads across the fleet: it
// tells the changes made after it returns.
func (l *Log) Watch(ctx context.Context) (*Watcher, error) {
	if err := l.join(nil); err != nil {
		return nil, err
	}
	lv := &l.live
	lv.Lock()
	s := lv.watch
	first := s == nil
	if first {
		s = &watchState{l: l, ready: make(chan struct{}), wake: make(chan struct{}, 1)}
		lv.watch = s
	}
	s.refs++
	lv.Unlock()
	if first {
		// What is there now is the ground the events are told against;
		// the listening connection has started, so a change made after
		// this look is told by its notice, or by the look the listener
		// has every watch take once it LISTENs.
		s.known, s.err = s.scan(ctx)
		if s.err == nil {
			wctx, cancel := context.WithCancel(l.bg)
			s.stop = cancel
			if !l.goLive(func() { s.run(wctx) }) {
				s.err = &rollout.ClosedError{What: "fleet: log"}
			}
		}
		close(s.ready)
	}
	<-s.ready
	if s.err != nil {
		l.leaveWatch(s, nil)
		return nil, s.err
	}
	w := &Watcher{s: s, ctx: ctx, queued: map[follow.Event]bool{}, wake: make(chan struct{}, 1)}
	s.mu.Lock()
	s.watchers = append(s.watchers, w)
	s.mu.Unlock()
	return w, nil
}

// leaveWatch unregisters w (nil: a Watch that failed); the last one stops
// the watch.
func (l *Log) leaveWatch(s *watchState, w *Watcher) {
	s.mu.Lock()
	for i, o := range s.watchers {
		if o == w {
			s.watchers = append(s.watchers[:i], s.watchers[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	lv := &l.live
	lv.Lock()
	if s.refs--; s.refs == 0 {
		if lv.watch == s {
			lv.watch = nil
		}
		if s.stop != nil {
			s.stop()
		}
	}
	lv.Unlock()
	l.leave(nil)
}

// tell hands the watch what a notice said.
func (s *watchState) tell(changes []change) {
	s.mu.Lock()
	s.pending = append(s.pending, changes...)
	s.mu.Unlock()
	s.signal()
}

// rescan has the watch look at every thread.
func (s *watchState) rescan() {
	s.mu.Lock()
	s.all = true
	s.mu.Unlock()
	s.signal()
}

func (s *watchState) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *watchState) run(ctx context.Context) {
	t := time.NewTicker(s.l.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-t.C:
			s.rescan()
			continue
		}
		s.mu.Lock()
		pending, all := s.pending, s.all
		s.pending, s.all = nil, false
		s.mu.Unlock()
		var events []follow.Event
		var err error
		if all {
			events, err = s.diff(ctx)
		} else {
			events, err = s.apply(ctx, pending)
		}
		if err != nil {
			// PostgreSQL unreachable: look at everything once it is back.
			s.mu.Lock()
			s.all = true
			s.mu.Unlock()
			continue // at the next tick
		}
		s.mu.Lock()
		ws := append([]*Watcher(nil), s.watchers...)
		s.mu.Unlock()
		for _, ev := range events {
			for _, w := range ws {
				w.push(ev)
			}
		}
	}
}

// scan reads every thread of the workspace: its id, location and where
// its frames end (octet_length of an uncompressed column does not read
// it).
func (s *watchState) scan(ctx context.Context) (map[int64]threadState, error) {
	ctx, cancel := context.WithTimeout(ctx, s.l.opts.CommitTimeout)
	defer cancel()
	rows, err := s.l.pool.Query(ctx, `SELECT th.tid, th.id, th.location, coalesce(fr.off + octet_length(fr.data), 0)
		FROM rolloutdb.threads th
		LEFT JOIN LATERAL (SELECT off, data FROM rolloutdb.frames WHERE tid = th.tid ORDER BY off DESC LIMIT 1) fr ON true
		WHERE th.ws = $1`, s.l.ws)
	if err != nil {
		return nil, classify(err, "watch")
	}
	defer rows.Close()
	known := map[int64]threadState{}
	for rows.Next() {
		var tid int64
		var st threadState
		if err := rows.Scan(&tid, &st.id, &st.location, &st.end); err != nil {
			return nil, classify(err, "watch")
		}
		known[tid] = st
	}
	return known, classify(rows.Err(), "watch")
}

// diff looks at every thread, and tells what changed since known.
func (s *watchState) diff(ctx context.Context) ([]follow.Event, error) {
	now, err := s.scan(ctx)
	if err != nil {
		return nil, err
	}
	var events []follow.Event
	for tid, st := range now {
		was, ok := s.known[tid]
		switch {
		case !ok:
			events = append(events, follow.Event{Thread: st.id, Kind: follow.EventCreated})
		case was.location != st.location:
			events = append(events, follow.Event{Thread: st.id, Kind: locationEvent(st.location)})
		case was.end != st.end:
			events = append(events, follow.Event{Thread: st.id, Kind: follow.EventUpdated})
		}
	}
	for tid, was := range s.known {
		if _, ok := now[tid]; !ok {
			events = append(events, follow.Event{Thread: was.id, Kind: follow.EventDeleted})
		}
	}
	s.known = now
	return events, nil
}

func locationEvent(loc string) follow.EventKind {
	switch moveKind(loc) {
	case changeArchived:
		return follow.EventArchived
	case changeRestored:
		return follow.EventRestored
	}
	return follow.EventUpdated
}

// apply tells what notices said, reading the threads it does not know.
func (s *watchState) apply(ctx context.Context, changes []change) ([]follow.Event, error) {
	var unknown []int64
	for _, c := range changes {
		if _, ok := s.known[c.tid]; !ok && c.kind == changeAppended {
			unknown = append(unknown, c.tid)
		}
	}
	found := map[int64]threadState{}
	if len(unknown) > 0 {
		qctx, cancel := context.WithTimeout(ctx, s.l.opts.CommitTimeout)
		rows, err := s.l.pool.Query(qctx, `SELECT tid, id, location FROM rolloutdb.threads WHERE ws = $1 AND tid = ANY($2)`, s.l.ws, unknown)
		if err != nil {
			cancel()
			return nil, classify(err, "watch")
		}
		for rows.Next() {
			var tid int64
			var st threadState
			if err := rows.Scan(&tid, &st.id, &st.location); err != nil {
				rows.Close()
				cancel()
				return nil, classify(err, "watch")
			}
			found[tid] = st
		}
		rows.Close()
		cancel()
		if err := rows.Err(); err != nil {
			return nil, classify(err, "watch")
		}
	}
	var events []follow.Event
	for _, c := range changes {
		st, ok := s.known[c.tid]
		switch c.kind {
		case changeAppended:
			if !ok {
				if st, ok = found[c.tid]; !ok {
					continue // gone already: its deletion tells
				}
				events = append(events, follow.Event{Thread: st.id, Kind: follow.EventCreated})
			} else if st.end != c.end {
				events = append(events, follow.Event{Thread: st.id, Kind: follow.EventUpdated})
			}
			st.end = c.end
			s.known[c.tid] = st
		case changeDeleted:
			// One the watch does not know went before it looked.
			if ok {
				delete(s.known, c.tid)
				events = append(events, follow.Event{Thread: c.id, Kind: follow.EventDeleted})
			}
		default:
			// A change the watch's last look saw already is not told
			// again.
			ev, loc := follow.Event{Thread: c.id, Kind: follow.EventUpdated}, ""
			switch c.kind {
			case changeCreated:
				ev.Kind, loc = follow.EventCreated, locActive
			case changeArchived:
				ev.Kind, loc = follow.EventArchived, locArchived
			case changeRestored:
				ev.Kind, loc = follow.EventRestored, locActive
			}
			seen := ok && (c.kind == changeCreated || st.location == loc)
			st.id, st.location = c.id, loc
			s.known[c.tid] = st
			if !seen {
				events = append(events, ev)
			}
		}
	}
	return events, nil
}

// Next waits for the next event and reports whether there is one: false
// once ctx is done, the watcher or the Log is closed.
func (w *Watcher) Next() bool {
	for {
		w.mu.Lock()
		if len(w.queue) > 0 && !w.closed {
			w.ev = w.queue[0]
			w.queue = w.queue[1:]
			delete(w.queued, w.ev)
			w.mu.Unlock()
			return true
		}
		closed := w.closed
		w.mu.Unlock()
		if closed {
			return false
		}
		select {
		case <-w.wake:
		case <-w.ctx.Done():
			w.err = w.ctx.Err()
			_ = w.Close()
		case <-w.s.l.stop:
			w.err = errors.Wrap(&rollout.ClosedError{What: "fleet: log"}, "watch")
			_ = w.Close()
		}
	}
}

// Event returns the event Next found.
func (w *Watcher) Event() follow.Event { return w.ev }

// Err is why Next returned false: nil after Close.
func (w *Watcher) Err() error { return w.err }

// Close stops the watcher.
func (w *Watcher) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	w.s.l.leaveWatch(w.s, w)
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return nil
}

func (w *Watcher) push(ev follow.Event) {
	w.mu.Lock()
	if !w.closed && !w.queued[ev] {
		w.queue = append(w.queue, ev)
		w.queued[ev] = true
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
