package rolloutdb

import (
	"context"

	"github.com/rolloutdb/rolloutdb/follow"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The facade's side of live follow and the workspace watch (package
// follow): the types hosts use, under the facade's names, and the calls
// that reach the DB's follow.Hub, which Open wires and publish feeds.
type (
	// Follower yields a thread's records as they become durable (see
	// DB.Follow and follow.Follower).
	Follower = follow.Follower
	// FollowOptions say where a follower starts.
	FollowOptions = follow.Options
	// FollowEnd is why a follower stopped without an error.
	FollowEnd = follow.End
	// Watcher yields ThreadEvents (see DB.Watch and follow.Watcher).
	Watcher = follow.Watcher
	// ThreadEvent tells a client's sidebar that a thread changed: it
	// reads the thread again (ThreadInfo, List) for what changed.
	ThreadEvent = follow.Event
	// ThreadEventKind says what happened to a thread.
	ThreadEventKind = follow.EventKind
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
func (db *DB) Follow(ctx context.Context, id string, o FollowOptions) (*Follower, error) {
	if err := db.live(); err != nil {
		return nil, err
	}
	if err := rollout.ValidateThreadID(id); err != nil {
		return nil, err
	}
	if _, err := db.log.Locate(ctx, id); err != nil {
		return nil, err
	}
	return db.follow.Follow(ctx, id, o)
}

// Watch starts watching the workspace's threads: this DB's changes as
// they happen, other processes' through file-change notification (with
// the operating system's file system).
func (db *DB) Watch(ctx context.Context) (*Watcher, error) {
	if err := db.live(); err != nil {
		return nil, err
	}
	return db.follow.Watch(ctx)
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
