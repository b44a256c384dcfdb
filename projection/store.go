package projection

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/journal"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
	"modernc.org/sqlite" // also the database/sql driver "sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Options configure a Store. Root is required; the zero value of every
// other field works.
type Options struct {
	// Path is the state.db file. Default: "" opens a private in-memory
	// database that is gone at Close (for tests and MemFS workspaces).
	Path string
	// Root is the workspace data directory: rollouts are found under
	// threads/active and threads/archived there, and rows store their
	// paths relative to it. Required.
	Root string
	// WorkspaceID is the workspace's id. A rollout whose header names
	// another workspace is still listed, with IdentityError set, and is
	// left out of search. Default: "" (not checked).
	WorkspaceID string
	// FS reads rollouts. Default: vfs.OS. state.db itself is always
	// on the operating system's file system.
	FS vfs.FS
	// Readers is the size of the read connection pool. Default: 4.
	Readers int
	// BusyTimeout is how long a connection waits for a lock another
	// process holds. Default: 5s.
	BusyTimeout time.Duration
	// Logger receives what Open found (a missing or corrupt state.db) and
	// projector failures. Default: slog.Default().
	Logger *slog.Logger
	// Progress, if set, is told about a rebuild Open runs.
	Progress func(RebuildProgress)
	// QueueLimit is how many appended records the projector holds before
	// it stops queueing a thread's records and catches up from its rollout
	// instead. Default: 65536.
	QueueLimit int
	// MaxLag bounds how far the projector may fall behind the appends:
	// while it holds this many acknowledged records unapplied, Enqueue
	// waits for it (backpressure, as a database's write stall). A read
	// waits for what was acknowledged before it, so MaxLag is also what
	// bounds a read's wait while appends outrun the projector. Appends
	// never wait while the projector keeps up. Default: 8192; negative:
	// never wait (the lag, and a read's wait, grow without bound under a
	// load the projector cannot keep up with).
	MaxLag int
	// Linger is how long the projector waits for more appends before it
	// applies a small batch (fewer than 256 records), so that appends at a
	// steady trickle share a transaction instead of taking one each. A
	// read, Flush or Close does not wait for it. Default: 10ms; negative:
	// none.
	Linger time.Duration
	// Check runs SQLite's quick_check over the whole file at open, whose
	// cost grows with the database. Default: false: open costs the same
	// on day 1,000 as on day 1, and corruption is caught where it shows
	// (any statement that finds it: see ErrCorrupt); CheckIntegrity checks
	// everything on demand (rolloutctl verify --state).
	Check bool
}

