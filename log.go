package rolloutdb

import (
	"context"
	"log/slog"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/journal"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// localLog is the Log of a local workspace: a rollout file per thread
// under the data directory, made durable through the workspace journal
// (started by the first writer that needs it) or by each rollout's own
// fdatasync.
type localLog struct {
	root    string
	fs      vfs.FS
	sync    rollout.SyncPolicy
	noJrnl  bool
	segSize int64
	// compress and metrics go to every writer.
	compress int
	metrics  *rollout.Metrics
	onError  func(error)
	// logger says what settling a crash's leftovers did.
	logger func() *slog.Logger

	mu    sync.Mutex
	jrnl  *journal.Journal
	group *rollout.LogGroup // the writers of jrnl
}

var _ Log = (*localLog)(nil)

// path is the rollout's path in a location (archived: the plain form).
func (l *localLog) path(id, loc string) (string, error) {
	if loc == projection.LocationArchived {
		return rollout.ArchivedPath(l.root, id)
	}
	return rollout.ActivePath(l.root, id)
}

// Create makes the thread's rollout under threads/active, unless the id
// is taken there or by an archived rollout, plain or compressed.
func (l *localLog) Create(ctx context.Context, opened rollout.ThreadOpened) (ThreadLog, error) {
	path, err := rollout.ActivePath(l.root, opened.ThreadID)
	if err != nil {
		return nil, err
	}
	if l.archivedExists(opened.ThreadID) {
		return nil, errors.Wrapf(rollout.ErrThreadExists, "%s (archived)", opened.ThreadID)
	}
	opts, err := l.writerOptions(ctx)
	if err != nil {
		return nil, err
	}
	w, err := rollout.Create(ctx, path, opened, opts)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Open opens the thread's rollout where loc says for appending. A
// rollout that is not there is marked projection.ErrNotFound.
func (l *localLog) Open(ctx context.Context, id, loc string, from rollout.Anchor) (ThreadLog, rollout.OpenReport, error) {
	path, err := l.path(id, loc)
	if err != nil {
		return nil, rollout.OpenReport{}, err
	}
	opts, err := l.writerOptions(ctx)
	if err != nil {
		return nil, rollout.OpenReport{}, err
	}
	opts.From = from
	w, rep, err := rollout.Open(ctx, path, id, opts)
	if err != nil {
		if vfs.IsNotExist(err) {
			err = errors.Mark(err, projection.ErrNotFound)
		}
		return nil, rep, err
	}
	return w, rep, nil
}

func (l *localLog) writerOptions(ctx context.Context) (rollout.Options, error) {
	g, err := l.journal(ctx)
	if err != nil {
		return rollout.Options{}, err
	}
	return rollout.Options{FS: l.fs, Sync: l.sync, CompressAbove: l.compress, Log: g, Metrics: l.metrics}, nil
}

// journal returns the writers' group of the workspace journal, starting
// the journal on first use; nil when appends sync their rollouts instead
// (NoJournal, or a sync policy other than SyncAlways).
func (l *localLog) journal(ctx context.Context) (*rollout.LogGroup, error) {
	if l.noJrnl || l.sync != rollout.SyncAlways {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.jrnl == nil {
		j, err := journal.Open(ctx, l.root, journal.Options{FS: l.fs, SegmentSize: l.segSize, OnError: l.onError})
		if err != nil {
			return nil, err
		}
		l.jrnl, l.group = j, rollout.NewLogGroup(j)
	}
	return l.group, nil
}

// Metrics returns the journal's counters (zero before it starts).
func (l *localLog) Metrics() journal.Metrics {
	l.mu.Lock()
	j := l.jrnl
	l.mu.Unlock()
	if j == nil {
		return journal.Metrics{}
	}
	return j.Metrics()
}

// Close stops the journal once every writer is closed: each writer's
// Close synced and released its rollout, so the journal's files go.
func (l *localLog) Close() error {
	l.mu.Lock()
	j, g := l.jrnl, l.group
	l.jrnl, l.group = nil, nil
	l.mu.Unlock()
	if j == nil {
		return nil
	}
	g.Close()
	return j.Close()
}
