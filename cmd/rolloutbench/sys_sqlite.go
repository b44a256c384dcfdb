package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/url"
	"path/filepath"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
	_ "modernc.org/sqlite"
)

const sqliteSchema = `
CREATE TABLE records (
	thread TEXT NOT NULL,
	seq    INTEGER NOT NULL,
	kind   TEXT NOT NULL,
	time   INTEGER NOT NULL,
	turn   TEXT NOT NULL,
	body   BLOB NOT NULL,
	PRIMARY KEY (thread, seq)
);
CREATE TABLE threads (
	id         TEXT PRIMARY KEY,
	title      TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
);
CREATE INDEX threads_updated ON threads (updated_at);
`

// openSQLite opens one database with one connection. SQLite has one writer
// at a time; with several connections, writers that find the lock taken
// sleep in the busy handler (milliseconds at a time), which is slower than
// queueing for the one connection in database/sql. One connection is the
// fastest fair choice, and it serves reads too (nothing reads during the
// appends).
func openSQLite(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		return nil, errors.CombineErrors(err, db.Close())
	}
	return db, nil
}

func sqliteFiles(path string) int64 { return fileSize(path, path+"-wal") }

// sqliteAppend writes each record as one transaction: an autocommit INSERT
// that takes the thread's next seq, made durable by an fsync of the WAL
// (synchronous=FULL). All threads share one database, as an application
// keeps one; the threads table is not touched per record (an application
// would keep updated_at there for its list: that would flatter it less).
type sqliteAppend struct {
	path string
	db   *sql.DB
	ins  *sql.Stmt
	ids  []string
}

func openSQLiteAppend(ctx context.Context, _ *env, dir string, threads int) (appendStore, error) {
	path := filepath.Join(dir, "bench.db")
	db, err := openSQLite(path)
	if err != nil {
		return nil, err
	}
	s := &sqliteAppend{path: path, db: db}
	if err := s.init(ctx, threads); err != nil {
		return nil, errors.CombineErrors(err, db.Close())
	}
	return s, nil
}

func (s *sqliteAppend) init(ctx context.Context, threads int) error {
	if _, err := s.db.ExecContext(ctx, sqliteSchema); err != nil {
		return err
	}
	now := time.Now()
	for i := range threads {
		id := threadID(i)
		s.ids = append(s.ids, id)
		hdr, err := json.Marshal(jsonHeader{ThreadID: id, Title: id, Created: now})
		if err != nil {
			return err
		}
		if _, err := s.db.ExecContext(ctx, `INSERT INTO threads VALUES (?, ?, ?, ?)`, id, id, now.UnixNano(), now.UnixNano()); err != nil {
			return err
		}
		if _, err := s.db.ExecContext(ctx, `INSERT INTO records VALUES (?, 1, ?, ?, '', ?)`, id, string(rollout.KindThreadOpened), now.UnixNano(), hdr); err != nil {
			return err
		}
	}
	var err error
	s.ins, err = s.db.PrepareContext(ctx, `INSERT INTO records (thread, seq, kind, time, turn, body)
		SELECT ?1, COALESCE(MAX(seq), 0) + 1, ?2, ?3, ?4, ?5 FROM records WHERE thread = ?1`)
	return err
}

func (s *sqliteAppend) Append(ctx context.Context, thread int, it rollout.Item) error {
	body, err := json.Marshal(it)
	if err != nil {
		return err
	}
	_, err = s.ins.ExecContext(ctx, s.ids[thread], string(rollout.KindItemAppended), time.Now().UnixNano(), "turn-0", body)
	return err
}

func (s *sqliteAppend) Settle(context.Context) error { return nil }

func (s *sqliteAppend) LogBytes() int64 { return sqliteFiles(s.path) }

func (s *sqliteAppend) Close() error {
	var err error
	if s.ins != nil {
		err = s.ins.Close()
	}
	return errors.CombineErrors(err, s.db.Close())
}

func (s *sqliteAppend) Count(ctx context.Context) ([]int, error) {
	db, err := openSQLite(s.path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	index := map[string]int{}
	for i, id := range s.ids {
		index[id] = i
	}
	rows, err := db.QueryContext(ctx, `SELECT thread, COUNT(*) FROM records WHERE kind = ? GROUP BY thread`, string(rollout.KindItemAppended))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]int, len(s.ids))
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		i, ok := index[id]
		if !ok {
			return nil, errors.Newf("unexpected thread %q", id)
		}
		out[i] = n
	}
	return out, rows.Err()
}

