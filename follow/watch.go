package follow

import (
	"context"
	"path/filepath"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// EventKind says what happened to a thread.
type EventKind string

const (
	EventCreated  EventKind = "created"  // a new thread (or, from another process, one that appeared in threads/active)
	EventUpdated  EventKind = "updated"  // records were appended
	EventArchived EventKind = "archived" // moved to threads/archived
	EventRestored EventKind = "restored" // moved back (this process's restores)
	EventDeleted  EventKind = "deleted"  // gone
	// EventsMissed (Thread ""): file-change notification lost events of
	// other processes (the kernel's queue overflowed); any thread may have
	// changed, so the sidebar reads the list again.
	EventsMissed EventKind = "missed"
)

// Event tells a client's sidebar that a thread changed: it reads the
// thread again (ThreadInfo, List) for what changed.
type Event struct {
	Thread string    `json:"thread"`
	Kind   EventKind `json:"kind"`
}

// Watcher yields Events, in the shape of Follower:
//
//	w, err := db.Watch(ctx)
//	defer w.Close()
//	for w.Next() {
//		ev := w.Event()
//	}
//
// Events are notifications, delivered at least once: an event stands for
// every change of its kind to its thread since the last one read (they are
// merged while unread: a watcher holds at most one of each kind a
// thread), and one event may come twice (this process's and the file
// system's word for the same change). Changes this DB makes are delivered
// as they happen, without polling; changes another process makes come
// from file-change notification of the thread directories (Config.Notify;
// there is no polling fallback: without notification only this DB's
// changes are seen).
type Watcher struct {
	h      *Hub
	ctx    context.Context
	mu     sync.Mutex
	queue  []Event
	queued map[Event]bool // unread, to merge repeats
	wake   chan struct{}
	ev     Event
	err    error
	closed bool
	dirs   *dirWatch
}

// Watch starts watching the workspace's threads.
func (h *Hub) Watch(ctx context.Context) (*Watcher, error) {
	if h.isClosed() {
		return nil, h.cfg.Closed
	}
	w := &Watcher{h: h, ctx: ctx, queued: map[Event]bool{}, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	h.watchers = append(h.watchers, w)
	h.watching.Store(int32(len(h.watchers)))
	h.mu.Unlock()
	if h.cfg.Notify {
		w.dirs = h.watchDirs()
	}
	return w, nil
}

// Next waits for the next event and reports whether there is one: false
// once ctx is done, the watcher or the Hub is closed.
func (w *Watcher) Next() bool {
	for {
		if err := w.ctx.Err(); err != nil && w.err == nil {
			w.err = err
			_ = w.Close()
		}
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
		case <-w.h.done:
			w.err = errors.Wrap(w.h.cfg.Closed, "watch")
			_ = w.Close()
		}
	}
}

// Event returns the event Next found.
func (w *Watcher) Event() Event { return w.ev }

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
	h := w.h
	h.mu.Lock()
	for i, o := range h.watchers {
		if o == w {
			h.watchers = append(h.watchers[:i], h.watchers[i+1:]...)
			break
		}
	}
	h.watching.Store(int32(len(h.watchers)))
	h.mu.Unlock()
	if w.dirs != nil {
		h.unwatchDirs(w.dirs)
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return nil
}

func (w *Watcher) push(ev Event) {
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

// Notify tells every watcher of a change this DB made; with no watcher it
// costs one atomic load.
func (h *Hub) Notify(id string, kind EventKind) {
	if h.watching.Load() == 0 {
		return
	}
	h.mu.Lock()
	ws := append([]*Watcher(nil), h.watchers...)
	h.mu.Unlock()
	for _, w := range ws {
		w.push(Event{Thread: id, Kind: kind})
	}
}

// notifyFS turns a change to a file of a thread directory into an event,
// for changes another process made (a thread this DB writes is reported
// by its appends). What an event tells is judged by what the directories
// hold when it is taken: a thread written to, or created (moved in), and
// gone by then is told by its removal alone.
func (h *Hub) notifyFS(id, name string, op fsOp) {
	if h.watching.Load() == 0 {
		return
	}
	dir := filepath.Base(filepath.Dir(name))
	switch {
	case op&opWrite != 0:
		if s := h.lookup(id); s != nil && s.isLocal() {
			return // its appends tell
		}
		if _, _, _, err := h.locate(id); err == nil {
			h.Notify(id, EventUpdated)
		}
	case op&opCreate != 0 && filepath.Ext(name) == rollout.RolloutExt:
		if _, err := h.cfg.FS.Stat(name); err != nil {
			return
		}
		if dir == filepath.Base(rollout.ArchivedDir) {
			h.Notify(id, EventArchived)
		} else {
			h.Notify(id, EventCreated)
		}
	case op&(opRemove|opRename) != 0:
		if _, _, _, err := h.locate(id); err != nil {
			h.Notify(id, EventDeleted)
		}
	}
}

func (s *stream) isLocal() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.local
}
