package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// Options configure a fleet Log. The zero value works.
type Options struct {
	// Workspace is the workspace's name in the database. Default
	// "default". A DSN's workspace parameter (SplitDSN) sets it too.
	Workspace string
	// WorkspaceID is the id a new workspace is given (the threads'
	// headers carry it). Default: a new random id. An existing
	// workspace keeps its own.
	WorkspaceID string
	// Host names this host process to the others (the owner that an
	// OwnerError names). It must be unique among live processes: a second
	// process under a live host's name takes its place, and fences it.
	// Default: the machine's host name, the pid and a random suffix.
	Host string
	// LeaseTTL is how long a host's lease lasts without renewal, on
	// database time; it is renewed every third of it. A dead host's
	// threads can be taken over after at most this long. Default 10s.
	LeaseTTL time.Duration
	// CommitTimeout is how long an append waits for its commit, retries
	// included, before it fails with ErrUnavailable. Default 2s.
	CommitTimeout time.Duration
	// RequireSyncStandby refuses to open unless the database commits to a
	// synchronous standby (synchronous_standby_names is set and
	// synchronous_commit is on or stronger).
	RequireSyncStandby bool
	// CompressAbove compresses a frame's payload larger than this many
	// bytes (rollout.Options.CompressAbove). Default 0: never.
	CompressAbove int
	// MaxConns bounds the connection pool. Default 8.
	MaxConns int32
	// MaxRoundBytes bounds the frame bytes of one commit round. Default
	// 8 MiB.
	MaxRoundBytes int
	// RoundWindow is how long a commit round may wait, before it goes
	// out, for the threads of the round before it to submit again, so
	// that appenders that each wait for their ack share one round rather
	// than alternate between two (committer.gather). Only a host whose
	// last round's threads all came back within a window waits. Default
	// 200µs, at most a quarter of CommitTimeout; negative: never wait.
	RoundWindow time.Duration
	// Logger receives warnings (a lost lease). Default slog.Default().
	Logger *slog.Logger
	// PollInterval is how often a follower or a watcher looks at its
	// threads when no notice came (a notice lost, the listening
	// connection broken): the longest a lost notice delays a record.
	// Default 1s.
	PollInterval time.Duration
	// NoNotify stops this host from sending notices of what it commits:
	// followers on other hosts then see its appends at their next poll.
	NoNotify bool

	// testing holds test-only knobs (export_test.go).
	testing struct {
		notifyDSN, listenDSN string // the notifier's and the listener's connections go there
	}
}