func (o Options) withDefaults() Options {
	if o.FS == nil {
		o.FS = vfs.OS
	}
	if o.Readers <= 0 {
		o.Readers = 4
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.QueueLimit <= 0 {
		o.QueueLimit = 65536
	}
	if o.MaxLag == 0 {
		o.MaxLag = 8192
	}
	if o.Linger == 0 {
		o.Linger = 10 * time.Millisecond
	}
	return o
}

// OpenReport says what Open found and did. Anything but a clean open is
// also logged.
type OpenReport struct {
	// Created says there was no state.db (or it was corrupt); a new one was
	// made and the projections rebuilt from the rollouts.
	Created bool `json:"created"`
	// Corrupt says the file was not a database or failed its integrity
	// check. It was kept aside as KeptAs, with the reason.
	Corrupt bool   `json:"corrupt"`
	Reason  string `json:"reason,omitempty"`
	KeptAs  string `json:"kept_as,omitempty"`
	// BusinessStateLost says goals, plans, subagent edges, mailbox and
	// diagnostics that lived only in the old state.db are gone. True for a
	// corrupt file, and for a missing one when rollouts already existed.
	BusinessStateLost bool `json:"business_state_lost"`
	// MigratedFrom is the schema version found (0: none) when it was older
	// than this code's.
	MigratedFrom int `json:"migrated_from,omitempty"`
	// Rebuild is the rebuild Open ran, if any: on a new database, or to
	// finish one that was interrupted.
	Rebuild *RebuildReport `json:"rebuild,omitempty"`
}

// Store is an open state.db. It is safe for concurrent use.
type Store struct {
	opts Options

	catchUps  atomic.Int64                    // Metrics
	turnLoads atomic.Int64                    // turns' slots read from their rows (tests)
	damaged   atomic.Int64                    // Metrics
	progress  atomic.Pointer[RebuildProgress] // of the rebuild running
	w         *sql.DB                         // the one writer connection
	r         *sql.DB                         // the reader pool (the writer itself when in memory)

	// wmu orders write transactions: the projector, read-repair, rebuild
	// and the business API take it, so a thread's rows are only ever
	// brought forward from a state a single writer left.
	wmu   sync.Mutex
	stmts map[string]*sql.Stmt

	proj   *projector
	idx    *searchIndex
	report OpenReport

	// txOps and txCaches are what the write transaction in progress (wmu
	// held) hands to the search index and keeps of turns in progress, if
	// it commits.
	txOps    []indexOp
	txCaches map[string]*turnCache
	txRows   map[string]*threadRow
	// rowCache and turnCaches are thread rows and turns in progress as
	// this store last committed them (items.go), good while no other
	// connection has committed: cacheDV is SQLite's data_version then.
	cacheMu    sync.Mutex
	rowCache   map[string]*threadRow
	turnCaches map[string]*turnCache
	cacheDV    int64

	// rstmts are the reader's prepared statements (rstmt).
	rstmtMu sync.Mutex
	rstmts  map[string]*sql.Stmt
	// pageCache holds thread rows List has read, each good while its rev
	// is the row's (list.go).
	pageMu    sync.Mutex
	pageCache map[string]*threadRow

	corrupt    atomic.Pointer[string] // why a statement found state.db corrupt
	recMu      sync.Mutex
	rec        reconciled  // what the last reconcile found matching
	rebuilding atomic.Bool // a Rebuild of this store runs: rows are incomplete
	// now tells whether a directory version is settled (tests move it).
	now     func() time.Time
	closed  atomic.Bool
	closing atomic.Bool // Close has begun: the projector drains, then closed
}

// ErrClosed is returned when the store has been closed; it matches
// rollout.ErrClosed (errors.Is).
var ErrClosed error = &rollout.ClosedError{What: "projection: store"}

// live fails once the store is closed. (A call racing Close may instead
// get database/sql's "database is closed"; never a panic.)
func (s *Store) live() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Open opens (creating, migrating or replacing as needed) the state.db at
// opts.Path. A missing database is created and rebuilt from the rollouts;
// a corrupt one is kept aside under a new name, recreated and rebuilt, and
// the loss of its business state reported in the OpenReport and the log.
// A database of a newer schema is refused with ErrSchemaTooNew and left as
// it is.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Root == "" {
		return nil, errors.New("projection: Options.Root is required")
	}
	s := &Store{opts: opts.withDefaults(), stmts: map[string]*sql.Stmt{}, turnCaches: map[string]*turnCache{}, rowCache: map[string]*threadRow{}, pageCache: map[string]*threadRow{}, rstmts: map[string]*sql.Stmt{}, now: time.Now}
	existed, err := s.fileExists()
	if err != nil {
		return nil, err
	}
	if !existed {
		// A -wal or -shm without its database (the database deleted by
		// hand, or a crash while keeping a corrupt one aside) must not be
		// replayed into the new one.
		if err := s.keepOrphansAside(); err != nil {
			return nil, err
		}
	}
	found, reason, err := s.openDB(ctx, existed)
	switch {
	case err != nil:
		return nil, err
	case reason != "":
		s.closeDB()
		keptAs, err := s.keepAside()
		if err != nil {
			return nil, errors.WithHint(errors.Wrapf(err, "state.db is corrupt (%s) and could not be moved aside", reason),
				"move "+s.opts.Path+" away by hand; the rollouts hold every projection, but its business state is lost")
		}
		s.report = OpenReport{Created: true, Corrupt: true, Reason: reason, KeptAs: keptAs, BusinessStateLost: true}
		s.opts.Logger.Error("rolloutdb: state.db is corrupt; kept aside, projections rebuilt from rollouts; BUSINESS STATE LOST (goals, plans, subagent edges, mailbox, diagnostics)",
			"path", s.opts.Path, "reason", reason, "kept_as", keptAs)
		if found, _, err = s.openDB(ctx, false); err != nil {
			return nil, err
		}
	case !existed:
		s.report.Created = true
	}
	if found > 0 && found < SchemaVersion() {
		s.report.MigratedFrom = found
		s.opts.Logger.Info("rolloutdb: state.db migrated", "path", s.opts.Path, "from", found, "to", SchemaVersion())
	}
	gen, err := s.generation(ctx)
	if err != nil {
		s.closeDB()
		return nil, err
	}
	if err := s.openIndex(ctx, gen); err != nil {
		s.closeDB()
		return nil, err
	}
	if err := s.takeStaleMark(ctx); err != nil {
		// The indexer runs on the connections: stop it first.
		_ = s.idx.close()
		s.closeDB()
		return nil, err
	}
	s.proj = newProjector(s)
	go s.proj.run() // before anything can fail: Close waits for it
	resume, err := s.rebuildPending(ctx)
	if err != nil {
		s.Close()
		return nil, err
	}
	if s.report.Created || resume {
		rep, err := s.Rebuild(ctx, RebuildOptions{Progress: s.opts.Progress})
		if err != nil {
			s.Close()
			return nil, err
		}
		s.report.Rebuild = &rep
		if s.report.Created && !s.report.Corrupt && rep.Threads > 0 && s.opts.Path != "" {
			s.report.BusinessStateLost = true
			s.opts.Logger.Warn("rolloutdb: state.db was missing; projections rebuilt from rollouts; business state it held, if any, is lost",
				"path", s.opts.Path, "threads", rep.Threads)
		}
	}
	return s, nil
}

