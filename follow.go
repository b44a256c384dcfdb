package rolloutdb

import (
	"context"

	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/follow"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The facade's side of live follow and the workspace watch (package
// follow): the types hosts use, under the facade's names, and the calls
// that reach the DB's follow.Hub, which Open wires and publish feeds.
type (
	// FollowOptions say where a follower starts.
	FollowOptions = follow.Options
	// FollowEnd is why a follower stopped without an error.
	FollowEnd = follow.End
	// ThreadEvent tells a client's sidebar that a thread changed: it
	// reads the thread again (ThreadInfo, List) for what changed.
	ThreadEvent = follow.Event
	// ThreadEventKind says what happened to a thread.
	ThreadEventKind = follow.EventKind
)

// A Follower yields a thread's records as they become durable, in the
// shape of bufio.Scanner (see DB.Follow): a local workspace's is a
// *follow.Follower, a fleet's a *fleet.Follower.
type Follower interface {
	// Next blocks until the next record is durable, and reports false
	// once the follower stopped: Err says why (nil: End does).
	Next() bool
	// Record returns the record Next found.
	Record() rollout.Record
	// Err returns what stopped the follower, if not an end (End).
	Err() error
	// End says why the follower stopped without an error.
	End() FollowEnd
	// Damage lists the damaged frames the follower stepped over.
	Damage() []*rollout.CorruptionError
	// Close stops the follower.
	Close() error
}

// A Watcher yields ThreadEvents (see DB.Watch): a local workspace's is a
// *follow.Watcher, a fleet's a *fleet.Watcher.
type Watcher interface {
	// Next blocks until the next event, and reports false once the
	// watcher stopped (Err says why).
	Next() bool
	// Event returns the event Next found.
	Event() ThreadEvent
	Err() error
	Close() error
}

var (
	_ Follower = (*follow.Follower)(nil)
	_ Watcher  = (*follow.Watcher)(nil)
	_ Follower = (*fleet.Follower)(nil)
	_ Watcher  = (*fleet.Watcher)(nil)
)

// FollowArchived: the thread was archived; every record before the
// archive was yielded.
const FollowArchived = follow.Archived

const (
	ThreadCreated  = follow.EventCreated  // a new thread (or, from another process, one that appeared in threads/active)
	ThreadUpdated  = follow.EventUpdated  // records were appended
	ThreadArchived = follow.EventArchived // moved to threads/archived
	ThreadRestored = follow.EventRestored // moved back (this process's restores)
	ThreadDeleted  = follow.EventDeleted  // gone
	// ThreadsMissed (Thread ""): file-change notification lost events of
	// other processes (the kernel's queue overflowed); any thread may have
	// changed, so the sidebar reads the list again.
	ThreadsMissed = follow.EventsMissed
)

// Follow starts following a thread, active or archived: the Follower
// yields its records after o.AfterSeq, then blocks for new ones, each
// once it is durable, whether this DB, another DB or another process
// writes the thread. It ends without an error when the thread is archived
// (End returns FollowArchived), with ErrThreadDeleted or
// ErrRolloutReplaced, or with ErrClosed once the DB is closed. Follow
// fails at once if the thread has no rollout.
func (db *DB) Follow(ctx context.Context, id string, o FollowOptions) (Follower, error) {
	if err := db.live(); err != nil {
		return nil, err
	}
	if err := rollout.ValidateThreadID(id); err != nil {
		return nil, err
	}
	if _, err := db.log.Locate(ctx, id); err != nil {
		return nil, err
	}
	if db.fleet != nil {
		// A fleet's followers read the frames in PostgreSQL, woken by the
		// hosts' notices, whichever host writes the thread (this one too).
		f, err := db.fleet.Follow(ctx, id, o)
		if err != nil {
			return nil, err
		}
		return f, nil
	}
	f, err := db.follow.Follow(ctx, id, o)
	if err != nil {
		return nil, err // not a typed nil
	}
	return f, nil
}

// Watch starts watching the workspace's threads: this DB's changes as
// they happen, other processes' through file-change notification (with
// the operating system's file system); in a fleet workspace every host's,
// this one's too, from PostgreSQL's notices (and a poll behind them).
func (db *DB) Watch(ctx context.Context) (Watcher, error) {
	if err := db.live(); err != nil {
		return nil, err
	}
	if db.fleet != nil {
		// Every host's changes, this one's too, from the notices.
		w, err := db.fleet.Watch(ctx)
		if err != nil {
			return nil, err
		}
		return w, nil
	}
	w, err := db.follow.Watch(ctx)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// notify tells the watchers of a change this DB made.
func (db *DB) notify(id string, kind ThreadEventKind) { db.follow.Notify(id, kind) }

// newFollowHub wires the DB's followers and watchers to its workspace.
func (db *DB) newFollowHub(notify bool) *follow.Hub {
	return follow.New(follow.Config{
		Root: db.root, FS: db.fs, Notify: notify, Closed: ErrClosed, Logger: db.logger(),
		Anchor: func(ctx context.Context, id string) (rollout.Anchor, bool) { return db.state.Anchor(ctx, id) },
	})
}

// pokeHub tells the thread's followers that its rollout may have moved,
// been deleted or replaced.
func (db *DB) pokeHub(id string) { db.follow.Moved(id) }