func (o Options) withDefaults() Options {
	if o.Workspace == "" {
		o.Workspace = "default"
	}
	if o.Host == "" {
		name, _ := os.Hostname()
		o.Host = name + "-" + strconv.Itoa(os.Getpid()) + "-" + randomHex(4)
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 10 * time.Second
	}
	if o.CommitTimeout <= 0 {
		o.CommitTimeout = 2 * time.Second
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 8
	}
	if o.MaxRoundBytes <= 0 {
		o.MaxRoundBytes = 8 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.RoundWindow == 0 {
		o.RoundWindow = 200 * time.Microsecond
	}
	// A round's wait counts against its frames' CommitTimeout.
	o.RoundWindow = min(o.RoundWindow, o.CommitTimeout/4)
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	return o
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// SplitDSN takes the workspace parameter out of a postgres:// DSN
// ("postgres://host/db?workspace=w"): PostgreSQL would take it for a
// setting of its own.
func SplitDSN(dsn string) (pgDSN, workspace string, err error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", "", errors.Newf("fleet: %q is not a postgres:// URL", redact(dsn))
	}
	q := u.Query()
	workspace = q.Get("workspace")
	q.Del("workspace")
	u.RawQuery = q.Encode()
	return u.String(), workspace, nil
}

// redact drops a DSN's password, for messages.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// A Log is one host's view of a fleet workspace: its lease, the threads it
// owns and its commit rounds. Use one per host process (or per DB).
type Log struct {
	opts Options
	pool *pgxpool.Pool
	ws   int32
	wsID string

	// incarnation is the host's ownership token (lease).
	mu          sync.Mutex
	incarnation int64
	// handles are the threads this Log has open (or is opening), by id:
	// a thread its own incarnation owns and no handle holds (a Close that
	// could not release it) is this Log's to take again.
	handles map[string]bool
	closed  bool

	com  *committer
	note *notifier
	stop chan struct{}
	done sync.WaitGroup
	// bg is cancelled by Close, after stop: it ends the listening
	// connection and the watch.
	bg       context.Context
	cancelBg context.CancelFunc

	// The followers and watchers of this Log, and its listening
	// connection (listen.go).
	live struct {
		sync.Mutex
		users   int                 // followers and watchers
		cancel  context.CancelFunc  // stops the listening connection
		threads map[int64]*followed // by tid
		watch   *watchState
	}
	listens, listenLost, received, reads atomic.Int64

	// testing holds test-only knobs (export_test.go).
	testing struct {
		lose atomic.Int32 // what the next WritePreparedWith loses: loseRequest, loseAnswer
	}
}

// Open connects to the fleet workspace at dsn (a postgres:// URL, or any
// DSN pgx takes), creating or migrating the layout and the workspace, and
// starts this host's lease.
func Open(ctx context.Context, dsn string, o Options) (*Log, error) {
	o = o.withDefaults()
	if pg, ws, err := SplitDSN(dsn); err == nil {
		dsn = pg
		if ws != "" {
			o.Workspace = ws
		}
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, errors.WithHint(errors.Wrapf(err, "fleet: DSN %q", redact(dsn)), "a DSN is postgres://user:password@host:port/database")
	}
	cfg.MaxConns = o.MaxConns
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > o.CommitTimeout {
		cfg.ConnConfig.ConnectTimeout = o.CommitTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, classify(err, "connect to "+redact(dsn))
	}
	l := &Log{opts: o, pool: pool, stop: make(chan struct{})}
	l.bg, l.cancelBg = context.WithCancel(context.Background())
	l.live.threads = map[int64]*followed{}
	if err := l.start(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return l, nil
}

func (l *Log) start(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, l.opts.CommitTimeout+5*time.Second)
	defer cancel()
	if err := l.pool.Ping(pctx); err != nil {
		return classify(err, "connect")
	}
	if l.opts.RequireSyncStandby {
		if err := l.checkSyncStandby(ctx); err != nil {
			return err
		}
	}
	if err := migrate(ctx, l.pool); err != nil {
		return err
	}
	wsID := l.opts.WorkspaceID
	if wsID == "" {
		wsID = rollout.NewID()
	}
	err := l.pool.QueryRow(ctx, `INSERT INTO rolloutdb.workspaces (name, id) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING ws, id`, l.opts.Workspace, wsID).Scan(&l.ws, &l.wsID)
	if err != nil {
		return classify(err, "register workspace "+l.opts.Workspace)
	}
	if err := l.register(ctx); err != nil {
		return err
	}
	l.com = newCommitter(l)
	l.note = newNotifier(l)
	l.done.Add(3)
	go func() { defer l.done.Done(); l.com.run() }()
	go func() { defer l.done.Done(); l.heartbeat() }()
	go func() { defer l.done.Done(); l.note.run() }()
	return nil
}

func (l *Log) checkSyncStandby(ctx context.Context) error {
	var names, commit string
	if err := l.pool.QueryRow(ctx, `SELECT current_setting('synchronous_standby_names'), current_setting('synchronous_commit')`).Scan(&names, &commit); err != nil {
		return classify(err, "read synchronous_standby_names")
	}
	if names == "" || commit == "off" || commit == "local" {
		return errors.WithHint(errors.Wrapf(ErrNoSyncStandby, "synchronous_standby_names %q, synchronous_commit %q", names, commit),
			"set synchronous_standby_names on the primary (and keep synchronous_commit on), or open without RequireSyncStandby")
	}
	return nil
}

// register takes this host's lease with a new incarnation: the threads a
// previous process of the same name owned are fenced.
func (l *Log) register(ctx context.Context) error {
	var inc int64
	err := l.pool.QueryRow(ctx, `INSERT INTO rolloutdb.hosts (ws, host, incarnation, lease_until)
		VALUES ($1, $2, 1, now() + $3::interval)
		ON CONFLICT (ws, host) DO UPDATE SET incarnation = rolloutdb.hosts.incarnation + 1, lease_until = excluded.lease_until
		RETURNING incarnation`, l.ws, l.opts.Host, l.opts.LeaseTTL.String()).Scan(&inc)
	if err != nil {
		return classify(err, "take the lease of host "+l.opts.Host)
	}
	l.mu.Lock()
	l.incarnation = inc
	l.mu.Unlock()
	return nil
}

// heartbeat renews the lease every third of its TTL. A renewal that finds
// the lease expired (the host was paused or cut off past it) does not
// revive it: the host takes a new incarnation, and the threads it owned
// are fenced.
func (l *Log) heartbeat() {
	t := time.NewTicker(l.opts.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.opts.LeaseTTL/3)
		l.mu.Lock()
		inc := l.incarnation
		l.mu.Unlock()
		tag, err := l.pool.Exec(ctx, `UPDATE rolloutdb.hosts SET lease_until = now() + $4::interval
			WHERE ws = $1 AND host = $2 AND incarnation = $3 AND lease_until > now()`, l.ws, l.opts.Host, inc, l.opts.LeaseTTL.String())
		switch {
		case err != nil:
			// Unknown: the lease runs out on its own if this goes on;
			// appends check it in the database.
		case tag.RowsAffected() == 0:
			l.opts.Logger.Warn("rolloutdb: fleet lease lost; the threads this host owned are fenced", "host", l.opts.Host, "incarnation", inc)
			if err := l.register(ctx); err != nil {
				l.opts.Logger.Warn("rolloutdb: fleet lease: could not take a new one", "err", err)
			}
		}
		cancel()
	}
}

