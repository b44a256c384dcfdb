package follow

import (
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// dirWatch is a Hub's one file-change notification of the thread
// directories (one inotify instance, however many threads are followed),
// shared by the tailers and the watchers.
type dirWatch struct {
	w    *fsnotify.Watcher
	refs int // Hub.mu
}

func (d *dirWatch) close() error { return d.w.Close() }

// watchDirs starts (or shares) the directory watch; nil if the file
// system cannot notify (tailers poll then).
func (h *Hub) watchDirs() *dirWatch {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	if h.dirs != nil {
		h.dirs.refs++
		return h.dirs
	}
	w, err := fsnotify.NewWatcher()
	if err == nil {
		for _, d := range h.threadDirs() {
			if err = w.Add(d); err != nil {
				_ = w.Close()
				break
			}
		}
	}
	if err != nil {
		h.cfg.Logger.Warn("rolloutdb: no file-change notification; followers poll", "err", err.Error())
		return nil
	}
	h.dirs = &dirWatch{w: w, refs: 1}
	go h.dispatch(w)
	return h.dirs
}

// unwatchDirs gives back what watchDirs returned.
func (h *Hub) unwatchDirs(d *dirWatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dirs != d {
		return // closed with the Hub
	}
	if d.refs--; d.refs == 0 {
		_ = d.close()
		h.dirs = nil
	}
}

// dispatchEvery is the pause between the directory watch's rounds. Each
// round wakes the process, its tailers and their followers (several
// goroutines, a few system calls) whatever it brings, and a follower
// process shares the writer's processors: rounds further apart cost a
// writer that streams less, and add their pause to the latency of what
// another process writes.
const dispatchEvery = 4 * time.Millisecond

// fsOp is what happened to a file in a thread directory.
type fsOp uint8

const (
	opWrite  fsOp = 1 << iota // written to
	opCreate                  // created, or moved in
	opRemove                  // removed
	opRename                  // moved out
)

func opOf(ev fsnotify.Event) fsOp {
	var op fsOp
	if ev.Op.Has(fsnotify.Write) {
		op |= opWrite
	}
	if ev.Op.Has(fsnotify.Create) {
		op |= opCreate
	}
	if ev.Op.Has(fsnotify.Remove) {
		op |= opRemove
	}
	if ev.Op.Has(fsnotify.Rename) {
		op |= opRename
	}
	return op
}

// dispatch takes the watch's events in rounds until it is closed: a write
// wakes the thread's tailer, anything else has its followers look where
// its rollout is; watchers are told. An error (the kernel's queue
// overflowed: the only one fsnotify reports) has everyone look again.
//
// A round takes every event that has come, then dispatch pauses for
// dispatchEvery. Meanwhile nothing takes fsnotify's next event, so its
// reader does not read the kernel's queue, and the kernel merges the
// writes to one file that follow into the event queued first: a writer in
// another process that streams wakes this process once a round, not once
// a write. Writes to many files are not merged; the round takes them all,
// so that the kernel's queue does not overflow behind the pause.
func (h *Hub) dispatch(w *fsnotify.Watcher) {
	for {
		select {
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			h.event(ev.Name, opOf(ev))
		case _, ok := <-w.Errors:
			if !ok {
				return
			}
			h.overflowed()
		}
		// The rest of the round: what fsnotify's reader has ready (it runs,
		// Gosched, to hand over its next event, if it holds one).
		for more := true; more; {
			runtime.Gosched()
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				h.event(ev.Name, opOf(ev))
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
				h.overflowed()
			default:
				more = false
			}
		}
		time.Sleep(dispatchEvery)
	}
}

// event takes one change to a file of a thread directory.
func (h *Hub) event(name string, op fsOp) {
	id := threadOfName(filepath.Base(name))
	if id == "" || op == 0 {
		return
	}
	h.notifyFS(id, name, op)
	s := h.lookup(id)
	switch {
	case s == nil:
	case op&(opCreate|opRemove|opRename) == 0:
		s.written()
	default:
		s.moved() // created, removed, renamed: look where it is
	}
}

// overflowed: notifications were lost; every follower looks where its
// rollout is now, and watchers are told to read the list again.
func (h *Hub) overflowed() {
	h.Notify("", EventsMissed)
	h.mu.Lock()
	streams := make([]*stream, 0, len(h.streams))
	for _, s := range h.streams {
		streams = append(streams, s)
	}
	h.mu.Unlock()
	for _, s := range streams {
		s.moved()
	}
}

// threadOfName is the thread a file in a thread directory belongs to:
// "<id>.rollout" and the files beside it ("<id>.rollout.zst", ".torn-",
// ".orig-"), and ".tmp-<id>-<random>": a writer that created its rollout
// keeps the file it created under that name, and the notification names
// the file by it. Thread ids hold no dots.
func threadOfName(name string) string {
	if rest, ok := strings.CutPrefix(name, ".tmp-"); ok {
		if i := strings.LastIndexByte(rest, '-'); i > 0 {
			return rest[:i]
		}
		return ""
	}
	if id, _, ok := strings.Cut(name, "."); ok && id != "" {
		return id
	}
	return ""
}
