package pgindex

import (
	"context"
	"strconv"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SchemaVersion is the layout of the index's tables this package writes.
// A database whose index layout is newer is refused (ErrSchemaTooNew); an
// older one is migrated. It is versioned apart from the fleet's log
// (rolloutdb.schema_version), in rolloutdb.index_schema_version.
const SchemaVersion = 2

// fleetLayout is the oldest fleet log layout (package fleet's SchemaVersion)
// whose tables this package reads: which threads there are and where
// (rolloutdb.threads), where each one's frames end (rolloutdb.frames).
const fleetLayout = 1

// ErrSchemaTooNew is returned by Open when a newer version of rolloutdb
// migrated the index's tables. Nothing is changed.
var ErrSchemaTooNew = errors.New("pgindex: the index's layout is newer than this build")

// ErrNoFleet is returned by Open when the database has no fleet log of a
// layout this build reads (open the fleet's log first: it makes it).
var ErrNoFleet = errors.New("pgindex: no fleet log in the database")

// migrations[i] takes the index's layout from version i to i+1. Each runs
// in one transaction with the version's update. Released steps never
// change; a change is a new step.
var migrations = []string{
	// Projections: rebuilt from the log at any time. Every row is keyed by
	// the thread's tid (index_threads), which is drawn once per row and
	// orders threads newest first in search's window. Times are unix ns,
	// as in state.db. Thread ids sort bytewise (COLLATE "C"), as in
	// state.db, so that cursors and orders agree between engines.
	`CREATE TABLE rolloutdb.index_threads (
		tid                 bigserial PRIMARY KEY,
		ws                  int NOT NULL,
		id                  text COLLATE "C" NOT NULL,
		location            text NOT NULL DEFAULT 'active',
		rollout_path        text NOT NULL DEFAULT '',
		file_id             bigint NOT NULL DEFAULT 0, -- the thread's file header id (0: a row not made yet)
		file_size           bigint NOT NULL DEFAULT 0, -- where its frames ended when last read to their end
		projected_offset    bigint NOT NULL DEFAULT 0, -- end of the last frame applied
		projected_seq       bigint NOT NULL DEFAULT 0,
		anchor_offset       bigint NOT NULL DEFAULT 0, -- the last frame applied: its offset,
		anchor_seq          bigint NOT NULL DEFAULT 0, -- first seq
		anchor_crc          bigint NOT NULL DEFAULT 0, -- and payload CRC
		workspace_id        text NOT NULL DEFAULT '',
		identity_error      text NOT NULL DEFAULT '',
		state               text NOT NULL DEFAULT '',
		name                text NOT NULL DEFAULT '',
		labels              text[] NOT NULL DEFAULT '{}',
		flags               jsonb NOT NULL DEFAULT '{}',
		source_kind         text NOT NULL DEFAULT '',
		source_client       text NOT NULL DEFAULT '',
		parent              text NOT NULL DEFAULT '',
		root                text NOT NULL DEFAULT '',
		depth               int NOT NULL DEFAULT 0,
		forked_from         text NOT NULL DEFAULT '',
		forked_from_turn    text NOT NULL DEFAULT '',
		created_at          bigint NOT NULL DEFAULT 0,
		updated_at          bigint NOT NULL DEFAULT 0,
		turn_count          bigint NOT NULL DEFAULT 0,
		item_count          bigint NOT NULL DEFAULT 0,
		last_role           text NOT NULL DEFAULT '',
		preview             text NOT NULL DEFAULT '',
		input_tokens        bigint NOT NULL DEFAULT 0,
		cached_input_tokens bigint NOT NULL DEFAULT 0,
		output_tokens       bigint NOT NULL DEFAULT 0,
		reasoning_tokens    bigint NOT NULL DEFAULT 0,
		total_tokens        bigint NOT NULL DEFAULT 0,
		open_turn           text NOT NULL DEFAULT '',
		current_turn        text NOT NULL DEFAULT '',
		checkpoint_offset   bigint NOT NULL DEFAULT 0,
		checkpoint_seq      bigint NOT NULL DEFAULT 0,
		damage_count        bigint NOT NULL DEFAULT 0,
		rev                 bigint NOT NULL DEFAULT 0, -- a random stamp, new at every write of the row
		UNIQUE (ws, id)
	);
	-- A page of a list is a range of one of these, read backwards: a cost
	-- that does not grow with the workspace. A host's state (in the
	-- default order) and a parent (the children archive and delete walk)
	-- have their own; a source kind is checked on the rows of the range.
	CREATE INDEX index_threads_by_updated ON rolloutdb.index_threads (ws, location, updated_at, id);
	CREATE INDEX index_threads_by_created ON rolloutdb.index_threads (ws, location, created_at, id);
	CREATE INDEX index_threads_by_state ON rolloutdb.index_threads (ws, location, state, updated_at, id);
	CREATE INDEX index_threads_by_parent ON rolloutdb.index_threads (ws, parent, location, updated_at, id) WHERE parent <> '';
	CREATE INDEX index_threads_by_parent_created ON rolloutdb.index_threads (ws, parent, location, created_at, id) WHERE parent <> '';

	-- One row per label of a thread, with the thread's sort keys and
	-- location copied, so that a page of a label is a range of an index
	-- too (a GIN index on threads.labels finds the threads, but not in
	-- order: a common label would sort them all).
	CREATE TABLE rolloutdb.index_labels (
		tid        bigint NOT NULL,
		label      text NOT NULL,
		ws         int NOT NULL,
		id         text COLLATE "C" NOT NULL,
		location   text NOT NULL,
		updated_at bigint NOT NULL,
		created_at bigint NOT NULL,
		PRIMARY KEY (tid, label)
	);
	CREATE INDEX index_labels_by_updated ON rolloutdb.index_labels (ws, label, location, updated_at, id);
	CREATE INDEX index_labels_by_created ON rolloutdb.index_labels (ws, label, location, created_at, id);

	CREATE TABLE rolloutdb.index_turns (
		tid                 bigint NOT NULL,
		turn_id             text NOT NULL,
		ordinal             bigint,                    -- 1.. among visible turns; NULL once rolled back
		instance            bigint NOT NULL,           -- seq that made this turn visible
		status              text NOT NULL DEFAULT '',  -- '' while open
		model               text NOT NULL DEFAULT '',
		start_seq           bigint NOT NULL DEFAULT 0,
		end_seq             bigint NOT NULL DEFAULT 0,
		last_seq            bigint NOT NULL DEFAULT 0, -- its items lie in seq instance..last_seq
		start_offset        bigint NOT NULL DEFAULT 0,
		started_at          bigint NOT NULL DEFAULT 0,
		ended_at            bigint NOT NULL DEFAULT 0,
		item_count          bigint NOT NULL DEFAULT 0,
		exact_history       bigint NOT NULL DEFAULT 0,
		input_tokens        bigint NOT NULL DEFAULT 0,
		cached_input_tokens bigint NOT NULL DEFAULT 0,
		output_tokens       bigint NOT NULL DEFAULT 0,
		reasoning_tokens    bigint NOT NULL DEFAULT 0,
		total_tokens        bigint NOT NULL DEFAULT 0,
		PRIMARY KEY (tid, turn_id)
	);
	CREATE UNIQUE INDEX index_turns_by_ordinal ON rolloutdb.index_turns (tid, ordinal) WHERE ordinal IS NOT NULL;

	-- One row per item of a visible turn, no body: where its shown version
	-- is (the frame, read through the Source) and its words, for search.
	CREATE TABLE rolloutdb.index_items (
		tid      bigint NOT NULL,
		seq      bigint NOT NULL, -- first version: the item's place in its turn
		turn     bigint NOT NULL, -- index_turns.instance of its turn
		idh      bigint NOT NULL, -- 64-bit FNV-1a of the item id (0: none)
		last_seq bigint NOT NULL, -- the version shown
		frame    bigint NOT NULL, -- offset of the frame holding it
		type     text NOT NULL,
		words    tsvector,        -- the shown version's words with their positions; NULL: none
		PRIMARY KEY (tid, seq)
	);
	CREATE INDEX index_items_words ON rolloutdb.index_items USING gin (words);

	CREATE TABLE rolloutdb.index_checkpoints (
		tid                  bigint NOT NULL,
		seq                  bigint NOT NULL,
		frame_offset         bigint NOT NULL,
		checkpoint_id        text NOT NULL DEFAULT '',
		covered_turn         text NOT NULL DEFAULT '',
		covered_instance     bigint NOT NULL DEFAULT 0,
		replacement_messages int NOT NULL DEFAULT 0,
		trigger              text NOT NULL DEFAULT '',
		tokens_before        bigint NOT NULL DEFAULT 0,
		tokens_after         bigint NOT NULL DEFAULT 0,
		PRIMARY KEY (tid, seq)
	);

	CREATE TABLE rolloutdb.index_artifact_refs (
		ws        int NOT NULL,
		thread_id text COLLATE "C" NOT NULL,
		seq       bigint NOT NULL,
		path      text COLLATE "C" NOT NULL,
		size      bigint NOT NULL,
		sha256    text NOT NULL,
		PRIMARY KEY (ws, thread_id, seq)
	);

	-- Per workspace: a rebuild's watermark, where the change log was last
	-- matched.
	CREATE TABLE rolloutdb.index_meta (
		ws    int NOT NULL,
		key   text NOT NULL,
		value text NOT NULL,
		PRIMARY KEY (ws, key)
	);

	-- The change log: a row for every fleet thread made, deleted, moved or
	-- replaced (another file id), whoever did it, written by triggers on
	-- the fleet's threads table in the transaction that did it. A reader
	-- looks up only what was logged since it last looked: every entry whose
	-- transaction id is at least the oldest one running then (xid), since
	-- one that had not committed then was not seen, whatever its order.
	CREATE TABLE rolloutdb.index_changes (
		ws  int NOT NULL,
		id  text NOT NULL,
		xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
		at  timestamptz NOT NULL DEFAULT now()
	);
	CREATE INDEX index_changes_by_xid ON rolloutdb.index_changes (ws, xid);
	CREATE INDEX index_changes_by_time ON rolloutdb.index_changes (at);
	CREATE FUNCTION rolloutdb.index_thread_changed() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF TG_OP = 'DELETE' THEN
			INSERT INTO rolloutdb.index_changes (ws, id) VALUES (OLD.ws, OLD.id);
			RETURN OLD;
		END IF;
		INSERT INTO rolloutdb.index_changes (ws, id) VALUES (NEW.ws, NEW.id);
		RETURN NEW;
	END $$;
	CREATE TRIGGER index_thread_made_or_gone AFTER INSERT OR DELETE ON rolloutdb.threads
		FOR EACH ROW EXECUTE FUNCTION rolloutdb.index_thread_changed();
	CREATE TRIGGER index_thread_moved AFTER UPDATE OF location, file_id ON rolloutdb.threads
		FOR EACH ROW WHEN (OLD.location IS DISTINCT FROM NEW.location OR OLD.file_id IS DISTINCT FROM NEW.file_id)
		EXECUTE FUNCTION rolloutdb.index_thread_changed();

	-- Business state: written only through the Store's typed API, never
	-- rebuilt, no key shared with a projection row.
	CREATE TABLE rolloutdb.goals (
		id         bigserial PRIMARY KEY,
		ws         int NOT NULL,
		thread_id  text NOT NULL,
		text       text NOT NULL,
		status     text NOT NULL,
		created_at bigint NOT NULL,
		updated_at bigint NOT NULL
	);
	CREATE INDEX goals_by_thread ON rolloutdb.goals (ws, thread_id, id);
	CREATE TABLE rolloutdb.plans (
		ws         int NOT NULL,
		thread_id  text NOT NULL,
		step       int NOT NULL,
		text       text NOT NULL,
		status     text NOT NULL,
		updated_at bigint NOT NULL,
		PRIMARY KEY (ws, thread_id, step)
	);
	CREATE TABLE rolloutdb.subagent_edges (
		ws         int NOT NULL,
		parent     text COLLATE "C" NOT NULL,
		child      text COLLATE "C" NOT NULL,
		status     text NOT NULL,
		created_at bigint NOT NULL,
		closed_at  bigint NOT NULL DEFAULT 0,
		PRIMARY KEY (ws, parent, child)
	);
	CREATE INDEX subagent_edges_by_child ON rolloutdb.subagent_edges (ws, child);
	CREATE TABLE rolloutdb.mailbox (
		id          bigserial PRIMARY KEY,
		ws          int NOT NULL,
		from_thread text NOT NULL,
		to_thread   text NOT NULL,
		body        text NOT NULL,
		created_at  bigint NOT NULL,
		read_at     bigint NOT NULL DEFAULT 0
	);
	CREATE INDEX mailbox_by_recipient ON rolloutdb.mailbox (ws, to_thread, id);
	CREATE INDEX mailbox_by_sender ON rolloutdb.mailbox (ws, from_thread);
	CREATE TABLE rolloutdb.diagnostics (
		id        bigserial PRIMARY KEY,
		ws        int NOT NULL,
		thread_id text COLLATE "C" NOT NULL,
		off       bigint NOT NULL,
		length    bigint NOT NULL,
		first_seq bigint NOT NULL,
		last_seq  bigint NOT NULL,
		kind      text NOT NULL,
		reason    text NOT NULL,
		ack_lost  bool NOT NULL DEFAULT false,
		seen_at   bigint NOT NULL,
		UNIQUE (ws, thread_id, off, first_seq, reason)
	);
	CREATE TABLE rolloutdb.cleanup_queue (
		id          bigserial PRIMARY KEY,
		ws          int NOT NULL,
		path        text NOT NULL,
		reason      text NOT NULL,
		enqueued_at bigint NOT NULL,
		attempts    int NOT NULL DEFAULT 0,
		last_error  text NOT NULL DEFAULT ''
	);
	CREATE INDEX cleanup_queue_by_ws ON rolloutdb.cleanup_queue (ws, id);`,

	// 2: a business write in a batch of the caller's raises when the row
	// it names is not there (Writes), so that the batch rolls back whole;
	// goals and messages copied in from another workspace keep where they
	// came from, its id and theirs there (ImportBusiness: copied again,
	// they are updated, not added). Rows written here have origin ''.
	`CREATE FUNCTION rolloutdb.index_expect(present boolean, what text) RETURNS boolean LANGUAGE plpgsql AS $$
	BEGIN
		IF present IS NOT TRUE THEN
			RAISE EXCEPTION 'pgindex: no such row: %', what USING ERRCODE = '` + noSuchRowCode + `';
		END IF;
		RETURN true;
	END $$;
	ALTER TABLE rolloutdb.goals ADD COLUMN origin text NOT NULL DEFAULT '', ADD COLUMN origin_id bigint NOT NULL DEFAULT 0;
	CREATE UNIQUE INDEX goals_by_origin ON rolloutdb.goals (ws, origin, origin_id) WHERE origin <> '';
	ALTER TABLE rolloutdb.mailbox ADD COLUMN origin text NOT NULL DEFAULT '', ADD COLUMN origin_id bigint NOT NULL DEFAULT 0;
	CREATE UNIQUE INDEX mailbox_by_origin ON rolloutdb.mailbox (ws, origin, origin_id) WHERE origin <> '';`,
}

// migrate brings the index's layout to SchemaVersion, under an advisory
// lock so that hosts starting together do it once. It returns the
// version found (0: none).
func migrate(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, errors.Wrap(err, "pgindex: connect")
	}
	defer conn.Release()
	// The lock's key is arbitrary and fixed, and not the fleet log's:
	// "rollix" in ASCII.
	const lockKey = 0x726f6c6c6978
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(lockKey)); err != nil {
		return 0, errors.Wrap(err, "pgindex: lock the layout")
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(lockKey)) }()
	var fleetV *int
	var hasFleet bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('rolloutdb.schema_version') IS NOT NULL`).Scan(&hasFleet); err != nil {
		return 0, errors.Wrap(err, "pgindex: read the fleet log's layout")
	}
	if hasFleet {
		if err := conn.QueryRow(ctx, `SELECT max(version) FROM rolloutdb.schema_version`).Scan(&fleetV); err != nil {
			return 0, errors.Wrap(err, "pgindex: read the fleet log's layout")
		}
	}
	if fleetV == nil || *fleetV < fleetLayout {
		found := "none"
		if fleetV != nil {
			found = strconv.Itoa(*fleetV)
		}
		return 0, errors.WithHint(errors.Wrapf(ErrNoFleet, "fleet layout %s, this build reads %d", found, fleetLayout),
			"open the fleet's log (fleet.Open) on this database first, with the rolloutdb build this index belongs to")
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS rolloutdb.index_schema_version (
			only_row bool PRIMARY KEY DEFAULT true CHECK (only_row),
			version  int NOT NULL
		)`); err != nil {
		return 0, errors.Wrap(err, "pgindex: create rolloutdb.index_schema_version")
	}
	var v int
	err = conn.QueryRow(ctx, `SELECT version FROM rolloutdb.index_schema_version`).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		v = 0
	} else if err != nil {
		return 0, errors.Wrap(err, "pgindex: read the layout's version")
	}
	found := v
	if v > SchemaVersion {
		return found, errors.WithHint(errors.Wrapf(ErrSchemaTooNew, "index layout %d, this build writes %d", v, SchemaVersion),
			"upgrade rolloutdb on this host; nothing was changed")
	}
	for ; v < SchemaVersion; v++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, migrations[v]); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO rolloutdb.index_schema_version (version) VALUES ($1)
				ON CONFLICT (only_row) DO UPDATE SET version = excluded.version`, v+1)
			return err
		})
		if err != nil {
			return found, errors.Wrapf(err, "pgindex: migrate the layout to version %d", v+1)
		}
	}
	return found, nil
}
