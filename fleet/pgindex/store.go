package pgindex

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// A Source is where the index reads a thread's records from: its
// rollout's bytes, as the fleet's log keeps them (a *fleet.Log, through a
// two-line adapter: Read returns its *fleet.Snapshot).
type Source interface {
	// Read opens a thread's records for reading: an error matching
	// fs.ErrNotExist if the log has no such thread.
	Read(ctx context.Context, id string) (Snapshot, error)
	// Path names a thread in messages and in ThreadInfo.RolloutPath.
	Path(id string) string
}

// A Snapshot is a thread's rollout bytes as of Read (file header, then
// frames): what rollout.NewReader reads.
type Snapshot interface {
	io.ReaderAt
	// Size is the snapshot's length in bytes: where the thread's frames
	// ended when it was read.
	Size() int64
	// Location is where the thread was: projection.LocationActive or
	// LocationArchived.
	Location() string
	Close() error
}

// Options configure a Store. The zero value works.
type Options struct {
	// WorkspaceID is the workspace's id. A thread whose header names
	// another workspace is still listed, with IdentityError set, and is
	// left out of search. Default: "" (not checked).
	WorkspaceID string
	// Logger receives what Open did and applier failures. Default:
	// slog.Default().
	Logger *slog.Logger
	// QueueLimit is how many enqueued records the applier holds before it
	// stops queueing a thread's frames and catches it up from the Source
	// instead. Default: 65536.
	QueueLimit int
	// MaxLag bounds how far the applier may fall behind: while it holds
	// this many records unapplied, Enqueue waits for it (as
	// projection.Options.MaxLag). Default: 8192; negative: never wait.
	MaxLag int
	// Linger is how long the applier waits for more frames before it
	// applies a small batch (fewer than 256 records), so that frames at a
	// steady trickle share a transaction. Settle and reads do not wait for
	// it. Default: 10ms; negative: none.
	Linger time.Duration
	// MaxCatchUps bounds the catch-ups (and the applier's cycles) that
	// run at once, in all the Stores of the pool (the first one's
	// setting counts). Each holds a connection of the pool for its
	// transaction and takes another, briefly, for each read of the
	// Source; so that they never hold every connection waiting for one,
	// the default is half the pool's MaxConns (at least 1).
	MaxCatchUps int
}

func (o Options) withDefaults(pool *pgxpool.Pool) Options {
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
	if o.MaxCatchUps <= 0 {
		o.MaxCatchUps = max(1, int(pool.Config().MaxConns)/2)
	}
	return o
}

// Store is a fleet workspace's index in PostgreSQL. It implements the
// facade's Index with projection.Store's semantics. It is safe for
// concurrent use, by any number of hosts at once.
type Store struct {
	pool *pgxpool.Pool
	ws   int32
	src  Source
	opts Options

	proj     *projector
	report   projection.OpenReport
	catchUps atomic.Int64                               // Metrics
	damaged  atomic.Int64                               // Metrics
	progress atomic.Pointer[projection.RebuildProgress] // of the rebuild running

	// slots bounds the transactions that read the Source (MaxCatchUps),
	// with the other Stores of the pool.
	slots chan struct{}

	// cache holds thread rows, and their turn in progress, as this store
	// last committed them: good while the row's rev is still theirs.
	cacheMu sync.Mutex
	cache   map[string]*cachedRow

	// rec is where this store last matched the rows with the fleet's
	// threads (reconcile).
	recMu sync.Mutex
	rec   reconciled

	closed  atomic.Bool
	closing atomic.Bool
}

// ErrClosed is returned when the store has been closed; it matches
// rollout.ErrClosed.
var ErrClosed error = &rollout.ClosedError{What: "pgindex: store"}

