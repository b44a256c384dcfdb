package rolloutdb

import (
	"runtime"

	"github.com/fsnotify/fsnotify"
)

// fsOp is what happened to a file in a thread directory.
type fsOp uint8

const (
	opWrite  fsOp = 1 << iota // written to
	opCreate                  // created, or moved in
	opRemove                  // removed
	opRename                  // moved out
)

// fsEvent is one change to a file in a thread directory.
type fsEvent struct {
	Name string // the file's path
	Op   fsOp
}

// dirNotifier tells of changes to the thread directories, a round at a
// time. wait blocks until a change has come and returns every change that
// has come by then; overflow: changes were lost (everything must be
// looked at again); ok is false once the notifier is closed. close may be
// called from any goroutine, once wait's caller no longer needs it.
type dirNotifier interface {
	wait() (evs []fsEvent, overflow, ok bool)
	close() error
}

// A DB's directory watch (DB.private.newDirNotifier) is newPlatformNotifier:
// inotify polled between rounds on Linux (notifyLinux), fsnotify elsewhere.

// fsnotifyNotifier is the portable notifier. fsnotify reads the kernel's
// events as they come, which on Linux wakes the process at each write of
// another process (on Linux, notifyLinux reads them only between rounds).
type fsnotifyNotifier struct {
	w   *fsnotify.Watcher
	evs []fsEvent
}

func newFsnotifyNotifier(dirs []string) (dirNotifier, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	for _, d := range dirs {
		if err := w.Add(d); err != nil {
			_ = w.Close()
			return nil, err
		}
	}
	return &fsnotifyNotifier{w: w}, nil
}

func (n *fsnotifyNotifier) wait() ([]fsEvent, bool, bool) {
	n.evs = n.evs[:0]
	// The round's first event, waited for.
	select {
	case ev, ok := <-n.w.Events:
		if !ok {
			return nil, false, false
		}
		n.add(ev)
	case _, ok := <-n.w.Errors:
		return nil, ok, ok // an error is an overflow (the only one fsnotify reports)
	}
	// Then what the reader has ready: it runs (Gosched) to hand over its
	// next event, if it holds one.
	for range 1 << 14 {
		runtime.Gosched()
		select {
		case ev, ok := <-n.w.Events:
			if !ok {
				return n.evs, false, true
			}
			n.add(ev)
		default:
			return n.evs, false, true
		}
	}
	return n.evs, false, true
}

func (n *fsnotifyNotifier) add(ev fsnotify.Event) {
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
	if op != 0 {
		n.evs = append(n.evs, fsEvent{Name: ev.Name, Op: op})
	}
}

func (n *fsnotifyNotifier) close() error { return n.w.Close() }