// takeStaleMark turns journal.StaleMark (a dead journal was replayed: its
// process may have died before projecting what it acknowledged) into a
// sweep entry in the change log, which every reader, in this process and
// others, answers with one check of every rollout (reconcile).
func (s *Store) takeStaleMark(ctx context.Context) error {
	mark := filepath.Join(s.opts.Root, journal.Dir, journal.StaleMark)
	if _, err := s.opts.FS.Stat(mark); vfs.IsNotExist(err) {
		return nil
	} else if err != nil {
		return errors.Wrapf(err, "stat %s", mark)
	}
	if err := s.writeDurable(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO thread_changes (id) VALUES (?)`, sweepMark)
		return errors.Wrap(err, "log a sweep")
	}); err != nil {
		return err
	}
	if err := s.opts.FS.Remove(mark); err != nil && !vfs.IsNotExist(err) {
		return errors.Wrapf(err, "remove %s", mark)
	}
	return nil
}

// sweepMark, in the change log, asks every reader to check every rollout
// once (no thread id is empty).
const sweepMark = ""

// Report returns what Open found and did.
func (s *Store) Report() OpenReport { return s.report }

func (s *Store) fileExists() (bool, error) {
	if s.opts.Path == "" {
		return false, nil
	}
	_, err := os.Stat(s.opts.Path)
	if err == nil {
		return true, nil
	}
	if os.IsNotExist(err) {
		return false, nil
	}
	return false, errors.Wrapf(err, "stat %s", s.opts.Path)
}

// sqliteMagic starts every SQLite database file.
var sqliteMagic = []byte("SQLite format 3\x00")

// openDB opens the connections, checks the file and migrates it. A
// non-empty reason says the file is corrupt (the connections are open and
// must be closed).
func (s *Store) openDB(ctx context.Context, existed bool) (found int, reason string, err error) {
	if existed {
		if reason := checkMagic(s.opts.Path); reason != "" {
			return 0, reason, nil
		}
		if err := s.probeVersion(ctx); err != nil {
			return 0, "", err
		}
	}
	if err := s.connect(); err != nil {
		return 0, "", err
	}
	if existed {
		if reason := s.corruptSeen(); reason != "" {
			return 0, reason, nil
		}
	}
	if existed && s.opts.Check {
		if reason := s.quickCheck(ctx); reason != "" {
			return 0, reason, nil
		}
	}
	found, err = migrate(ctx, s.w, SchemaVersion())
	if err == nil {
		err = s.prepare(ctx)
	}
	if err != nil {
		if existed && isNotADB(err) {
			return 0, err.Error(), nil
		}
		s.closeDB()
		return found, "", errors.Wrapf(err, "state.db %s", s.opts.Path)
	}
	return found, "", nil
}

// probeVersion refuses a database of a newer schema before anything
// (even switching it to WAL) touches it. It reads through a read-only
// connection; errors other than a newer schema are left to the checks
// that follow.
func (s *Store) probeVersion(ctx context.Context) error {
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: s.opts.Path}).EscapedPath()+"?mode=ro")
	if err != nil {
		return nil
	}
	defer db.Close()
	var v sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT max(version) FROM schema_migrations`).Scan(&v); err != nil {
		return nil
	}
	if int(v.Int64) > SchemaVersion() {
		return errors.WithHint(errors.Wrapf(ErrSchemaTooNew, "%s is at schema %d; this version knows up to %d", s.opts.Path, v.Int64, SchemaVersion()),
			"use the newer rolloutdb that wrote it; this version leaves the file untouched")
	}
	return nil
}

