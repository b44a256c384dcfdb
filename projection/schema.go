package projection

import (
	"context"
	"database/sql"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// ErrSchemaTooNew is returned when state.db was migrated by a newer version
// of rolloutdb. It is left untouched.
var ErrSchemaTooNew = errors.New("projection: state.db schema is newer than this version")

// migration is one step of the schema. Steps are append-only: a released
// step is never edited, a change is a new step.
type migration struct {
	version int
	name    string
	sql     string
	// fill, if set, runs after sql in the same transaction: data
	// migrations SQL alone cannot do.
	fill func(ctx context.Context, tx *sql.Tx) error
}

// migrations are applied in order, each in its own transaction with its
// row in schema_migrations.
var migrations = []migration{
	{1, "projections", `
CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE threads (
	id                  TEXT PRIMARY KEY,
	location            TEXT NOT NULL,              -- active | archived
	rollout_path        TEXT NOT NULL,              -- relative to the data directory
	file_id             INTEGER NOT NULL DEFAULT 0, -- the rollout's file header id
	file_size           INTEGER NOT NULL DEFAULT 0, -- size when last read to its end
	projected_offset    INTEGER NOT NULL DEFAULT 0, -- end of the last frame applied
	projected_seq       INTEGER NOT NULL DEFAULT 0, -- seq of the last record applied
	anchor_offset       INTEGER NOT NULL DEFAULT 0, -- the last frame applied: its offset,
	anchor_seq          INTEGER NOT NULL DEFAULT 0, -- first seq
	anchor_crc          INTEGER NOT NULL DEFAULT 0, -- and payload CRC (is it still there?)
	workspace_id        TEXT NOT NULL DEFAULT '',
	identity_error      TEXT NOT NULL DEFAULT '',
	state               TEXT NOT NULL DEFAULT '',   -- host-defined, set by metadata_updated
	name                TEXT NOT NULL DEFAULT '',
	labels              TEXT NOT NULL DEFAULT '[]', -- JSON array
	flags               TEXT NOT NULL DEFAULT '{}', -- JSON object
	source_kind         TEXT NOT NULL DEFAULT '',
	source_client       TEXT NOT NULL DEFAULT '',
	parent              TEXT NOT NULL DEFAULT '',
	root                TEXT NOT NULL DEFAULT '',
	depth               INTEGER NOT NULL DEFAULT 0,
	forked_from         TEXT NOT NULL DEFAULT '',
	forked_from_turn    TEXT NOT NULL DEFAULT '',
	created_at          INTEGER NOT NULL DEFAULT 0, -- unix ns
	updated_at          INTEGER NOT NULL DEFAULT 0, -- unix ns of the last record
	turn_count          INTEGER NOT NULL DEFAULT 0, -- visible turns
	item_count          INTEGER NOT NULL DEFAULT 0, -- items of visible turns
	last_role           TEXT NOT NULL DEFAULT '',
	preview             TEXT NOT NULL DEFAULT '',
	input_tokens        INTEGER NOT NULL DEFAULT 0,
	cached_input_tokens INTEGER NOT NULL DEFAULT 0,
	output_tokens       INTEGER NOT NULL DEFAULT 0,
	reasoning_tokens    INTEGER NOT NULL DEFAULT 0,
	total_tokens        INTEGER NOT NULL DEFAULT 0,
	open_turn           TEXT NOT NULL DEFAULT '',  -- the last visible turn, when it has no end record
	current_turn        TEXT NOT NULL DEFAULT '',  -- the turn started last and not ended (resume's "open" turn)
	checkpoint_offset   INTEGER NOT NULL DEFAULT 0, -- frame of the latest usable checkpoint
	checkpoint_seq      INTEGER NOT NULL DEFAULT 0,
	damage_count        INTEGER NOT NULL DEFAULT 0  -- rejected records and damaged regions seen
);
CREATE INDEX threads_by_updated ON threads (updated_at, id);
CREATE INDEX threads_by_created ON threads (created_at, id);
CREATE INDEX threads_by_parent ON threads (parent) WHERE parent != '';

CREATE TABLE thread_labels (
	label     TEXT NOT NULL,
	thread_id TEXT NOT NULL,
	PRIMARY KEY (label, thread_id)
) WITHOUT ROWID;

CREATE TABLE turns (
	thread_id           TEXT NOT NULL,
	turn_id             TEXT NOT NULL,
	ordinal             INTEGER,                    -- 1.. among visible turns; NULL once rolled back
	instance            INTEGER NOT NULL DEFAULT 0, -- seq that made this turn visible (a reused id is a new instance)
	status              TEXT NOT NULL DEFAULT '',   -- '' while open
	model               TEXT NOT NULL DEFAULT '',
	start_seq           INTEGER NOT NULL DEFAULT 0,
	end_seq             INTEGER NOT NULL DEFAULT 0,
	start_offset        INTEGER NOT NULL DEFAULT 0,
	started_at          INTEGER NOT NULL DEFAULT 0,
	ended_at            INTEGER NOT NULL DEFAULT 0,
	item_count          INTEGER NOT NULL DEFAULT 0,
	exact_history       INTEGER NOT NULL DEFAULT 0, -- model_history_appended records
	input_tokens        INTEGER NOT NULL DEFAULT 0,
	cached_input_tokens INTEGER NOT NULL DEFAULT 0,
	output_tokens       INTEGER NOT NULL DEFAULT 0,
	reasoning_tokens    INTEGER NOT NULL DEFAULT 0,
	total_tokens        INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (thread_id, turn_id)
) WITHOUT ROWID;
CREATE UNIQUE INDEX turns_by_ordinal ON turns (thread_id, ordinal) WHERE ordinal IS NOT NULL;

CREATE TABLE items (
	id         INTEGER PRIMARY KEY,
	thread_id  TEXT NOT NULL,
	turn_id    TEXT NOT NULL,
	item_id    TEXT NOT NULL,
	seq        INTEGER NOT NULL, -- first appearance: the item's place in its turn
	last_seq   INTEGER NOT NULL, -- the version shown (the last one wins)
	type       TEXT NOT NULL,
	body       BLOB NOT NULL,    -- the item_appended body as in the rollout (msgpack)
	created_at INTEGER NOT NULL DEFAULT 0
);
-- One index: an item is found by id within its turn's few rows (every
-- index more is a b-tree more for each of the millions a rebuild writes).
CREATE INDEX items_by_turn ON items (thread_id, turn_id, seq);

CREATE TABLE checkpoints (
	thread_id     TEXT NOT NULL,
	seq           INTEGER NOT NULL,
	frame_offset  INTEGER NOT NULL,
	checkpoint_id TEXT NOT NULL DEFAULT '',
	covered_turn  TEXT NOT NULL DEFAULT '',
	covered_instance INTEGER NOT NULL DEFAULT 0, -- turns.instance of the covered turn when written; 0 if not visible then
	replacement_messages INTEGER NOT NULL DEFAULT 0,
	trigger       TEXT NOT NULL DEFAULT '',
	tokens_before INTEGER NOT NULL DEFAULT 0,
	tokens_after  INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (thread_id, seq)
) WITHOUT ROWID;

-- Every artifact a record of the rollout references, rolled back or not:
-- what GC must keep.
CREATE TABLE artifact_refs (
	thread_id TEXT NOT NULL,
	seq       INTEGER NOT NULL,
	path      TEXT NOT NULL,
	size      INTEGER NOT NULL,
	sha256    TEXT NOT NULL,
	PRIMARY KEY (thread_id, seq)
) WITHOUT ROWID;
CREATE INDEX artifact_refs_by_path ON artifact_refs (path);
`, nil},
	{2, "full-text index", createFTS, indexAllItems},
	{3, "business state", `
CREATE TABLE goals (
	id         INTEGER PRIMARY KEY,
	thread_id  TEXT NOT NULL,
	text       TEXT NOT NULL,
	status     TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
);
CREATE INDEX goals_by_thread ON goals (thread_id, id);

CREATE TABLE plans (
	thread_id  TEXT NOT NULL,
	step       INTEGER NOT NULL,
	text       TEXT NOT NULL,
	status     TEXT NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (thread_id, step)
) WITHOUT ROWID;

CREATE TABLE subagent_edges (
	parent     TEXT NOT NULL,
	child      TEXT NOT NULL,
	status     TEXT NOT NULL, -- open | closed
	created_at INTEGER NOT NULL,
	closed_at  INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (parent, child)
) WITHOUT ROWID;
CREATE INDEX subagent_edges_by_child ON subagent_edges (child);

CREATE TABLE mailbox (
	id          INTEGER PRIMARY KEY,
	from_thread TEXT NOT NULL,
	to_thread   TEXT NOT NULL,
	body        TEXT NOT NULL,
	created_at  INTEGER NOT NULL,
	read_at     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX mailbox_by_recipient ON mailbox (to_thread, id);

CREATE TABLE diagnostics (
	id         INTEGER PRIMARY KEY,
	thread_id  TEXT NOT NULL,
	offset     INTEGER NOT NULL,
	length     INTEGER NOT NULL,
	first_seq  INTEGER NOT NULL,
	last_seq   INTEGER NOT NULL,
	kind       TEXT NOT NULL,
	reason     TEXT NOT NULL,
	ack_lost   INTEGER NOT NULL DEFAULT 0,
	seen_at    INTEGER NOT NULL,
	UNIQUE (thread_id, offset, first_seq, reason)
);
`, nil},
	{4, "cleanup queue", `
-- Files to remove (a deleted thread's artifacts and leftovers), kept until
-- removed: a failed delete is retried at the next open and by gc.
CREATE TABLE cleanup_queue (
	id          INTEGER PRIMARY KEY,
	path        TEXT NOT NULL, -- relative to the data directory
	reason      TEXT NOT NULL,
	enqueued_at INTEGER NOT NULL,
	attempts    INTEGER NOT NULL DEFAULT 0,
	last_error  TEXT NOT NULL DEFAULT ''
);
`, nil},
	{5, "index, not a copy", projectionsV5, nil},
	{6, "items packed", projectionsV6, nil},
}

// createFTS is migration 2's full-text index (replaced by search.db in
// migration 5; kept because released migrations never change).
const createFTS = `CREATE VIRTUAL TABLE items_fts USING fts5(text, content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 2')`

// indexAllItems is migration 2's backfill of its full-text index.
func indexAllItems(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT id, body FROM items`)
	if err != nil {
		return err
	}
	type entry struct {
		id   int64
		text string
	}
	var all []entry
	for rows.Next() {
		var e entry
		var body []byte
		if err := rows.Scan(&e.id, &body); err != nil {
			rows.Close()
			return err
		}
		var it rollout.Item
		r := rollout.Record{Kind: rollout.KindItemAppended, Body: body}
		if r.Decode(&it) == nil {
			e.text = ftsText(&it)
		}
		all = append(all, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, e := range all {
		if e.text == "" {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO items_fts (rowid, text) VALUES (?, ?)`, e.id, e.text); err != nil {
			return err
		}
	}
	return nil
}