func (s *Store) live() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Open opens the index of workspace ws (the fleet log's Workspace key) in
// the database of pool, creating or migrating its tables. A workspace
// never indexed before is built from the log (the OpenReport says so);
// a rebuild that was interrupted is finished.
func Open(ctx context.Context, pool *pgxpool.Pool, ws int32, src Source, opts Options) (*Store, error) {
	found, err := migrate(ctx, pool)
	if err != nil {
		return nil, err
	}
	s := &Store{pool: pool, ws: ws, src: src, opts: opts.withDefaults(pool), cache: map[string]*cachedRow{}}
	s.slots = slotsOf(pool, s.opts.MaxCatchUps)
	if found > 0 && found < SchemaVersion {
		s.report.MigratedFrom = found
		s.opts.Logger.Info("rolloutdb: fleet index migrated", "from", found, "to", SchemaVersion)
	}
	_, indexed, err := s.metaGet(ctx, metaIndexed)
	if err != nil {
		return nil, err
	}
	_, resume, err := s.metaGet(ctx, metaWatermark)
	if err != nil {
		return nil, err
	}
	s.proj = newProjector(s)
	go s.proj.run()
	if !indexed || resume {
		s.report.Created = !indexed
		rep, err := s.Rebuild(ctx, projection.RebuildOptions{})
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.report.Rebuild = &rep
		if err := s.metaSet(ctx, metaIndexed, "1"); err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	return s, nil
}

// Report returns what Open found and did.
func (s *Store) Report() projection.OpenReport { return s.report }

// Close waits for the applier to apply what was enqueued. The pool is the
// caller's: it stays open.
func (s *Store) Close() error {
	if s.closing.Swap(true) {
		return nil
	}
	if s.proj != nil {
		s.proj.close()
	}
	s.closed.Store(true)
	return nil
}

// CopyTo is not supported: the index is tables in the fleet's database,
// which the database's own tools copy consistently with the log.
func (s *Store) CopyTo(ctx context.Context, path string) error {
	return errors.WithHint(errors.New("pgindex: CopyTo is not supported for a fleet index"),
		"back up the fleet's database with pg_dump (or a base backup): the index is in it, with the log and the business state")
}

// Meta keys of a workspace (index_meta).
const (
	metaIndexed   = "indexed"           // the workspace's rows were built once
	metaWatermark = "rebuild_watermark" // a rebuild in progress: the last thread done
	metaMatched   = "changes_matched"   // the change log's xmin when the rows last matched it
)

func (s *Store) metaGet(ctx context.Context, key string) (string, bool, error) {
	var v string
	err := s.pool.QueryRow(ctx, `SELECT value FROM rolloutdb.index_meta WHERE ws = $1 AND key = $2`, s.ws, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, errors.Wrapf(err, "pgindex: read %s", key)
	}
	return v, true, nil
}

const qMetaSet = `INSERT INTO rolloutdb.index_meta (ws, key, value) VALUES ($1, $2, $3)
	ON CONFLICT (ws, key) DO UPDATE SET value = excluded.value`

func (s *Store) metaSet(ctx context.Context, key, value string) error {
	_, err := s.pool.Exec(ctx, qMetaSet, s.ws, key, value)
	return errors.Wrapf(err, "pgindex: write %s", key)
}

// txn is a write transaction, and what its appliers stage for the cache
// if it commits.
type txn struct {
	pgx.Tx
	staged map[string]*cachedRow
	// dropped are threads whose cached rows must go if it commits.
	dropped []string
}

// maxAttempts bounds the retries of a transaction that lost a deadlock
// (or a serialization failure): another host's transaction locked the
// same rows in another order.
const maxAttempts = 5

// write runs fn in one transaction, again if it loses a deadlock, and
// keeps what its appliers staged once it commits.
func (s *Store) write(ctx context.Context, what string, fn func(t *txn) error) error {
	if err := s.live(); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		t := &txn{staged: map[string]*cachedRow{}}
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			t.Tx = tx
			return fn(t)
		})
		if err == nil {
			s.publish(t)
			return nil
		}
		if attempt < maxAttempts && retryable(err) {
			continue
		}
		return errors.Wrapf(err, "pgindex: %s", what)
	}
}

// retryable reports whether a transaction failed for its timing alone:
// a deadlock or a serialization failure.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// poolSlots holds the catch-up slots of each pool: shared by the Stores
// of a pool (a host's, a test's several), since what they must not
// exhaust together is its connections.
var poolSlots sync.Map // *pgxpool.Pool -> chan struct{}

func slotsOf(pool *pgxpool.Pool, n int) chan struct{} {
	v, _ := poolSlots.LoadOrStore(pool, make(chan struct{}, n))
	return v.(chan struct{})
}

// withSlot runs fn holding one of the MaxCatchUps slots.
func (s *Store) withSlot(ctx context.Context, fn func() error) error {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.slots }()
	return fn()
}

// sendBatch sends b in tx and reads every result.
func sendBatch(ctx context.Context, tx pgx.Tx, b *pgx.Batch) error {
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}