func checkMagic(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, len(sqliteMagic))
	n, err := io.ReadFull(f, b)
	if n == 0 && err == io.EOF {
		return "" // an empty file is a valid empty database
	}
	if !bytes.Equal(b[:n], sqliteMagic) {
		return "not a SQLite database (bad file header)"
	}
	return ""
}

// IntegrityReport is what CheckIntegrity found: SQLite's integrity_check
// of state.db and of the full-text index (search.db), "ok" when sound.
type IntegrityReport struct {
	StateDB  []string `json:"state_db"`
	SearchDB []string `json:"search_db,omitempty"`
}

// OK reports whether both files are sound.
func (r IntegrityReport) OK() bool {
	ok := func(lines []string) bool { return len(lines) == 0 || (len(lines) == 1 && lines[0] == "ok") }
	return ok(r.StateDB) && ok(r.SearchDB)
}

// CheckIntegrity runs SQLite's full integrity_check over state.db and
// search.db: every page read, so its cost grows with the files (Open does
// not run it; rolloutctl verify --state does). A state.db found corrupt is
// marked as a statement finding it would (ErrCorrupt).
func (s *Store) CheckIntegrity(ctx context.Context) (rep IntegrityReport, err error) {
	defer s.guard(&err)
	check := func(db *sql.DB) ([]string, error) {
		rows, err := db.QueryContext(ctx, `PRAGMA integrity_check(20)`)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				return out, err
			}
			out = append(out, line)
		}
		return out, rows.Err()
	}
	if rep.StateDB, err = check(s.r); err != nil {
		return rep, errors.Wrap(err, "check state.db")
	}
	if len(rep.StateDB) > 0 && rep.StateDB[0] != "ok" {
		s.markCorrupt("integrity check: " + strings.Join(rep.StateDB, "; "))
		return rep, nil // (guard: ErrCorrupt)
	}
	if s.idx != nil && s.idx.r != nil {
		if rep.SearchDB, err = check(s.idx.r); err != nil {
			return rep, errors.Wrap(err, "check search.db")
		}
	}
	return rep, nil
}

