package follow

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// Config is what a Hub needs of its workspace. Root is required.
type Config struct {
	// Root is the workspace's data directory, with threads/active and
	// threads/archived below it.
	Root string
	// FS is the file system. Default: vfs.OS.
	FS vfs.FS
	// Notify watches the thread directories for changes (fsnotify): the
	// tailers of threads other processes write are woken by their writes,
	// and watchers hear of other processes' changes. Without it tailers
	// poll and watchers see this DB's changes only. It needs the
	// operating system's file system.
	Notify bool
	// Anchor, if set, names a frame the thread's rollout may hold (the
	// projection's last applied frame): a follower from a seq at or after
	// it starts there instead of at the first frame, once it has checked
	// that the rollout holds it.
	Anchor func(ctx context.Context, id string) (rollout.Anchor, bool)
	// Closed is the error followers and watchers end with once the Hub is
	// closed (wrapped). Default: ErrClosed.
	Closed error
	// Logger receives what the Hub must say without failing a call (no
	// file-change notification). Default: slog.Default().
	Logger *slog.Logger
}

// ErrClosed is Config.Closed's default.
var ErrClosed = errors.New("follow: closed")

// Hub serves the followers and watchers of one DB. It is safe for
// concurrent use.
type Hub struct {
	cfg       Config
	done      chan struct{} // closed by Close
	followers atomic.Int64  // open followers
	watching  atomic.Int32  // len(watchers), read on the publish path

	mu       sync.Mutex
	closed   bool
	streams  map[string]*stream // threads written through this DB or followed
	dirs     *dirWatch          // while a tailer or a watcher uses it
	watchers []*Watcher
}

// New returns a Hub for the workspace cfg describes.
func New(cfg Config) *Hub {
	if cfg.FS == nil {
		cfg.FS = vfs.OS
	}
	if cfg.Closed == nil {
		cfg.Closed = ErrClosed
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Hub{cfg: cfg, done: make(chan struct{}), streams: map[string]*stream{}}
}

// Close ends every follower (with Config.Closed) and watcher, and stops
// the tailers and the directory watch. Publishers may still be used and
// closed afterwards; they publish to no one.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	close(h.done)
	streams := make([]*stream, 0, len(h.streams))
	for _, s := range h.streams {
		streams = append(streams, s)
	}
	dirs := h.dirs
	h.dirs = nil
	h.mu.Unlock()
	for _, s := range streams {
		s.mu.Lock()
		s.stopTailLocked()
		s.mu.Unlock()
	}
	if dirs != nil {
		return dirs.close()
	}
	return nil
}

// Followers returns the number of open followers.
func (h *Hub) Followers() int64 { return h.followers.Load() }

// acquire returns the thread's stream, made if it has none, for a user
// (a Publisher, a follower) who gives it back with release.
func (h *Hub) acquire(id string) *stream {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.streams[id]
	if s == nil {
		s = &stream{h: h, id: id}
		h.streams[id] = s
	}
	s.users++
	return s
}

// release gives back a stream acquire handed out: a stream lives while it
// has users, so that a DB that wrote many threads keeps state for those
// open or followed only.
func (h *Hub) release(s *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.users--; s.users == 0 && h.streams[s.id] == s {
		delete(h.streams, s.id)
	}
}

// lookup returns the thread's stream, if it has one.
func (h *Hub) lookup(id string) *stream {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.streams[id]
}

// Moved tells the thread's followers that its rollout may have moved,
// been deleted or been replaced: each looks where it is now.
func (h *Hub) Moved(id string) {
	if s := h.lookup(id); s != nil {
		s.moved()
	}
}

// isClosed reports whether Close was called.
func (h *Hub) isClosed() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// errNotFound is locate's error for a thread with no rollout.
var errNotFound = errors.New("follow: no rollout")

// locate returns where the thread's rollout is now: active, archived, or
// archived and compressed (cold). A rollout moving from one directory to
// the other between two looks is found by a second pass.
func (h *Hub) locate(id string) (path string, archived, cold bool, err error) {
	for range 2 {
		for i, p := range []func(string, string) (string, error){rollout.ActivePath, rollout.ArchivedPath, rollout.ColdPath} {
			path, err := p(h.cfg.Root, id)
			if err != nil {
				return "", false, false, err
			}
			if _, err := h.cfg.FS.Stat(path); err == nil {
				return path, i > 0, i == 2, nil
			}
		}
	}
	return "", false, false, errors.Wrapf(errNotFound, "thread %s", id)
}

// dirs are the thread directories the directory watch watches.
func (h *Hub) threadDirs() []string {
	return []string{filepath.Join(h.cfg.Root, rollout.ActiveDir), filepath.Join(h.cfg.Root, rollout.ArchivedDir)}
}
