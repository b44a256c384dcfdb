package main

import (
	"context"
	"strconv"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// System names, the "system" field of --json.
const (
	sysRolloutdb    = "rolloutdb"
	sysThreadAppend = "rolloutdb-thread-append"
	sysJSONL        = "jsonl-fsync"
	sysRewrite      = "rewrite"
	sysSQLite       = "sqlite"
	sysPebble       = "pebble"
	sysWriter       = "rollout-writer"
	sysWriterFsync  = "rollout-writer-fsync"
)

// appendStore is one system's side of an append scenario: its threads are
// made by the constructor; Append returns once the record is durable.
type appendStore interface {
	Append(ctx context.Context, thread int, it rollout.Item) error
	// Settle waits for work the system does after acknowledging (the
	// projector of rolloutdb); it is counted in written bytes, not time.
	Settle(ctx context.Context) error
	// LogBytes is the size of the authoritative log alone.
	LogBytes() int64
	Close() error
	// Count reads back, after Close, how many appended items each thread
	// holds on disk.
	Count(ctx context.Context) ([]int, error)
}

// replayStore holds the big thread in one system.
type replayStore interface {
	// Replay reads the whole thread back and returns its turns.
	Replay(ctx context.Context) (turns int, err error)
	// Size is the thread's file (log) and, for rolloutdb, what state.db adds
	// (total).
	Size() (log, total int64)
	// Archive does what the system does to archive the thread and returns
	// the archived size.
	Archive(ctx context.Context) (log, total int64, note string, err error)
	Close() error
}

// listStore holds many small threads in one system.
type listStore interface {
	// List returns the ids of the 50 most recently updated threads, newest
	// first.
	List(ctx context.Context) ([]string, error)
	Close() error
}

// noter is a store with something to say beside its figures.
type noter interface{ Note() string }

// system builds each kind of store in its own directory.
type system struct {
	name string
	// capped says a thread holds at most cfg.RewriteMax records (rewrite).
	capped bool
	// extra systems run only when named in --systems.
	extra      bool
	openAppend func(ctx context.Context, e *env, dir string, threads int) (appendStore, error)
	// openReplay is nil when the system takes part in append scenarios
	// only.
	openReplay func(ctx context.Context, e *env, dir string, bt *bigThread) (replayStore, error)
	openList   func(ctx context.Context, e *env, dir string, lt *listThreads) (listStore, error)
}

func allSystems() []system {
	return []system{
		{name: sysRolloutdb, openAppend: openRolloutdbAppend(false), openReplay: openRolloutdbReplay, openList: openRolloutdbList},
		{name: sysThreadAppend, openAppend: openRolloutdbAppend(true)},
		{name: sysJSONL, openAppend: openJSONLAppend, openReplay: openJSONLReplay, openList: openJSONLList},
		{name: sysRewrite, capped: true, openAppend: openRewriteAppend, openReplay: openRewriteReplay, openList: openRewriteList},
		{name: sysSQLite, openAppend: openSQLiteAppend, openReplay: openSQLiteReplay, openList: openSQLiteList},
		{name: sysPebble, openAppend: openPebbleAppend},
		{name: sysWriter, openAppend: openWriterAppend(true)},
		{name: sysWriterFsync, extra: true, openAppend: openWriterAppend(false)},
	}
}

// threadID names the i-th thread of an append scenario, the same in every
// system.
func threadID(i int) string { return "thread-" + strconv.Itoa(i) }