func (s *Store) quickCheck(ctx context.Context) string {
	rows, err := s.w.QueryContext(ctx, `PRAGMA quick_check`)
	if err != nil {
		return "integrity check failed: " + err.Error()
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return "integrity check failed: " + err.Error()
		}
		if line != "ok" && len(problems) < 3 {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return "integrity check failed: " + err.Error()
	}
	if len(problems) > 0 {
		return "integrity check: " + strings.Join(problems, "; ")
	}
	return ""
}

// isNotADB reports whether err is SQLite finding the database corrupt
// (SQLITE_CORRUPT, SQLITE_NOTADB and their extended codes).
func isNotADB(err error) bool {
	if err == nil {
		return false
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			return true
		}
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "not a database") || strings.Contains(msg, "database disk image is malformed") ||
		strings.Contains(msg, "SQLITE_CORRUPT") || strings.Contains(msg, "SQLITE_NOTADB")
}

// ErrCorrupt is returned when state.db was found corrupt while in use. The
// store refuses further use; the next Open keeps the file aside and
// rebuilds the projections from the rollouts (reporting the business state
// lost), as it does for a file found corrupt at open. Appends are not
// affected: the rollouts hold them.
var ErrCorrupt = errors.New("projection: state.db is corrupt")

// corruptMarkSuffix names the file, beside state.db, that says a statement
// found it corrupt (and why): the next Open treats it as corrupt.
const corruptMarkSuffix = ".corrupt-found"

// guard turns an error that says state.db is corrupt into ErrCorrupt, the
// first time marking the file for the next Open and logging it.
// Once marked, every guarded call fails with ErrCorrupt, whatever it
// found.
func (s *Store) guard(err *error) {
	if reason := s.corrupt.Load(); reason != nil {
		*err = s.corruptError(*reason)
		return
	}
	if !isNotADB(*err) {
		return
	}
	s.markCorrupt((*err).Error())
	*err = s.corruptError(*s.corrupt.Load())
}

// markCorrupt records, once, that state.db is corrupt: logged, and marked
// beside the file for the next Open.
func (s *Store) markCorrupt(reason string) {
	if !s.corrupt.CompareAndSwap(nil, &reason) {
		return
	}
	s.opts.Logger.Error("rolloutdb: state.db is corrupt; reads refuse from now on, and the next open keeps it aside and rebuilds the projections from the rollouts (business state it holds will be lost)",
		"path", s.opts.Path, "reason", reason)
	if s.opts.Path != "" {
		if err := writeMark(s.opts.Path+corruptMarkSuffix, reason); err != nil {
			s.opts.Logger.Error("rolloutdb: could not mark state.db corrupt", "path", s.opts.Path, "err", err.Error())
		}
	}
}

func (s *Store) corruptError(reason string) error {
	return errors.WithHint(errors.Wrapf(ErrCorrupt, "%s (%s)", s.opts.Path, reason),
		"close and open the workspace again: the file is kept aside and the projections are rebuilt from the rollouts; appends are not affected")
}

// corruptSeen returns why an earlier process found state.db corrupt in
// use, if one did ("" otherwise). keepAside moves the mark with the file.
func (s *Store) corruptSeen() string {
	b, err := os.ReadFile(s.opts.Path + corruptMarkSuffix)
	if err != nil {
		return ""
	}
	return "found corrupt in use: " + strings.TrimSpace(string(b))
}