// Host returns this host's name.
func (l *Log) Host() string { return l.opts.Host }

// WorkspaceID returns the workspace's id.
func (l *Log) WorkspaceID() string { return l.wsID }

// Pool returns the connection pool (for the fleet's index, which shares
// the database).
func (l *Log) Pool() *pgxpool.Pool { return l.pool }

// Workspace returns the workspace's key in the database's tables.
func (l *Log) Workspace() int32 { return l.ws }

func (l *Log) owner() (string, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.opts.Host, l.incarnation
}

// claim marks a thread as open in this Log; false if it is already.
func (l *Log) claim(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.handles == nil {
		l.handles = map[string]bool{}
	}
	if l.handles[id] {
		return false
	}
	l.handles[id] = true
	return true
}

// unclaim is claim's undoing, at a handle's Close or a failed open.
func (l *Log) unclaim(id string) {
	l.mu.Lock()
	delete(l.handles, id)
	l.mu.Unlock()
}

// openHere is the error for a second handle of a thread in one Log.
func (l *Log) openHere(id string) error {
	return errors.Mark(errors.Newf("fleet: thread %s is open on this host (%s) already", id, l.opts.Host), rollout.ErrThreadLocked)
}

// Close stops the lease and the commit rounds once every Thread is
// closed. The lease is released, so this host's threads are free at once.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	inc := l.incarnation
	l.mu.Unlock()
	close(l.stop)
	l.com.close()
	l.note.close()
	l.cancelBg()
	l.done.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.CommitTimeout)
	defer cancel()
	_, err := l.pool.Exec(ctx, `UPDATE rolloutdb.hosts SET lease_until = now() WHERE ws = $1 AND host = $2 AND incarnation = $3`,
		l.ws, l.opts.Host, inc)
	l.pool.Close()
	return classify(err, "release the lease")
}

func (l *Log) isClosed() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// Abandon stops this host as a crash would: the lease is neither renewed
// nor released, its threads stay owned until the lease expires, and
// nothing is committed or notified after the round in flight. For tests
// and the crash harness.
func (l *Log) Abandon() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	l.mu.Unlock()
	close(l.stop)
	// A round in flight (or an append with other writes) finishes first
	// (the pool's Close waits for its connection); the rounds queued
	// after it fail on the closed pool, as not durable.
	l.pool.Close()
	l.com.close()
	l.note.close()
	l.cancelBg()
	l.done.Wait()
}

