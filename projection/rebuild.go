package projection

import (
	"context"
	"database/sql"
	"time"

	"github.com/cockroachdb/errors"
)

// RebuildOptions qualify Rebuild.
type RebuildOptions struct {
	// Progress, if set, is called after each committed chunk of threads.
	Progress func(RebuildProgress)
	// Restart drops an interrupted rebuild's progress and starts over.
	// Default: an interrupted rebuild continues after its watermark.
	Restart bool
}

// RebuildProgress is reported while a rebuild runs.
type RebuildProgress struct {
	Threads int           `json:"threads"` // done, of Total
	Total   int           `json:"total"`
	Records int64         `json:"records"`
	Elapsed time.Duration `json:"elapsed"`
}

// RebuildReport is what a rebuild did.
type RebuildReport struct {
	Threads int           `json:"threads"`
	Records int64         `json:"records"`
	Resumed bool          `json:"resumed"` // continued an interrupted rebuild
	Elapsed time.Duration `json:"elapsed"`
}

// RecordsPerSec is the rebuild's throughput.
func (r RebuildReport) RecordsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Records) / r.Elapsed.Seconds()
}

// watermarkKey is the meta row of a rebuild in progress: the last thread
// id rebuilt, committed with that thread's rows.
const watermarkKey = "rebuild_watermark"

// rebuildChunk bounds how many records one rebuild transaction applies:
// large enough that commits (each rewrites the pages it dirtied) cost
// little, small enough that the host's projector is not kept waiting for
// more than a few seconds. A variable for tests.
var rebuildChunk int64 = 200000

func (s *Store) rebuildPending(ctx context.Context) (bool, error) {
	var pending bool
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, ok, err := metaGet(ctx, tx, watermarkKey)
		pending = ok
		return err
	})
	return pending, err
}

// Rebuild drops every projection and projects every rollout again, in
// thread id order, reporting progress. Business state is not touched.
//
// It is resumable: each committed chunk records the last thread done (a
// watermark), and a rebuild that was interrupted (a crash, a cancelled
// context) continues from there when Rebuild is called again (or at the
// next Open). It is safe while a host writes: each thread is read up to
// a consistent end inside the writer transaction, and what is appended
// later reaches its row through the projector or read-repair, which
// continue from the row's projected offset. Reads during a rebuild stay
// correct (they repair the rows they need); they are slower.
func (s *Store) Rebuild(ctx context.Context, o RebuildOptions) (_ RebuildReport, err error) {
	defer s.guard(&err)
	start := time.Now()
	var rep RebuildReport
	var after string
	// Until it ends, the rows do not match the directories.
	s.rebuilding.Store(true)
	s.setReconciled(reconciled{})
	defer func() {
		s.setReconciled(reconciled{})
		s.rebuilding.Store(false)
		s.progress.Store(nil)
	}()
	err = s.write(ctx, func(tx *sql.Tx) error {
		if err := metaDelete(ctx, tx, dirsKey); err != nil {
			return err
		}
		mark, ok, err := metaGet(ctx, tx, watermarkKey)
		if err != nil {
			return err
		}
		if ok && !o.Restart {
			after, rep.Resumed = mark, true
			return nil
		}
		for _, q := range []string{`DELETE FROM items`, `DELETE FROM turns`, `DELETE FROM checkpoints`,
			`DELETE FROM artifact_refs`, `DELETE FROM thread_labels`, `DELETE FROM threads`} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return errors.Wrapf(err, "rebuild: %s", q)
			}
		}
		// Thread keys are drawn anew: the index of the old ones goes.
		gen := newGeneration()
		s.indexOps(indexOp{kind: opReset, text: gen})
		s.clearTurnCaches()
		if err := metaSet(ctx, tx, generationKey, gen); err != nil {
			return err
		}
		return metaSet(ctx, tx, watermarkKey, "")
	})
	if err != nil {
		return rep, err
	}
	files, err := s.listRollouts()
	if err != nil {
		return rep, err
	}
	all := make([]rolloutFile, 0, len(files))
	for _, f := range files {
		all = append(all, f)
	}
	sortFiles(all)
	todo := all
	for len(todo) > 0 && todo[0].id <= after {
		todo = todo[1:]
	}
	done := len(all) - len(todo)
	for len(todo) > 0 {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		err := s.write(ctx, func(tx *sql.Tx) error {
			var records int64
			last := ""
			for len(todo) > 0 && records < rebuildChunk {
				f := todo[0]
				n, err := s.catchUp(ctx, tx, f)
				if err := ignoreMissing(err); err != nil {
					return errors.Wrapf(err, "rebuild thread %s", f.id)
				}
				records += int64(n)
				rep.Records += int64(n)
				rep.Threads++
				done++
				todo = todo[1:]
				last = f.id
			}
			// The chunk commits whole: its last thread is the mark.
			return metaSet(ctx, tx, watermarkKey, last)
		})
		if err != nil {
			return rep, err
		}
		prog := RebuildProgress{Threads: done, Total: len(all), Records: rep.Records, Elapsed: time.Since(start)}
		s.progress.Store(&prog)
		if o.Progress != nil {
			o.Progress(prog)
		}
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		// The change log holds every row the rebuild dropped and made:
		// readers behind it compare every row anyway.
		if _, err := tx.ExecContext(ctx, `DELETE FROM thread_changes`); err != nil {
			return errors.Wrap(err, "prune thread_changes")
		}
		return metaDelete(ctx, tx, watermarkKey)
	})
	rep.Elapsed = time.Since(start)
	return rep, err
}
