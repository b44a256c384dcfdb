package rolloutdb

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/follow"
	"github.com/rolloutdb/rolloutdb/internal/location"
	"github.com/rolloutdb/rolloutdb/journal"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
	"go.opentelemetry.io/otel/metric"
)

// Options configure a DB. The zero value is ready to use.
type Options struct {
	// DataDir is the name of the data directory inside the workspace.
	// Default: ".craft".
	DataDir string
	// Sync is the durability policy of every append. Default:
	// rollout.SyncAlways. A fleet workspace acknowledges an append once
	// PostgreSQL committed it, whatever Sync says.
	Sync rollout.SyncPolicy
	// FS is the file system. Default: vfs.OS. Tests use
	// vfs.NewMemFS and vfs.FaultFS.
	FS vfs.FS
	// Host names the host program in each new thread's header.
	// Default: "rolloutdb".
	Host string
	// CompressAbove is passed to the rollout writer: frame payloads of at
	// least this many bytes are zstd-compressed when it pays. Default: 4096.
	// Negative: never.
	CompressAbove int
	// StatePath is the state.db file. Default: state.db in the data
	// directory; with an FS other than vfs.OS, a private in-memory
	// database (rebuilt from the rollouts at every Open).
	StatePath string
	// Logger receives what the library must say without failing a call: a
	// missing or corrupt state.db found at Open, a projector that fell
	// behind. Default: slog.Default().
	Logger *slog.Logger
	// RebuildProgress, if set, is told about a rebuild of state.db that
	// Open runs (a new, lost or corrupt state.db).
	RebuildProgress func(projection.RebuildProgress)
	// TerminalHook is asked to stop a thread's background terminals when
	// it is archived or deleted. Default: none.
	TerminalHook TerminalHook
	// Artifacts configure spilled tool outputs, attachments and terminal
	// logs (see artifacts.Options): a tool result over SpillAbove (32 KiB
	// by default; negative: never) is spilled by Add and Commit.
	// Artifacts live on the operating system's file system: with another
	// FS nothing is spilled.
	Artifacts artifacts.Options
	// NoJournal makes every SyncAlways append fdatasync its own rollout
	// instead of going through the workspace journal (journal.Journal):
	// for a tool that writes a few records and exits, which the journal's
	// first segment (zero-filled when the first thread is opened) would
	// not repay. Default: false (the journal). A crashed host's journal is
	// replayed at Open either way.
	NoJournal bool
	// JournalSegmentSize is the size of the journal's segments (see
	// journal.Options). Default: 16 MiB on the operating system's
	// file system, 256 KiB on another.
	JournalSegmentSize int64
	// MaxProjectionLag bounds how many acknowledged records the projector
	// may hold unapplied before an append's return waits for it
	// (projection.Options.MaxLag): what a read waits for while appends
	// outrun the projector. Default: 8192; negative: no bound.
	MaxProjectionLag int
	// Fleet configures a fleet workspace: Open with a postgres:// DSN
	// (see FleetOptions). Ignored for a local workspace.
	Fleet FleetOptions
	// MeterProvider, if set, receives the DB's Metrics as OpenTelemetry
	// instruments (rolloutdb.*), read at each collection. The library
	// depends on the API only: the host brings the SDK and its exporter.
	MeterProvider metric.MeterProvider
}

// WorkspaceFormat is the version written in workspace.json.
const WorkspaceFormat = 1

// workspaceFile is workspace.json.
type workspaceFile struct {
	WorkspaceID   string `json:"workspace_id"`
	FormatVersion int    `json:"format_version"`
}

// DB is an open workspace. It is safe for concurrent use.
type DB struct {
	workspace string // absolute workspace path
	root      string // data directory
	id        string
	opts      Options
	fs        vfs.FS

	state Index // state.db and search.db (index.go: the engine seam)
	arts  Blobs // the artifact files (index.go: the engine seam)

	log        Log // the rollouts and the workspace journal (log.go: the engine seam)
	journalRep journal.Report
	fleet      *fleet.Log // a fleet workspace's log, closed after the index

	mu      sync.Mutex
	threads map[string]*Thread
	closed  bool

	follow   *follow.Hub         // followers and watchers (follow.go)
	counters dbCounters          // Metrics
	metrics  metric.Registration // Options.MeterProvider's callback

	// private holds the knobs tests set on this DB (export_test.go);
	// Open sets their defaults.
	private struct {
		importFrame, maxImportRecord int
	}
}

