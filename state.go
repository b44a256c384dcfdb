package rolloutdb

import (
	"context"
	"log/slog"

	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/projection"
)

// The read side: listing, search and paged history come from state.db,
// whose rows are checked against the rollouts before they are returned
// (see projection.Store.List). Business state (goals, plans, subagent
// edges, mailbox, diagnostics) is reached through Business.

// indexErr passes an index's error on; a fleet index's failure to reach
// PostgreSQL is marked ErrUnavailable, as the log's are.
func (db *DB) indexErr(err error) error {
	if db.fleet != nil {
		return fleet.MarkUnavailable(err)
	}
	return err
}

func (db *DB) logger() *slog.Logger {
	if db.opts.Logger != nil {
		return db.opts.Logger
	}
	return slog.Default()
}

// StateReport says what Open found of state.db: created, migrated, or
// corrupt and rebuilt (with business state lost).
func (db *DB) StateReport() projection.OpenReport { return db.state.Report() }

// List returns one page of threads, newest first (see projection.ListOptions).
func (db *DB) List(ctx context.Context, o projection.ListOptions) (projection.Page, error) {
	v, err := db.state.List(ctx, o)
	return v, db.indexErr(err)
}

// ThreadInfo returns one thread as listed, up to date with its rollout.
func (db *DB) ThreadInfo(ctx context.Context, id string) (projection.ThreadInfo, error) {
	v, err := db.state.Thread(ctx, id)
	return v, db.indexErr(err)
}

// Turns returns the visible turns from..to (1-based ordinals, inclusive)
// of a thread with their items, without replaying its rollout.
func (db *DB) Turns(ctx context.Context, id string, from, to int64) ([]projection.TurnInfo, error) {
	v, err := db.state.Turns(ctx, id, from, to)
	return v, db.indexErr(err)
}

// TurnIDs returns the ids of a thread's visible turns, in order, without
// reading its rollout's frames.
func (db *DB) TurnIDs(ctx context.Context, id string) ([]string, error) {
	v, err := db.state.TurnIDs(ctx, id)
	return v, db.indexErr(err)
}

// Checkpoints returns a thread's checkpoints, in order.
func (db *DB) Checkpoints(ctx context.Context, id string) ([]projection.Checkpoint, error) {
	v, err := db.state.Checkpoints(ctx, id)
	return v, db.indexErr(err)
}

// Search finds items matching query (every word, literally, unless
// o.Raw), best first.
func (db *DB) Search(ctx context.Context, query string, o projection.SearchOptions) ([]projection.Hit, error) {
	v, err := db.state.Search(ctx, query, o)
	return v, db.indexErr(err)
}

// Summary counts the workspace's threads, turns, items and rollout bytes
// from state.db, without reading a rollout (projection.Store.Summary).
func (db *DB) Summary(ctx context.Context) (projection.Summary, error) {
	v, err := db.state.Summary(ctx)
	return v, db.indexErr(err)
}

// Rebuild projects every rollout into state.db again. Business state is
// kept.
func (db *DB) Rebuild(ctx context.Context, o projection.RebuildOptions) (projection.RebuildReport, error) {
	v, err := db.state.Rebuild(ctx, o)
	return v, db.indexErr(err)
}