// insertThread writes a whole thread (records and its threads row) in the
// open transaction.
func insertThread(ctx context.Context, tx *sql.Tx, id, title string, recs []jsonRecord) error {
	ins, err := tx.PrepareContext(ctx, `INSERT INTO records VALUES (?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer ins.Close()
	for _, r := range recs {
		if _, err := ins.ExecContext(ctx, id, r.Seq, string(r.Kind), r.Time.UnixNano(), r.Turn, []byte(r.Body)); err != nil {
			return err
		}
	}
	last := recs[len(recs)-1].Time
	_, err = tx.ExecContext(ctx, `INSERT INTO threads VALUES (?, ?, ?, ?)`, id, title, recs[0].Time.UnixNano(), last.UnixNano())
	return err
}

type sqliteReplay struct {
	path, id string
	db       *sql.DB
}

func openSQLiteReplay(ctx context.Context, _ *env, dir string, bt *bigThread) (replayStore, error) {
	recs, err := threadRecords(bt.id, bt.title, bt.turns, fixtureTime)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "bench.db")
	db, err := openSQLite(path)
	if err != nil {
		return nil, err
	}
	s := &sqliteReplay{path: path, id: bt.id, db: db}
	err = func() error {
		if _, err := db.ExecContext(ctx, sqliteSchema); err != nil {
			return err
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := insertThread(ctx, tx, bt.id, bt.title, recs); err != nil {
			return errors.CombineErrors(err, tx.Rollback())
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		// The size of the data, not of a WAL that one big transaction grew.
		_, err = db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
		return err
	}()
	if err != nil {
		return nil, errors.CombineErrors(err, db.Close())
	}
	return s, nil
}

// Replay selects the thread's rows in order and unmarshals every body.
func (s *sqliteReplay) Replay(ctx context.Context) (int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT seq, kind, time, turn, body FROM records WHERE thread = ? ORDER BY seq`, s.id)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	st := newReplayState()
	for rows.Next() {
		var seq, at int64 // read like every column; the envelope is not checked further
		var kind, turn string
		var body []byte
		if err := rows.Scan(&seq, &kind, &at, &turn, &body); err != nil {
			return 0, err
		}
		if err := st.add(rollout.Kind(kind), turn, body); err != nil {
			return 0, err
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if st.header.ThreadID != s.id {
		return 0, errors.Newf("header names %q", st.header.ThreadID)
	}
	return len(st.turns), nil
}

func (s *sqliteReplay) Size() (int64, int64) {
	n := sqliteFiles(s.path)
	return n, n
}

// Archive compacts the database (VACUUM) and empties its WAL: SQLite has no
// per-thread archive.
func (s *sqliteReplay) Archive(ctx context.Context) (int64, int64, string, error) {
	if _, err := s.db.ExecContext(ctx, `VACUUM`); err != nil {
		return 0, 0, "", err
	}
	if _, err := s.db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return 0, 0, "", err
	}
	n := sqliteFiles(s.path)
	return n, n, "no per-thread archive: VACUUM + wal_checkpoint(TRUNCATE), uncompressed", nil
}

func (s *sqliteReplay) Close() error { return s.db.Close() }

type sqliteList struct{ db *sql.DB }

func openSQLiteList(ctx context.Context, _ *env, dir string, lt *listThreads) (listStore, error) {
	db, err := openSQLite(filepath.Join(dir, "bench.db"))
	if err != nil {
		return nil, err
	}
	err = func() error {
		if _, err := db.ExecContext(ctx, sqliteSchema); err != nil {
			return err
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		for i := range lt.n {
			recs, err := threadRecords(lt.id(i), lt.title(i), []turn{*lt.turn(i)}, lt.created(i))
			if err == nil {
				recs[len(recs)-1].Time = lt.updated(i)
				err = insertThread(ctx, tx, lt.id(i), lt.title(i), recs)
			}
			if err != nil {
				return errors.CombineErrors(err, tx.Rollback())
			}
		}
		return tx.Commit()
	}()
	if err != nil {
		return nil, errors.CombineErrors(err, db.Close())
	}
	return &sqliteList{db: db}, nil
}

func (s *sqliteList) List(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, title, updated_at FROM threads ORDER BY updated_at DESC LIMIT 50`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id, title string
		var at int64
		if err := rows.Scan(&id, &title, &at); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

func (s *sqliteList) Close() error { return s.db.Close() }
