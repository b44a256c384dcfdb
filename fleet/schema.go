package fleet

import (
	"context"
	"strconv"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SchemaVersion is the layout this package writes. A database whose
// layout is newer is refused (ErrNewerSchema); an older one is migrated.
const SchemaVersion = 3

// migrations[i] takes the layout from version i to i+1. Each runs in one
// transaction with the version's update.
var migrations = []string{
	`CREATE TABLE rolloutdb.workspaces (
		ws      serial PRIMARY KEY,
		name    text NOT NULL UNIQUE,
		id      text NOT NULL,
		created timestamptz NOT NULL DEFAULT now()
	);
	CREATE TABLE rolloutdb.hosts (
		ws          int NOT NULL REFERENCES rolloutdb.workspaces,
		host        text NOT NULL,
		incarnation bigint NOT NULL,
		lease_until timestamptz NOT NULL,
		PRIMARY KEY (ws, host)
	);
	CREATE TABLE rolloutdb.threads (
		tid       bigserial PRIMARY KEY,
		ws        int NOT NULL REFERENCES rolloutdb.workspaces,
		id        text NOT NULL,
		location  text NOT NULL,
		file_id   bigint NOT NULL,
		header    bytea NOT NULL,
		owner     text,
		owner_inc bigint,
		epoch     bigint NOT NULL,
		UNIQUE (ws, id)
	);
	CREATE TABLE rolloutdb.frames (
		tid   bigint NOT NULL REFERENCES rolloutdb.threads ON DELETE CASCADE,
		off   bigint NOT NULL,
		seq   bigint NOT NULL,
		epoch bigint NOT NULL,
		data  bytea NOT NULL,
		PRIMARY KEY (tid, off)
	);
	-- Frames are written once and read by offset: keep them out of TOAST's
	-- compression (payloads are compressed already).
	ALTER TABLE rolloutdb.frames ALTER COLUMN data SET STORAGE EXTERNAL;`,
	// 2: the workspace's files (Files: the artifacts).
	`CREATE TABLE rolloutdb.files (
		ws    int NOT NULL REFERENCES rolloutdb.workspaces,
		path  text NOT NULL COLLATE "C",
		data  bytea NOT NULL,
		mtime timestamptz NOT NULL,
		PRIMARY KEY (ws, path)
	);`,
	// 3: the fence of an append that commits with other statements
	// (Thread.WritePreparedWith): it raises, so that the implicit
	// transaction of the batch rolls back whole.
	`CREATE FUNCTION rolloutdb.fence(held boolean, thread text) RETURNS boolean LANGUAGE plpgsql AS $$
	BEGIN
		IF held IS NOT TRUE THEN
			RAISE EXCEPTION 'fleet: fenced: thread % is not this host''s at this epoch', thread USING ERRCODE = '` + fencedCode + `';
		END IF;
		RETURN true;
	END $$;`,
}

// fencedCode is the SQLSTATE rolloutdb.fence raises (a class of its own,
// no standard one's).
const fencedCode = "RDF01"

// migrate brings the database's layout to SchemaVersion, under an
// advisory lock so that hosts starting together do it once.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return unavailable(err, "connect")
	}
	defer conn.Release()
	// The lock's key is arbitrary and fixed: "rolloutdb" in ASCII.
	const lockKey = 0x726f6c6c6f7574
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(lockKey)); err != nil {
		return classify(err, "lock the schema")
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(lockKey)) }()
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS rolloutdb;
		CREATE TABLE IF NOT EXISTS rolloutdb.schema_version (
			only_row bool PRIMARY KEY DEFAULT true CHECK (only_row),
			version  int NOT NULL
		)`); err != nil {
		return classify(err, "create schema rolloutdb")
	}
	var v int
	err = conn.QueryRow(ctx, `SELECT version FROM rolloutdb.schema_version`).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		v = 0
	} else if err != nil {
		return classify(err, "read the schema version")
	}
	if v > SchemaVersion {
		return errors.WithHint(errors.Wrapf(ErrNewerSchema, "database layout %d, this build writes %d", v, SchemaVersion),
			"upgrade rolloutdb on this host; nothing was changed")
	}
	for ; v < SchemaVersion; v++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, migrations[v]); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO rolloutdb.schema_version (version) VALUES ($1)
				ON CONFLICT (only_row) DO UPDATE SET version = excluded.version`, v+1)
			return err
		})
		if err != nil {
			return classify(err, "migrate the layout to version "+strconv.Itoa(v+1))
		}
	}
	return nil
}