// Open opens the workspace at dir, creating its data directory, workspace
// id and layout on first use. A dir that is a postgres:// DSN opens a
// fleet workspace in that database (FleetOptions); one written as a URL
// of another scheme (s3://bucket/x) is refused with ErrUnsupportedURL,
// before anything is made.
func Open(ctx context.Context, dir string, opts Options) (*DB, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts.DataDir == "" {
		opts.DataDir = ".craft"
	}
	if opts.Host == "" {
		opts.Host = "rolloutdb"
	}
	if opts.FS == nil {
		opts.FS = vfs.OS
	}
	if opts.Artifacts.SpillAbove == 0 {
		opts.Artifacts.SpillAbove = 32 << 10
	}
	if strings.ContainsAny(opts.DataDir, `/\`) || opts.DataDir == "." || opts.DataDir == ".." {
		return nil, errors.Newf("rolloutdb: DataDir %q must be a single directory name", opts.DataDir)
	}
	if isFleetDSN(dir) {
		return openFleet(ctx, dir, opts)
	}
	if err := location.Local("workspace", dir); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, errors.Wrapf(err, "workspace %s", dir)
	}
	db := &DB{workspace: abs, root: filepath.Join(abs, opts.DataDir), opts: opts, fs: opts.FS, threads: map[string]*Thread{}}
	db.private.importFrame, db.private.maxImportRecord = defaultImportFrame, defaultMaxImportRecord
	db.follow = db.newFollowHub(opts.FS == vfs.OS)
	for _, d := range []string{rollout.ActiveDir, rollout.ArchivedDir} {
		if err := db.fs.MkdirAll(filepath.Join(db.root, d)); err != nil {
			return nil, errors.Wrapf(err, "create %s", d)
		}
	}
	if db.id, err = db.loadOrCreateWorkspace(); err != nil {
		return nil, err
	}
	if err := db.writeGitignore(); err != nil {
		return nil, err
	}
	local := &localLog{root: db.root, fs: db.fs, sync: opts.Sync, noJrnl: opts.NoJournal, segSize: opts.JournalSegmentSize,
		compress: opts.CompressAbove, metrics: &db.counters.writers, logger: db.logger,
		onError: func(err error) {
			db.logger().Error("rolloutdb: journal background work failed; its segments are kept", "err", err.Error())
		}}
	// Before any rollout is read: what a crashed process acknowledged
	// through its journal goes back into the rollouts.
	if db.journalRep, err = local.recoverJournals(ctx); err != nil {
		return nil, errors.WithHint(errors.Wrap(err, "rolloutdb: replay the journal of a crashed process"),
			"nothing was changed that the next open cannot redo; fix the cause (disk space, permissions) and open again")
	}
	db.logJournalReport()
	if err := local.settleMoves(ctx); err != nil {
		return nil, err
	}
	db.log = local
	if opts.Artifacts.FS == nil {
		opts.Artifacts.FS = db.fs
	}
	db.arts = artifacts.New(db.root, opts.Artifacts)
	statePath := opts.StatePath
	if statePath == "" && opts.FS == vfs.OS {
		statePath = filepath.Join(db.root, "state.db")
	}
	db.state, err = projection.Open(ctx, projection.Options{
		Path: statePath, Root: db.root, WorkspaceID: db.id, FS: db.fs, Logger: opts.Logger, Progress: opts.RebuildProgress,
		MaxLag: opts.MaxProjectionLag,
	})
	if err != nil {
		return nil, err
	}
	// No terminal of an earlier host is running for this one, unless
	// that host is still alive (another process, say a host beside
	// rolloutctl) and holds the thread. (Artifacts live on the operating
	// system's file system.)
	if opts.FS == vfs.OS {
		live := func(thread string) bool { return errors.Is(db.checkUnlocked(ctx, thread), rollout.ErrThreadLocked) }
		if lost, err := db.arts.MarkLost(live); err != nil || len(lost) > 0 {
			db.logger().Info("rolloutdb: terminals left running by an earlier host marked lost", "terminals", len(lost), "err", fmt.Sprint(err))
		}
	}
	// Deletes that could not finish (a crash, a failing disk) are retried
	// at every open; what still fails stays queued and is reported by gc.
	if pending, err := db.RunCleanup(ctx); err != nil || len(pending) > 0 {
		db.logger().Warn("rolloutdb: cleanup queue not empty after retry", "pending", len(pending), "err", fmt.Sprint(err))
	}
	if opts.MeterProvider != nil {
		if db.metrics, err = db.registerMetrics(opts.MeterProvider); err != nil {
			return nil, errors.CombineErrors(errors.Wrap(err, "rolloutdb: register metrics"), db.Close())
		}
	}
	return db, nil
}

func (db *DB) loadOrCreateWorkspace() (string, error) {
	path := filepath.Join(db.root, "workspace.json")
	b, err := vfs.ReadFile(db.fs, path, 1<<20)
	if err == nil {
		var ws workspaceFile
		if err := json.Unmarshal(b, &ws); err != nil || ws.WorkspaceID == "" {
			return "", errors.WithHint(errors.Wrapf(ErrWorkspaceFormat, "%s is not a workspace file", path),
				"the workspace id identifies every thread here; restore workspace.json from a backup rather than deleting it")
		}
		if ws.FormatVersion > WorkspaceFormat {
			return "", errors.Wrapf(ErrWorkspaceFormat, "%s has format %d; this version reads up to %d", path, ws.FormatVersion, WorkspaceFormat)
		}
		return ws.WorkspaceID, nil
	}
	if !vfs.IsNotExist(err) {
		return "", errors.Wrapf(err, "read %s", path)
	}
	ws := workspaceFile{WorkspaceID: rollout.NewID(), FormatVersion: WorkspaceFormat}
	b, _ = json.MarshalIndent(ws, "", "  ")
	if err := vfs.WriteFileAtomic(db.fs, path, append(b, '\n')); err != nil {
		return "", err
	}
	return ws.WorkspaceID, nil
}

const gitignore = `# Generated by rolloutdb: derived or bulky state, not history.
state.db*
search.db*
tool-results/
terminals/
journal/
*.torn-*
`

func (db *DB) writeGitignore() error {
	path := filepath.Join(db.root, ".gitignore")
	if _, err := db.fs.Stat(path); err == nil {
		return nil
	}
	return vfs.WriteFileAtomic(db.fs, path, []byte(gitignore))
}

// WorkspaceID returns the workspace's id, stored in every thread header.
func (db *DB) WorkspaceID() string { return db.id }

// DataDir returns the absolute path of the data directory.
func (db *DB) DataDir() string { return db.root }

// Workspace returns the absolute path of the workspace.
func (db *DB) Workspace() string { return db.workspace }

// ListThreadIDs lists the ids of the active threads (those with a rollout in
// threads/active), sorted; ids are time-ordered, so oldest first.
func (db *DB) ListThreadIDs(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ids, err := db.log.List(ctx, projection.LocationActive)
	if err != nil {
		return nil, errors.Wrap(err, "list threads")
	}
	return ids, nil
}

// Close closes every thread still open, waits for the projector to apply
// what it was handed, and closes state.db. The DB is unusable afterwards.
func (db *DB) Close() error {
	db.mu.Lock()
	if !db.closed {
		_ = db.follow.Close() // followers and watchers end
	}
	db.closed = true
	threads := make([]*Thread, 0, len(db.threads))
	for _, t := range db.threads {
		threads = append(threads, t)
	}
	db.mu.Unlock()
	var err error
	if db.metrics != nil {
		err = db.metrics.Unregister()
		db.metrics = nil
	}
	for _, t := range threads {
		err = errors.CombineErrors(err, t.Close())
	}
	if db.log != nil {
		// Every rollout is synced and released by now (each writer's
		// Close does it): the journal's files go.
		err = errors.CombineErrors(err, db.log.Close())
	}
	err = errors.CombineErrors(err, db.state.Close())
	if db.fleet != nil {
		err = errors.CombineErrors(err, db.fleet.Close())
	}
	return err
}

// live returns ErrClosed once Close has begun: a call that would write
// checks it first, so that a closed DB changes nothing.
func (db *DB) live() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		return ErrClosed
	}
	return nil
}

// JournalReport says what Open's replay of crashed processes' journals
// did (nothing, mostly).
func (db *DB) JournalReport() journal.Report { return db.journalRep }

func (db *DB) logJournalReport() {
	rep := db.journalRep
	for _, p := range rep.Problems {
		db.logger().Error("rolloutdb: journal entry not replayed; acknowledged records may be missing from the thread",
			"journal", p.Journal, "segment", p.Segment, "thread", p.Thread, "offset", p.Offset, "reason", p.Reason)
	}
	if rep.Journals > 0 {
		db.logger().Info("rolloutdb: replayed the journal of a process that stopped without closing",
			"journals", rep.Journals, "entries", rep.Entries, "written_back", rep.Written, "threads", len(rep.Threads))
	}
}
