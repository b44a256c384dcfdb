package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/journal"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// rdbAppend appends through the facade: one open turn per thread, one
// record per call, SyncAlways.
type rdbAppend struct {
	db      *rolloutdb.DB
	threads []*rolloutdb.Thread
	turns   []*rolloutdb.Turn
	paths   []string
	// raw appends with Thread.Append (the writer's group commit) instead
	// of Turn.Add.
	raw bool
}

func openRolloutdbAppend(raw bool) func(context.Context, *env, string, int) (appendStore, error) {
	return func(ctx context.Context, e *env, dir string, threads int) (appendStore, error) {
		db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{Sync: rollout.SyncAlways, Logger: e.logger, CompressAbove: e.cfg.CompressAbove, MaxProjectionLag: e.cfg.MaxProjectionLag})
		if err != nil {
			return nil, err
		}
		s := &rdbAppend{db: db, raw: raw, threads: make([]*rolloutdb.Thread, threads), turns: make([]*rolloutdb.Turn, threads), paths: make([]string, threads)}
		// Threads are made side by side: each costs a few fsyncs.
		err = parallel(threads, func(i int) error {
			th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: threadID(i)})
			if err != nil {
				return err
			}
			tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{ID: "turn-0", Model: "model-1"})
			if err != nil {
				return err
			}
			s.threads[i], s.turns[i], s.paths[i] = th, tu, th.Path()
			return nil
		})
		if err != nil {
			return nil, errors.CombineErrors(err, db.Close())
		}
		return s, nil
	}
}