func writeMark(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text + "\n")
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (s *Store) connect() error {
	busy := s.opts.BusyTimeout.Milliseconds()
	if s.opts.Path == "" {
		// One connection serves reads and writes: an in-memory database
		// lives as long as its connection.
		db, err := sql.Open("sqlite", fmt.Sprintf("file::memory:?_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)", busy))
		if err != nil {
			return errors.Wrap(err, "open in-memory state.db")
		}
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		db.SetConnMaxLifetime(0)
		db.SetConnMaxIdleTime(0)
		s.w, s.r = db, db
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(s.opts.Path), 0o755); err != nil {
		return errors.Wrap(err, "create state.db directory")
	}
	// synchronous=NORMAL for projections: they are rebuilt from the
	// rollouts, and a commit lost to a power cut is caught up by the next
	// read (the anchors say how far each row got); an fsync per projector
	// batch would compete with the rollouts' own. Business state exists
	// nowhere else: writeDurable commits it with synchronous=FULL, which
	// syncs the write-ahead log up to and including it.
	base := "file:" + (&url.URL{Path: s.opts.Path}).EscapedPath() +
		fmt.Sprintf("?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)", busy)
	// A large page cache for the writer: projecting touches the b-trees of
	// threads, turns, items and the index at once.
	w, err := sql.Open("sqlite", base+"&_pragma=cache_size(-65536)&_pragma=wal_autocheckpoint(10000)&_txlock=immediate")
	if err != nil {
		return errors.Wrapf(err, "open %s", s.opts.Path)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	r, err := sql.Open("sqlite", base+"&_pragma=query_only(1)")
	if err != nil {
		_ = w.Close()
		return errors.Wrapf(err, "open %s", s.opts.Path)
	}
	r.SetMaxOpenConns(s.opts.Readers)
	r.SetMaxIdleConns(s.opts.Readers)
	s.w, s.r = w, r
	return nil
}

func (s *Store) closeDB() {
	s.closeReadStmts()
	for _, st := range s.stmts {
		_ = st.Close()
	}
	s.stmts = map[string]*sql.Stmt{}
	if s.r != nil && s.r != s.w {
		_ = s.r.Close()
	}
	if s.w != nil {
		_ = s.w.Close()
	}
	s.w, s.r = nil, nil
}

// keepAside renames a corrupt state.db (and its -wal and -shm) to
// state.db.corrupt-<unix ns> so nothing in it is destroyed.
func (s *Store) keepAside() (string, error) {
	kept := fmt.Sprintf("%s.corrupt-%d", s.opts.Path, time.Now().UnixNano())
	if err := os.Rename(s.opts.Path, kept); err != nil {
		return "", err
	}
	for _, suffix := range []string{"-wal", "-shm", corruptMarkSuffix} {
		if err := os.Rename(s.opts.Path+suffix, kept+suffix); err != nil && !os.IsNotExist(err) {
			return kept, err
		}
	}
	if err := vfs.OS.SyncDir(filepath.Dir(s.opts.Path)); err != nil {
		return kept, err
	}
	return kept, nil
}

func (s *Store) keepOrphansAside() error {
	if s.opts.Path == "" {
		return nil
	}
	// A corruption mark of a file that is gone names nothing.
	if err := os.Remove(s.opts.Path + corruptMarkSuffix); err != nil && !os.IsNotExist(err) {
		return errors.Wrapf(err, "remove %s", s.opts.Path+corruptMarkSuffix)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		p := s.opts.Path + suffix
		if _, err := os.Stat(p); err == nil {
			kept := fmt.Sprintf("%s.orphan-%d", p, time.Now().UnixNano())
			if err := os.Rename(p, kept); err != nil {
				return errors.Wrapf(err, "keep aside %s", p)
			}
			s.opts.Logger.Warn("rolloutdb: state.db journal without its database kept aside", "path", p, "kept_as", kept)
		}
	}
	return nil
}

// Close waits for the projector to apply what was queued, then closes the
// database.
func (s *Store) Close() error {
	if s.closing.Swap(true) {
		return nil
	}
	if s.proj != nil {
		s.proj.close() // applies what is queued: the store is still open
	}
	s.closed.Store(true)
	s.wmu.Lock()
	defer s.wmu.Unlock()
	var err error
	if s.idx != nil {
		err = s.idx.close()
	}
	// The handles stay (closed): a read racing Close gets an error from
	// database/sql rather than a nil pointer.
	s.closeReadStmts()
	for _, st := range s.stmts {
		_ = st.Close()
	}
	if s.r != s.w {
		err = errors.CombineErrors(err, s.r.Close())
	}
	return errors.CombineErrors(err, s.w.Close())
}

// write runs fn in one write transaction.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.writeLocked(ctx, fn)
}