// projectionsV5 makes state.db an index of the rollouts rather than a
// copy: no item bodies (they are read from the rollout by frame offset),
// integer keys (tid) instead of a thread id in every row, and the
// full-text index moved out to search.db. Projections are rebuilt from
// the rollouts: the projection tables are dropped and made anew, and the
// rebuild watermark is set so that Open rebuilds them. Business state is
// not touched.
const projectionsV5 = `
DROP TABLE items_fts;
DROP TABLE items;
DROP TABLE turns;
DROP TABLE checkpoints;
DROP TABLE thread_labels;
DROP TABLE artifact_refs;
DROP TABLE threads;

CREATE TABLE threads (
	tid                 INTEGER PRIMARY KEY,        -- the thread's key in turns, items, checkpoints and search.db
	id                  TEXT NOT NULL UNIQUE,
	location            TEXT NOT NULL,              -- active | archived
	rollout_path        TEXT NOT NULL,              -- relative to the data directory
	file_id             INTEGER NOT NULL DEFAULT 0, -- the rollout's file header id
	file_size           INTEGER NOT NULL DEFAULT 0, -- size when last read to its end
	projected_offset    INTEGER NOT NULL DEFAULT 0, -- end of the last frame applied
	projected_seq       INTEGER NOT NULL DEFAULT 0, -- seq of the last record applied
	anchor_offset       INTEGER NOT NULL DEFAULT 0, -- the last frame applied: its offset,
	anchor_seq          INTEGER NOT NULL DEFAULT 0, -- first seq
	anchor_crc          INTEGER NOT NULL DEFAULT 0, -- and payload CRC (is it still there?)
	workspace_id        TEXT NOT NULL DEFAULT '',
	identity_error      TEXT NOT NULL DEFAULT '',
	state               TEXT NOT NULL DEFAULT '',   -- host-defined, set by metadata_updated
	name                TEXT NOT NULL DEFAULT '',
	labels              TEXT NOT NULL DEFAULT '[]', -- JSON array
	flags               TEXT NOT NULL DEFAULT '{}', -- JSON object
	source_kind         TEXT NOT NULL DEFAULT '',
	source_client       TEXT NOT NULL DEFAULT '',
	parent              TEXT NOT NULL DEFAULT '',
	root                TEXT NOT NULL DEFAULT '',
	depth               INTEGER NOT NULL DEFAULT 0,
	forked_from         TEXT NOT NULL DEFAULT '',
	forked_from_turn    TEXT NOT NULL DEFAULT '',
	created_at          INTEGER NOT NULL DEFAULT 0, -- unix ns
	updated_at          INTEGER NOT NULL DEFAULT 0, -- unix ns of the last record
	turn_count          INTEGER NOT NULL DEFAULT 0, -- visible turns
	item_count          INTEGER NOT NULL DEFAULT 0, -- items of visible turns
	last_role           TEXT NOT NULL DEFAULT '',
	preview             TEXT NOT NULL DEFAULT '',
	input_tokens        INTEGER NOT NULL DEFAULT 0,
	cached_input_tokens INTEGER NOT NULL DEFAULT 0,
	output_tokens       INTEGER NOT NULL DEFAULT 0,
	reasoning_tokens    INTEGER NOT NULL DEFAULT 0,
	total_tokens        INTEGER NOT NULL DEFAULT 0,
	open_turn           TEXT NOT NULL DEFAULT '',  -- the last visible turn, when it has no end record
	current_turn        TEXT NOT NULL DEFAULT '',  -- the turn started last and not ended (resume's "open" turn)
	checkpoint_offset   INTEGER NOT NULL DEFAULT 0, -- frame of the latest usable checkpoint
	checkpoint_seq      INTEGER NOT NULL DEFAULT 0,
	damage_count        INTEGER NOT NULL DEFAULT 0, -- rejected records and damaged regions seen
	rev                 INTEGER NOT NULL DEFAULT 0  -- a random stamp, new at every write of the row (List's cache)
);
CREATE INDEX threads_by_updated ON threads (updated_at, id);
CREATE INDEX threads_by_created ON threads (created_at, id);
CREATE INDEX threads_by_parent ON threads (parent) WHERE parent != '';

CREATE TABLE thread_labels (
	label     TEXT NOT NULL,
	thread_id TEXT NOT NULL,
	PRIMARY KEY (label, thread_id)
) WITHOUT ROWID;

CREATE TABLE turns (
	tid                 INTEGER NOT NULL,
	turn_id             TEXT NOT NULL,
	ordinal             INTEGER,                    -- 1.. among visible turns; NULL once rolled back
	instance            INTEGER NOT NULL DEFAULT 0, -- seq that made this turn visible (a reused id is a new instance)
	status              TEXT NOT NULL DEFAULT '',   -- '' while open
	model               TEXT NOT NULL DEFAULT '',
	start_seq           INTEGER NOT NULL DEFAULT 0,
	end_seq             INTEGER NOT NULL DEFAULT 0,
	last_seq            INTEGER NOT NULL DEFAULT 0, -- the last record of the turn: its items lie in seq instance..last_seq
	start_offset        INTEGER NOT NULL DEFAULT 0,
	started_at          INTEGER NOT NULL DEFAULT 0,
	ended_at            INTEGER NOT NULL DEFAULT 0,
	item_count          INTEGER NOT NULL DEFAULT 0,
	exact_history       INTEGER NOT NULL DEFAULT 0, -- model_history_appended records
	input_tokens        INTEGER NOT NULL DEFAULT 0,
	cached_input_tokens INTEGER NOT NULL DEFAULT 0,
	output_tokens       INTEGER NOT NULL DEFAULT 0,
	reasoning_tokens    INTEGER NOT NULL DEFAULT 0,
	total_tokens        INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (tid, turn_id)
) WITHOUT ROWID;
CREATE UNIQUE INDEX turns_by_ordinal ON turns (tid, ordinal) WHERE ordinal IS NOT NULL;

-- One row per item of a visible turn, no body: where its shown version is
-- (the frame, CRC-checked when read) and what paging and search need.
CREATE TABLE items (
	tid      INTEGER NOT NULL,
	seq      INTEGER NOT NULL, -- first version: the item's place in its turn (and its key in search.db)
	turn     INTEGER NOT NULL, -- turns.instance of its turn
	idh      INTEGER NOT NULL, -- 64-bit FNV-1a of the item id (0: no id)
	last_seq INTEGER NOT NULL, -- the version shown: the last one wins
	frame    INTEGER NOT NULL, -- offset of the frame holding that version
	type     INTEGER NOT NULL, -- item type code (items.go)
	PRIMARY KEY (tid, seq)
) WITHOUT ROWID;

CREATE TABLE checkpoints (
	tid           INTEGER NOT NULL,
	seq           INTEGER NOT NULL,
	frame_offset  INTEGER NOT NULL,
	checkpoint_id TEXT NOT NULL DEFAULT '',
	covered_turn  TEXT NOT NULL DEFAULT '',
	covered_instance INTEGER NOT NULL DEFAULT 0, -- turns.instance of the covered turn when written; 0 if not visible then
	replacement_messages INTEGER NOT NULL DEFAULT 0,
	trigger       TEXT NOT NULL DEFAULT '',
	tokens_before INTEGER NOT NULL DEFAULT 0,
	tokens_after  INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (tid, seq)
) WITHOUT ROWID;

-- Every artifact a record of the rollout references, rolled back or not:
-- what GC must keep.
CREATE TABLE artifact_refs (
	thread_id TEXT NOT NULL,
	seq       INTEGER NOT NULL,
	path      TEXT NOT NULL,
	size      INTEGER NOT NULL,
	sha256    TEXT NOT NULL,
	PRIMARY KEY (thread_id, seq)
) WITHOUT ROWID;
CREATE INDEX artifact_refs_by_path ON artifact_refs (path);

-- Which threads' rows appeared, went or moved (another location or file),
-- whoever changed them: reads compare these, not every row, with the file
-- system (catchup.go's reconcile).
CREATE TABLE thread_changes (
	seq INTEGER PRIMARY KEY AUTOINCREMENT,
	id  TEXT NOT NULL
);
CREATE TRIGGER threads_inserted AFTER INSERT ON threads
BEGIN INSERT INTO thread_changes (id) VALUES (NEW.id); END;
CREATE TRIGGER threads_deleted AFTER DELETE ON threads
BEGIN INSERT INTO thread_changes (id) VALUES (OLD.id); END;
CREATE TRIGGER threads_moved AFTER UPDATE OF id, location, rollout_path ON threads
WHEN OLD.id IS NOT NEW.id OR OLD.location IS NOT NEW.location OR OLD.rollout_path IS NOT NEW.rollout_path
BEGIN
	INSERT INTO thread_changes (id) SELECT OLD.id WHERE OLD.id IS NOT NEW.id;
	INSERT INTO thread_changes (id) VALUES (NEW.id);
END;

INSERT INTO meta (key, value) VALUES ('rebuild_watermark', '') ON CONFLICT (key) DO UPDATE SET value = '';
`