// parallel runs fn(0..n-1) at most 16 at a time and returns their errors.
func parallel(n int, fn func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = fn(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (s *rdbAppend) Append(ctx context.Context, thread int, it rollout.Item) error {
	if !s.raw {
		_, err := s.turns[thread].Add(ctx, it)
		return err
	}
	rec, err := rollout.NewRecord(rollout.KindItemAppended, s.turns[thread].ID(), it)
	if err != nil {
		return err
	}
	_, err = s.threads[thread].Append(ctx, []rollout.Record{rec}, rollout.AppendOptions{})
	return err
}

func (s *rdbAppend) Settle(ctx context.Context) error { return s.db.Settle(ctx) }

func (s *rdbAppend) LogBytes() int64 { return fileSize(s.paths...) }

func (s *rdbAppend) Close() error {
	ctx := context.Background()
	err := parallel(len(s.turns), func(i int) error {
		_, err := s.turns[i].Commit(ctx, rolloutdb.Commit{})
		return errors.CombineErrors(err, s.threads[i].Close())
	})
	return errors.CombineErrors(err, s.db.Close()) // Close applies what the projector holds
}

func (s *rdbAppend) Count(ctx context.Context) ([]int, error) {
	out := make([]int, len(s.paths))
	for i, p := range s.paths {
		n, err := countRolloutItems(p)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

// countRolloutItems reads a rollout and counts its item_appended records;
// any damage is an error.
func countRolloutItems(path string) (int, error) {
	src, size, closeFn, err := rollout.OpenRead(vfs.OS, path)
	if err != nil {
		return 0, err
	}
	defer closeFn()
	r, err := rollout.NewReader(src, size, rollout.ReaderOptions{Path: path})
	if err != nil {
		return 0, err
	}
	n := 0
	for r.Next() {
		if r.Record().Kind == rollout.KindItemAppended {
			n++
		}
	}
	if err := r.Err(); err != nil {
		return n, err
	}
	if len(r.Damage()) > 0 || r.TornTail() != nil {
		return n, errors.Newf("%s: damaged (%d regions, torn tail %v)", path, len(r.Damage()), r.TornTail() != nil)
	}
	return n, nil
}

// writerAppend is the rollout package's Writer on its own: the log without
// the facade (no projection into state.db, no turn bookkeeping), with the
// workspace journal as the facade sets it up (rollout-writer), or each
// append syncing its own rollout, as before the journal
// (rollout-writer-fsync). It shows where the facade's costs are.
type writerAppend struct {
	ws    []*rollout.Writer
	j     *journal.Journal
	g     *rollout.LogGroup
	paths []string
}

func openWriterAppend(withJournal bool) func(context.Context, *env, string, int) (appendStore, error) {
	return func(ctx context.Context, e *env, dir string, threads int) (appendStore, error) {
		s := &writerAppend{}
		if withJournal {
			j, err := journal.Open(ctx, dir, journal.Options{})
			if err != nil {
				return nil, err
			}
			s.j, s.g = j, rollout.NewLogGroup(j)
		}
		for i := range threads {
			path := filepath.Join(dir, threadID(i)+rollout.RolloutExt)
			w, err := rollout.Create(ctx, path, rollout.ThreadOpened{ThreadID: threadID(i), WorkspaceID: "rolloutbench"},
				rollout.Options{Sync: rollout.SyncAlways, CompressAbove: e.cfg.CompressAbove, Log: s.g})
			if err != nil {
				return nil, errors.CombineErrors(err, s.Close())
			}
			s.ws, s.paths = append(s.ws, w), append(s.paths, path)
		}
		return s, nil
	}
}

func (s *writerAppend) Append(ctx context.Context, thread int, it rollout.Item) error {
	rec, err := rollout.NewRecord(rollout.KindItemAppended, "turn-0", it)
	if err != nil {
		return err
	}
	_, err = s.ws[thread].Append(ctx, []rollout.Record{rec}, rollout.AppendOptions{})
	return err
}

func (s *writerAppend) Settle(context.Context) error { return nil }

// Note says how the journal committed (entries per commit, fdatasync
// time), when there is one.
func (s *writerAppend) Note() string {
	if s.j == nil {
		return ""
	}
	m := s.j.Metrics()
	if m.Commits == 0 {
		return ""
	}
	return fmt.Sprintf("journal: %d commits, %.1f entries each, %.0f µs per fdatasync",
		m.Commits, float64(m.Entries)/float64(m.Commits), float64(m.SyncNanos)/float64(m.Commits)/1e3)
}

func (s *writerAppend) LogBytes() int64 { return fileSize(s.paths...) }

func (s *writerAppend) Close() error {
	var err error
	for _, w := range s.ws {
		err = errors.CombineErrors(err, w.Close())
	}
	if s.j != nil {
		s.g.Close()
		err = errors.CombineErrors(err, s.j.Close())
	}
	return err
}

func (s *writerAppend) Count(context.Context) ([]int, error) {
	out := make([]int, len(s.paths))
	for i, p := range s.paths {
		n, err := countRolloutItems(p)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

// rdbReplay is the big thread in a workspace of its own.
type rdbReplay struct {
	db *rolloutdb.DB
	id string
}

func openRolloutdbReplay(ctx context.Context, e *env, dir string, bt *bigThread) (replayStore, error) {
	// Written without fsync: durability of the input is not what is
	// measured here.
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{Sync: rollout.SyncNever, Logger: e.logger, CompressAbove: e.cfg.CompressAbove})
	if err != nil {
		return nil, err
	}
	err = func() error {
		th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: bt.id, Metadata: map[string]string{"title": bt.title}})
		if err != nil {
			return err
		}
		defer th.Close()
		for i := range bt.turns {
			t := &bt.turns[i]
			tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{ID: t.id, Model: t.model, Input: t.user.Text})
			if err != nil {
				return err
			}
			if _, err := tu.Commit(ctx, rolloutdb.Commit{Items: t.items, ModelHistory: t.history, Usage: t.usage}); err != nil {
				return err
			}
		}
		return db.Settle(ctx)
	}()
	if err = errors.CombineErrors(err, db.Close()); err != nil {
		return nil, err
	}
	db, err = rolloutdb.Open(ctx, dir, rolloutdb.Options{Sync: rollout.SyncAlways, Logger: e.logger, CompressAbove: e.cfg.CompressAbove})
	if err != nil {
		return nil, err
	}
	return &rdbReplay{db: db, id: bt.id}, nil
}

func (s *rdbReplay) Replay(ctx context.Context) (int, error) {
	th, st, err := s.db.Resume(ctx, s.id, rolloutdb.ResumeOptions{})
	if err != nil {
		return 0, err
	}
	return len(st.Turns), th.Close()
}

// resumeOnly is the replay part of DB.Resume on its own (no writer opened,
// no diagnostics kept): recovery.ResumeFile.
func (s *rdbReplay) resumeOnly(ctx context.Context) (time.Duration, error) {
	path, err := rollout.ActivePath(s.db.DataDir(), s.id)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	_, err = recovery.ResumeFile(ctx, vfs.OS, path, recovery.Options{ThreadID: s.id, WorkspaceID: s.db.WorkspaceID()})
	return time.Since(start), err
}

func (s *rdbReplay) stateBytes() int64 {
	p := filepath.Join(s.db.DataDir(), "state.db")
	return fileSize(p, p+"-wal")
}

func (s *rdbReplay) Size() (int64, int64) {
	path, _ := rollout.ActivePath(s.db.DataDir(), s.id)
	log := fileSize(path)
	return log, log + s.stateBytes()
}

func (s *rdbReplay) Archive(ctx context.Context) (int64, int64, string, error) {
	start := time.Now()
	if _, err := s.db.Archive(ctx, s.id, "benchmark"); err != nil {
		return 0, 0, "", err
	}
	mid := time.Now()
	done, err := s.db.CompressArchived(ctx, rolloutdb.CompressOptions{})
	if err != nil {
		return 0, 0, "", err
	}
	if len(done) != 1 {
		return 0, 0, "", errors.Newf("CompressArchived compressed %d threads, want 1", len(done))
	}
	end := time.Now()
	cold, _ := rollout.ColdPath(s.db.DataDir(), s.id)
	log := fileSize(cold)
	if log == 0 {
		return 0, 0, "", errors.Newf("%s: missing after CompressArchived", cold)
	}
	note := fmt.Sprintf("DB.Archive %s, DB.CompressArchived %s (.rollout.zst)", ms(mid.Sub(start)), ms(end.Sub(mid)))
	return log, log + s.stateBytes(), note, nil
}

func (s *rdbReplay) Close() error { return s.db.Close() }

// rdbList is a workspace of many small threads, listed from state.db.
type rdbList struct {
	db   *rolloutdb.DB
	info string
}

// noSyncFS writes the list fixture without fsync: the input's durability
// is not what is measured.
type noSyncFS struct{ vfs.FS }
type noSyncFile struct{ vfs.File }

func (noSyncFile) Sync() error { return nil }
func (f noSyncFS) Create(name string) (vfs.File, error) {
	file, err := f.FS.Create(name)
	return noSyncFile{file}, err
}
func (noSyncFS) SyncDir(string) error { return nil }

func openRolloutdbList(ctx context.Context, e *env, dir string, lt *listThreads) (listStore, error) {
	// The threads are written with the rollout package (through the facade
	// each would cost a create, a directory sync and two appends), then
	// state.db is built by Open from the rollouts, as after a lost state.db.
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{Logger: e.logger})
	if err != nil {
		return nil, err
	}
	root, ws := db.DataDir(), db.WorkspaceID()
	if err := db.Close(); err != nil {
		return nil, err
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(filepath.Join(root, "state.db"+suffix)); err != nil && !os.IsNotExist(err) {
			return nil, err
		}
	}
	for i := range lt.n {
		id, t := lt.id(i), lt.turn(i)
		path, err := rollout.ActivePath(root, id)
		if err != nil {
			return nil, err
		}
		clock := lt.created(i)
		opts := rollout.Options{FS: noSyncFS{vfs.OS}, Sync: rollout.SyncNever, CompressAbove: e.cfg.CompressAbove, Now: func() time.Time { clock = clock.Add(time.Second); return clock }}
		w, err := rollout.Create(ctx, path, rollout.ThreadOpened{
			ThreadID: id, WorkspaceID: ws, WorkspacePath: dir, Source: rollout.Source{Kind: rollout.SourceUser},
			Created: lt.created(i), Host: "rolloutbench", Metadata: map[string]string{"title": lt.title(i)},
		}, opts)
		if err != nil {
			return nil, err
		}
		frames, err := turnFrames(t)
		if err != nil {
			return nil, errors.CombineErrors(err, w.Close())
		}
		for _, f := range frames {
			if _, err := w.Append(ctx, f, rollout.AppendOptions{}); err != nil {
				return nil, errors.CombineErrors(err, w.Close())
			}
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	// Open says, rightly, that state.db was missing: we removed it.
	db, err = rolloutdb.Open(ctx, dir, rolloutdb.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	return &rdbList{db: db, info: fmt.Sprintf("state.db built from the rollouts at Open in %s", ms(time.Since(start)))}, nil
}

// turnFrames are a turn's records as the facade writes them: StartTurn's
// frame, then Commit's.
func turnFrames(t *turn) ([][]rollout.Record, error) {
	var start, commit []rollout.Record
	add := func(dst *[]rollout.Record, kind rollout.Kind, body any) error {
		r, err := rollout.NewRecord(kind, t.id, body)
		*dst = append(*dst, r)
		return err
	}
	errs := []error{
		add(&start, rollout.KindTurnStarted, rollout.TurnStarted{Model: t.model}),
		add(&start, rollout.KindItemAppended, t.user),
	}
	for _, it := range t.items {
		errs = append(errs, add(&commit, rollout.KindItemAppended, it))
	}
	errs = append(errs,
		add(&commit, rollout.KindModelHistoryAppended, rollout.ModelHistory{Messages: t.history}),
		add(&commit, rollout.KindTurnCompleted, rollout.TurnCompleted{Status: rollout.TurnStatusCompleted, Usage: t.usage}))
	return [][]rollout.Record{start, commit}, errors.Join(errs...)
}

func (s *rdbList) List(ctx context.Context) ([]string, error) {
	page, err := s.db.List(ctx, projection.ListOptions{Limit: 50})
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(page.Threads))
	for i, t := range page.Threads {
		ids[i] = t.ID
	}
	return ids, nil
}

func (s *rdbList) Note() string { return s.info }

func (s *rdbList) Close() error { return s.db.Close() }