// writeDurable runs fn in one write transaction that is on disk when it
// returns (business state and the cleanup queue: nothing else holds them).
func (s *Store) writeDurable(ctx context.Context, fn func(tx *sql.Tx) error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.live(); err != nil {
		return err
	}
	if _, err := s.w.ExecContext(ctx, "PRAGMA synchronous=FULL"); err != nil {
		return errors.Wrap(err, "state.db: synchronous=FULL")
	}
	err := s.writeLocked(ctx, fn)
	if _, rerr := s.w.ExecContext(context.Background(), "PRAGMA synchronous=NORMAL"); rerr != nil && err == nil {
		err = errors.Wrap(rerr, "state.db: synchronous=NORMAL")
	}
	return err
}

func (s *Store) writeLocked(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := s.live(); err != nil {
		return err
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return errors.Wrap(err, "state.db: begin")
	}
	s.txOps, s.txCaches, s.txRows = s.txOps[:0], map[string]*turnCache{}, map[string]*threadRow{}
	// Another process committed since the caches were filled: they may
	// not be what the rows are any more.
	var dv int64
	if err := tx.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&dv); err != nil {
		_ = tx.Rollback()
		return errors.Wrap(err, "state.db: data_version")
	}
	if dv != s.cacheDV {
		s.clearTurnCaches()
		s.cacheDV = dv
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return errors.Wrap(err, "state.db: commit")
	}
	if s.idx != nil {
		s.idx.enqueue(slices.Clone(s.txOps))
	}
	s.publishCaches(s.txRows, s.txCaches)
	return nil
}

// generationKey is state.db's meta row naming its projections' build:
// search.db records it, and an index of another build is made anew.
const generationKey = "index_generation"

// generation returns state.db's generation, drawing one if it has none.
func (s *Store) generation(ctx context.Context) (string, error) {
	var gen string
	err := s.write(ctx, func(tx *sql.Tx) error {
		g, ok, err := metaGet(ctx, tx, generationKey)
		if err != nil || ok {
			gen = g
			return err
		}
		gen = newGeneration()
		return metaSet(ctx, tx, generationKey, gen)
	})
	return gen, err
}

// preparedQueries run once per record or per thread: prepare runs them
// once per connection. (A statement cannot be prepared inside a
// transaction on the one writer connection without waiting for itself, so
// they are all prepared at open.) qInsertItem is the one-row statement
// of its batches.
var preparedQueries = slices.Concat([]string{upsertThread, qDiag, qArtifactRef, qCheckpoint, qUpdateItem, qTurnItems, qLookupTurn, qLatestCheckpoint, qLoadThread, qEnsureTID, qOpenTurn}, qInsertItemsN, upsertTurnsN)

func (s *Store) prepare(ctx context.Context) error {
	for _, q := range preparedQueries {
		st, err := s.w.PrepareContext(ctx, q)
		if err != nil {
			return errors.Wrapf(err, "prepare %.60s", q)
		}
		s.stmts[q] = st
	}
	return nil
}

// exec runs a statement in tx, prepared if it is one of preparedQueries.
func (s *Store) exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	var res sql.Result
	var err error
	if st, ok := s.stmts[query]; ok {
		res, err = tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	} else {
		res, err = tx.ExecContext(ctx, query, args...)
	}
	return res, errors.Wrapf(err, "exec %.60s", query)
}

// stmt is a prepared statement of preparedQueries, in tx.
func (s *Store) stmt(tx *sql.Tx, query string) *sql.Stmt { return tx.Stmt(s.stmts[query]) }

// maxReadStmts bounds the reader's prepared statements. List's queries
// vary with its options (scope, filters, cursor, sort: under 200
// shapes); past the bound a query runs unprepared. A cached statement is
// never closed before Close, so no reader loses the one it holds.
const maxReadStmts = 256