// Create makes a new thread with its header frame (seq 1), owned by this
// host: rollout.ErrThreadExists if the workspace has the id.
func (l *Log) Create(ctx context.Context, opened rollout.ThreadOpened) (*Thread, error) {
	if err := rollout.ValidateThreadID(opened.ThreadID); err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	if opened.Created.IsZero() {
		opened.Created = now
	}
	if opened.FormatVersion == 0 {
		opened.FormatVersion = rollout.FormatVersion
	}
	rec, err := rollout.NewRecord(rollout.KindThreadOpened, "", opened)
	if err != nil {
		return nil, err
	}
	rec.Time = opened.Created
	hdr := rollout.NewFileHeader(opened.ThreadID, now)
	p, err := rollout.PrepareFrame([]rollout.Record{rec}, l.opts.CompressAbove, now)
	if err != nil {
		return nil, err
	}
	defer p.Release()
	frame := p.Seal(hdr.FileID, 1, rollout.FileHeaderSize)
	if !l.claim(opened.ThreadID) {
		return nil, l.openHere(opened.ThreadID)
	}
	created := false
	defer func() {
		if !created {
			l.unclaim(opened.ThreadID)
		}
	}()
	host, inc := l.owner()
	ctx, cancel := context.WithTimeout(ctx, l.opts.CommitTimeout)
	defer cancel()
	var tid int64
	err = l.pool.QueryRow(ctx, `WITH h AS (
			SELECT 1 FROM rolloutdb.hosts WHERE ws = $1 AND host = $2 AND incarnation = $3 AND lease_until > now()
		), t AS (
			INSERT INTO rolloutdb.threads (ws, id, location, file_id, header, owner, owner_inc, epoch)
			SELECT $1, $4, 'active', $5, $6, $2, $3, 1 FROM h
			ON CONFLICT (ws, id) DO NOTHING RETURNING tid
		)
		INSERT INTO rolloutdb.frames (tid, off, seq, epoch, data)
		SELECT tid, $7, 1, 1, $8 FROM t RETURNING tid`,
		l.ws, host, inc, opened.ThreadID, int64(hdr.FileID), hdr.Marshal(), int64(rollout.FileHeaderSize), frame).Scan(&tid)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, lerr := l.Locate(ctx, opened.ThreadID); lerr == nil {
			return nil, errors.WithHint(errors.Wrapf(rollout.ErrThreadExists, "thread %s", opened.ThreadID), "open the existing thread instead, or choose another id")
		}
		return nil, errors.Wrapf(ErrFenced, "create %s: the lease of host %s has expired", opened.ThreadID, host)
	}
	if err != nil {
		return nil, classify(err, "create thread "+opened.ThreadID)
	}
	end := int64(rollout.FileHeaderSize + len(frame))
	l.note.noteChange(change{kind: changeCreated, tid: tid, id: opened.ThreadID})
	t := newThread(l, opened.ThreadID, tid, hdr, 1, inc, end, 1, rollout.FileHeaderSize)
	t.created = &createdFrame{res: rollout.AppendResult{FirstSeq: 1, LastSeq: 1, Offset: rollout.FileHeaderSize, End: end, DataCRC: p.DataCRC()},
		rec: p.Records()[0]}
	created = true
	return t, nil
}