// SchemaVersion is the schema this code writes.
func SchemaVersion() int { return migrations[len(migrations)-1].version }

// migrate brings the database to target (SchemaVersion in production;
// tests stop earlier to build old databases). It returns the version found.
func migrate(ctx context.Context, db *sql.DB, target int) (int, error) {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at INTEGER NOT NULL)`); err != nil {
		return 0, errors.Wrap(err, "create schema_migrations")
	}
	found, err := currentVersion(ctx, db)
	if err != nil {
		return 0, err
	}
	if found > SchemaVersion() {
		return found, errors.WithHint(errors.Wrapf(ErrSchemaTooNew, "state.db is at schema %d; this version knows up to %d", found, SchemaVersion()),
			"use the newer rolloutdb that wrote it; this version leaves the file untouched")
	}
	for _, m := range migrations {
		if m.version <= found || m.version > target {
			continue
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return found, errors.Wrapf(err, "migration %d", m.version)
		}
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			_ = tx.Rollback()
			return found, errors.Wrapf(err, "migration %d (%s)", m.version, m.name)
		}
		if m.fill != nil {
			if err := m.fill(ctx, tx); err != nil {
				_ = tx.Rollback()
				return found, errors.Wrapf(err, "migration %d (%s)", m.version, m.name)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			m.version, m.name, time.Now().UnixNano()); err != nil {
			_ = tx.Rollback()
			return found, errors.Wrapf(err, "migration %d", m.version)
		}
		if err := tx.Commit(); err != nil {
			return found, errors.Wrapf(err, "migration %d", m.version)
		}
	}
	if found > 0 && found < 5 && target >= 5 {
		// Migration 5 dropped the item bodies and the full-text index: the
		// file gives the space back (once; what remains is small).
		if _, err := db.ExecContext(ctx, `VACUUM`); err != nil {
			return found, errors.Wrap(err, "migration 5: vacuum")
		}
		if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			return found, errors.Wrap(err, "migration 5: checkpoint")
		}
	}
	return found, nil
}

func currentVersion(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (int, error) {
	var v sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT max(version) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, errors.Wrap(err, "read schema_migrations")
	}
	return int(v.Int64), nil
}

// projectionsV6 packs items and turns rows. An item's turn and shown
// version are kept as distances from the item's seq (toff = seq - turn,
// ver = last_seq - seq), which SQLite stores in one byte or none (a 0
// costs no byte), where the absolute seqs took two to four each. A turn's
// status is a code (rows.go) and its end a duration from its start. Every projection is rebuilt
// from the rollouts: the rows go, thread keys are drawn anew (so is the
// generation that binds search.db to them), and the rebuild watermark
// is set so that Open rebuilds. Business state is not touched.
const projectionsV6 = `
DELETE FROM checkpoints;
DELETE FROM artifact_refs;
DELETE FROM thread_labels;
DELETE FROM threads;
DELETE FROM meta WHERE key = 'index_generation';
DROP TABLE items;
CREATE TABLE items (
	tid   INTEGER NOT NULL,
	seq   INTEGER NOT NULL, -- first version: the item's place in its turn (and its key in search.db)
	toff  INTEGER NOT NULL, -- seq minus turns.instance of its turn
	idh   INTEGER NOT NULL, -- 64-bit FNV-1a of the item id (0: no id)
	ver   INTEGER NOT NULL, -- the version shown (the last one wins), as its seq minus seq
	frame INTEGER NOT NULL, -- offset of the frame holding that version
	type  INTEGER NOT NULL, -- item type code (items.go)
	PRIMARY KEY (tid, seq)
) WITHOUT ROWID;
DROP INDEX turns_by_ordinal;
DROP TABLE turns;
CREATE TABLE turns (
	tid                 INTEGER NOT NULL,
	turn_id             TEXT NOT NULL,
	ordinal             INTEGER,                    -- 1.. among visible turns; NULL once rolled back
	instance            INTEGER NOT NULL DEFAULT 0, -- seq that made this turn visible (a reused id is a new instance)
	status              BLOB NOT NULL DEFAULT 0,    -- 0 open, 1 completed, 2 aborted; any other as text (rows.go)
	model               TEXT NOT NULL DEFAULT '',
	start_seq           INTEGER NOT NULL DEFAULT 0,
	end_seq             INTEGER NOT NULL DEFAULT 0,
	last_seq            INTEGER NOT NULL DEFAULT 0, -- the last record of the turn: its items lie in seq instance..last_seq
	start_offset        INTEGER NOT NULL DEFAULT 0,
	started_at          INTEGER NOT NULL DEFAULT 0,
	ended_after         INTEGER,                    -- ns from started_at to the end; NULL while it has none
	item_count          INTEGER NOT NULL DEFAULT 0,
	exact_history       INTEGER NOT NULL DEFAULT 0, -- model_history_appended records
	input_tokens        INTEGER NOT NULL DEFAULT 0,
	cached_input_tokens INTEGER NOT NULL DEFAULT 0,
	output_tokens       INTEGER NOT NULL DEFAULT 0,
	reasoning_tokens    INTEGER NOT NULL DEFAULT 0,
	total_tokens        INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (tid, turn_id)
) WITHOUT ROWID;
CREATE UNIQUE INDEX turns_by_ordinal ON turns (tid, ordinal) WHERE ordinal IS NOT NULL;
INSERT INTO meta (key, value) VALUES ('rebuild_watermark', '') ON CONFLICT (key) DO UPDATE SET value = '';
`
