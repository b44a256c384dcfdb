package rolloutdb

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// ThreadEventKind says what happened to a thread.
type ThreadEventKind string

const (
	ThreadCreated  ThreadEventKind = "created"  // a new thread (or, from another process, one that appeared in threads/active)
	ThreadUpdated  ThreadEventKind = "updated"  // records were appended
	ThreadArchived ThreadEventKind = "archived" // moved to threads/archived
	ThreadRestored ThreadEventKind = "restored" // moved back (this process's restores)
	ThreadDeleted  ThreadEventKind = "deleted"  // gone
	// ThreadsMissed (Thread ""): file-change notification lost events of
	// other processes (the kernel's queue overflowed); any thread may have
	// changed, so the sidebar re-reads the list.
	ThreadsMissed ThreadEventKind = "missed"
)

// ThreadEvent tells a client's sidebar that a thread changed: it re-reads
// the thread (ThreadInfo, List) for what changed.
type ThreadEvent struct {
	Thread string          `json:"thread"`
	Kind   ThreadEventKind `json:"kind"`
}

// Watcher yields ThreadEvents, in the shape of Follower:
//
//	w, err := db.Watch(ctx)
//	defer w.Close()
//	for w.Next() {
//		ev := w.Event()
//	}
//
// Events are notifications, delivered at least once: an event stands for
// every change of its kind to its thread since the last one read (they are
// merged while unread: a watcher holds at most one of each kind a thread), and one event may come twice (this process's and the file
// system's word for the same change). Changes this DB makes are delivered
// as they happen, without polling; changes another process makes come
// from file-change notification of the thread directories (there is no
// polling fallback: without notification only this DB's changes are seen).
type Watcher struct {
	db     *DB
	ctx    context.Context
	mu     sync.Mutex
	queue  []ThreadEvent
	queued map[ThreadEvent]bool // unread, to merge repeats
	wake   chan struct{}
	ev     ThreadEvent
	err    error
	closed bool
	watch  *dirWatch
}

// Watch starts watching the workspace's threads.
func (db *DB) Watch(ctx context.Context) (*Watcher, error) {
	db.mu.Lock()
	closed := db.closed
	db.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	w := &Watcher{db: db, ctx: ctx, queued: map[ThreadEvent]bool{}, wake: make(chan struct{}, 1)}
	db.watchMu.Lock()
	db.open = append(db.open, w)
	db.watching.Store(int32(len(db.open)))
	db.watchMu.Unlock()
	if db.fs == vfs.OS {
		w.watch = db.watchDirs()
	}
	return w, nil
}

// Next waits for the next event and reports whether there is one: false
// once ctx is done, the watcher or the DB is closed.
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
		case <-w.db.done:
			w.err = errors.Wrap(ErrClosed, "watch")
			_ = w.Close()
		}
	}
}

// Event returns the event Next found.
func (w *Watcher) Event() ThreadEvent { return w.ev }

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
	db := w.db
	db.watchMu.Lock()
	for i, o := range db.open {
		if o == w {
			db.open = append(db.open[:i], db.open[i+1:]...)
			break
		}
	}
	db.watching.Store(int32(len(db.open)))
	db.watchMu.Unlock()
	if w.watch != nil {
		db.unwatchDirs()
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return nil
}

func (w *Watcher) push(ev ThreadEvent) {
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

// watchers are the DB's open Watchers.
type watchers struct {
	watchMu  sync.Mutex
	open     []*Watcher
	watching atomic.Int32 // len(open), read on the append path
}

// notify tells every watcher of a change; an append with no watcher pays
// one atomic load.
func (db *DB) notify(id string, kind ThreadEventKind) {
	if db.watching.Load() == 0 {
		return
	}
	db.watchMu.Lock()
	ws := append([]*Watcher(nil), db.open...)
	db.watchMu.Unlock()
	for _, w := range ws {
		w.push(ThreadEvent{Thread: id, Kind: kind})
	}
}

// notifyFS turns a file-change event of a thread directory into a thread
// event, for changes another process made (a thread this DB writes is
// reported by its appends).
func (db *DB) notifyFS(id string, ev fsEvent) {
	if db.watching.Load() == 0 {
		return
	}
	// Events come in rounds: what a round tells is judged by what the
	// directories hold when it is taken. A thread written to, or created
	// (moved in), and gone by then is told by its removal alone: else a
	// thread archived and deleted in one round was told "deleted" (its
	// move out of threads/active), then "archived" or "updated".
	dir := filepath.Base(filepath.Dir(ev.Name))
	switch {
	case ev.Op&opWrite != 0:
		db.mu.Lock()
		_, mine := db.threads[id]
		db.mu.Unlock()
		if mine {
			return // its appends tell
		}
		if _, err := db.rolloutPath(id); err == nil {
			db.notify(id, ThreadUpdated)
		}
	case ev.Op&opCreate != 0 && filepath.Ext(ev.Name) == rollout.RolloutExt:
		if _, err := db.fs.Stat(ev.Name); err != nil {
			return
		}
		if dir == filepath.Base(rollout.ArchivedDir) {
			db.notify(id, ThreadArchived)
		} else {
			db.notify(id, ThreadCreated)
		}
	case ev.Op&(opRemove|opRename) != 0:
		if _, err := db.rolloutPath(id); err != nil {
			db.notify(id, ThreadDeleted)
		}
	}
}