// Open takes a thread over for appending: the thread must be at loc
// (an error matching fs.ErrNotExist otherwise). A thread whose owner is
// alive is refused with an *OwnerError (it matches
// rollout.ErrThreadLocked); one released or whose owner's lease expired
// is taken, and its epoch incremented, so its previous owner is fenced.
func (l *Log) Open(ctx context.Context, id, loc string) (*Thread, error) {
	if err := rollout.ValidateThreadID(id); err != nil {
		return nil, err
	}
	if !l.claim(id) {
		return nil, l.openHere(id)
	}
	host, inc := l.owner()
	ctx, cancel := context.WithTimeout(ctx, l.opts.CommitTimeout)
	defer cancel()
	var t *Thread
	defer func() {
		if t == nil {
			l.unclaim(id)
		}
	}()
	err := pgx.BeginTxFunc(ctx, l.pool, readCommitted, func(tx pgx.Tx) error {
		var (
			tid, epoch, fileID int64
			location           string
			header             []byte
			owner              *string
			ownerInc           *int64
			live               *bool
			ownerLease         *time.Time
			ownerNow           *int64
			mine               bool
		)
		// The row is locked first and the owner's lease read after: a
		// join's other rows are not read again when the lock waited for
		// another taker's commit.
		err := tx.QueryRow(ctx, `SELECT tid, location, file_id, header, owner, owner_inc, epoch
			FROM rolloutdb.threads WHERE ws = $1 AND id = $2 FOR UPDATE`, l.ws, id).
			Scan(&tid, &location, &fileID, &header, &owner, &ownerInc, &epoch)
		if err == nil {
			err = tx.QueryRow(ctx, `SELECT
					(SELECT lease_until > now() FROM rolloutdb.hosts WHERE ws = $1 AND host = $2),
					(SELECT lease_until FROM rolloutdb.hosts WHERE ws = $1 AND host = $2),
					(SELECT incarnation FROM rolloutdb.hosts WHERE ws = $1 AND host = $2),
					EXISTS (SELECT 1 FROM rolloutdb.hosts WHERE ws = $1 AND host = $3 AND incarnation = $4 AND lease_until > now())`,
				l.ws, owner, host, inc).Scan(&live, &ownerLease, &ownerNow, &mine)
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return notExist(id, loc)
		}
		if err != nil {
			return err
		}
		if location != loc {
			return notExist(id, loc)
		}
		if !mine {
			return errors.Wrapf(ErrFenced, "open %s: the lease of host %s has expired", id, host)
		}
		// This host's own incarnation owning it with no handle here (a
		// Close that could not release it) is no other owner: it is taken
		// again, and its epoch moves on.
		ours := owner != nil && *owner == host && ownerInc != nil && *ownerInc == inc
		if owner != nil && !ours && live != nil && *live && ownerNow != nil && ownerInc != nil && *ownerNow == *ownerInc {
			return errors.WithHint(&OwnerError{Thread: id, Host: *owner, LeaseUntil: *ownerLease},
				"a host has this thread open: forward the request to it, or open the thread once it closes it (or its lease expires)")
		}
		epoch++
		if _, err := tx.Exec(ctx, `UPDATE rolloutdb.threads SET owner = $2, owner_inc = $3, epoch = $4 WHERE tid = $1`, tid, host, inc, epoch); err != nil {
			return err
		}
		hdr, err := rollout.ParseFileHeader(header)
		if err != nil {
			return errors.Wrapf(err, "%s", l.Path(id))
		}
		end, lastSeq, lastFrame, err := tail(ctx, tx, tid, l.Path(id))
		if err != nil {
			return err
		}
		t = newThread(l, id, tid, hdr, epoch, inc, end, lastSeq, lastFrame)
		return nil
	})
	if err != nil {
		t = nil // the claim goes (deferred)
		var oe *OwnerError
		if errors.As(err, &oe) || errors.Is(err, ErrFenced) || errors.Is(err, errNotExist) {
			return nil, err
		}
		var ce *rollout.CorruptionError
		if errors.As(err, &ce) {
			return nil, err
		}
		return nil, classify(err, "open thread "+id)
	}
	return t, nil
}

// tail finds where a thread's frames end: the end of its last frame, the
// last seq and that frame's offset.
func tail(ctx context.Context, q querier, tid int64, path string) (end int64, lastSeq uint64, lastFrame int64, err error) {
	var off int64
	var data []byte
	err = q.QueryRow(ctx, `SELECT off, substr(data, 1, $2) FROM rolloutdb.frames WHERE tid = $1 ORDER BY off DESC LIMIT 1`,
		tid, rollout.FrameHeaderSize).Scan(&off, &data)
	if errors.Is(err, pgx.ErrNoRows) {
		return rollout.FileHeaderSize, 0, -1, nil
	}
	if err != nil {
		return 0, 0, 0, err
	}
	if len(data) < rollout.FrameHeaderSize {
		return 0, 0, 0, &rollout.CorruptionError{Path: path, Offset: off, Reason: rollout.ReasonTruncated}
	}
	h, reason := rollout.ParseFrameHeader(data)
	if reason != "" {
		return 0, 0, 0, &rollout.CorruptionError{Path: path, Offset: off, Length: rollout.FrameHeaderSize, Reason: reason}
	}
	return off + int64(rollout.FrameHeaderSize+h.Length), h.Seq + uint64(h.Count) - 1, off, nil
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var errNotExist = errors.New("fleet: no such thread")

func notExist(id, loc string) error {
	return errors.Mark(errors.Wrapf(errNotExist, "thread %s (%s)", id, loc), os.ErrNotExist)
}

// Path names a thread in messages: fleet:<workspace>/<thread>.
func (l *Log) Path(id string) string { return "fleet:" + l.opts.Workspace + "/" + id }

// Locate returns where a thread is (its location column), or an error
// matching fs.ErrNotExist.
func (l *Log) Locate(ctx context.Context, id string) (string, error) {
	if err := rollout.ValidateThreadID(id); err != nil {
		return "", err
	}
	var loc string
	err := l.pool.QueryRow(ctx, `SELECT location FROM rolloutdb.threads WHERE ws = $1 AND id = $2`, l.ws, id).Scan(&loc)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", notExist(id, "any location")
	}
	return loc, classify(err, "locate thread "+id)
}