// rstmt returns query prepared on the reader pool (each connection
// prepares it once: a statement's parse costs as much as a small read),
// or nil when the cache is full (run the query unprepared).
func (s *Store) rstmt(ctx context.Context, query string) (*sql.Stmt, error) {
	s.rstmtMu.Lock()
	st, full := s.rstmts[query], len(s.rstmts) >= maxReadStmts
	s.rstmtMu.Unlock()
	if st != nil || full {
		return st, nil
	}
	if s.closed.Load() {
		return nil, ErrClosed
	}
	// Prepared outside the lock: a slow prepare (every connection busy)
	// holds up no other reader.
	st, err := s.r.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	s.rstmtMu.Lock()
	defer s.rstmtMu.Unlock()
	if have := s.rstmts[query]; have != nil || s.closed.Load() {
		_ = st.Close() // another reader was first, or the store closed
		if have == nil {
			return nil, ErrClosed
		}
		return have, nil
	}
	s.rstmts[query] = st
	return st, nil
}

// rquery runs a read query on the pool, prepared when it can be.
func (s *Store) rquery(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := s.rstmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return s.r.QueryContext(ctx, query, args...)
	}
	return st.QueryContext(ctx, args...)
}

// txQuery runs a read query in tx, prepared when it can be. (Get the
// statement with rstmt before the transaction: an in-memory store has one
// connection.)
func txQuery(ctx context.Context, tx *sql.Tx, st *sql.Stmt, query string, args ...any) (*sql.Rows, error) {
	if st == nil {
		return tx.QueryContext(ctx, query, args...)
	}
	return tx.StmtContext(ctx, st).QueryContext(ctx, args...)
}

func (s *Store) closeReadStmts() {
	s.rstmtMu.Lock()
	defer s.rstmtMu.Unlock()
	for q, st := range s.rstmts {
		_ = st.Close()
		delete(s.rstmts, q)
	}
}

// metaGet reads a meta value from the writer side (wmu held).
func metaGet(ctx context.Context, tx *sql.Tx, key string) (string, bool, error) {
	var v string
	err := tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return v, err == nil, errors.Wrapf(err, "read meta %s", key)
}

const qMetaSet = `INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`

func metaSet(ctx context.Context, tx *sql.Tx, key, value string) error {
	_, err := tx.ExecContext(ctx, qMetaSet, key, value)
	return errors.Wrapf(err, "write meta %s", key)
}

func metaDelete(ctx context.Context, tx *sql.Tx, key string) error {
	_, err := tx.ExecContext(ctx, `DELETE FROM meta WHERE key = ?`, key)
	return errors.Wrapf(err, "delete meta %s", key)
}

// CopyTo writes a consistent copy of state.db, business state included,
// to path (which must not exist), from one read transaction: appends and
// the projector go on meanwhile. It uses SQLite's VACUUM INTO, so the copy
// is compact and has no write-ahead log.
func (s *Store) CopyTo(ctx context.Context, path string) (err error) {
	defer s.guard(&err)
	if err := s.live(); err != nil {
		return err
	}
	if s.r == s.w { // in memory
		_, err := s.w.ExecContext(ctx, `VACUUM INTO ?`, path)
		return errors.Wrapf(err, "copy state.db to %s", path)
	}
	// A reader connection, not the writer's: the projector goes on. It is
	// query_only, which VACUUM INTO's write of the new file counts as a
	// write: lifted for the copy, on this connection alone.
	conn, err := s.r.Conn(ctx)
	if err != nil {
		return errors.Wrap(err, "copy state.db")
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `PRAGMA query_only=0`); err != nil {
		return errors.Wrap(err, "copy state.db")
	}
	_, err = conn.ExecContext(ctx, `VACUUM INTO ?`, path)
	if _, rerr := conn.ExecContext(context.Background(), `PRAGMA query_only=1`); rerr != nil {
		// Not back in the pool read-only: drop the connection.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		err = errors.CombineErrors(err, rerr)
	}
	return errors.Wrapf(err, "copy state.db to %s", path)
}
