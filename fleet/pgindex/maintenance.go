package pgindex

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// rebuildChunk bounds the threads one rebuild transaction projects: their
// rows stay locked until it commits. A variable for tests.
var rebuildChunk = 64

// Rebuild drops every projected row of the workspace and projects every
// thread of the log again, in thread id order, reporting progress.
// Business state is not touched.
//
// It is resumable: each committed chunk records the last thread done (a
// watermark, in index_meta), and a rebuild that was interrupted continues
// from there when Rebuild is called again (or at the next Open), unless
// o.Restart. It is safe while hosts write: each thread is caught up
// under its row's lock, and what is appended later reaches its row
// through the applier or a read's catch-up. Until it ends, a list or a
// search (of any host) shows the threads rebuilt so far; a read of one
// thread catches that thread up itself.
func (s *Store) Rebuild(ctx context.Context, o projection.RebuildOptions) (projection.RebuildReport, error) {
	start := time.Now()
	var rep projection.RebuildReport
	if err := s.live(); err != nil {
		return rep, err
	}
	defer s.progress.Store(nil)
	after, resumed, err := s.metaGet(ctx, metaWatermark)
	if err != nil {
		return rep, err
	}
	// Threads made, deleted or moved from here on are in the change log
	// since this position: what the rows match once the rebuild ends.
	matched, err := s.matchedNow(ctx)
	if err != nil {
		return rep, err
	}
	if resumed && !o.Restart {
		rep.Resumed = true
	} else {
		after = ""
		err := s.write(ctx, "rebuild: drop the projected rows", func(t *txn) error {
			b := &pgx.Batch{}
			for _, q := range []string{
				`DELETE FROM rolloutdb.index_items WHERE tid IN (SELECT tid FROM rolloutdb.index_threads WHERE ws = $1)`,
				`DELETE FROM rolloutdb.index_turns WHERE tid IN (SELECT tid FROM rolloutdb.index_threads WHERE ws = $1)`,
				`DELETE FROM rolloutdb.index_checkpoints WHERE tid IN (SELECT tid FROM rolloutdb.index_threads WHERE ws = $1)`,
				`DELETE FROM rolloutdb.index_labels WHERE ws = $1`,
				`DELETE FROM rolloutdb.index_artifact_refs WHERE ws = $1`,
				`DELETE FROM rolloutdb.index_threads WHERE ws = $1`,
			} {
				b.Queue(q, s.ws)
			}
			b.Queue(qMetaSet, s.ws, metaWatermark, "")
			return sendBatch(ctx, t, b)
		})
		if err != nil {
			return rep, err
		}
		s.cacheMu.Lock()
		clear(s.cache)
		s.cacheMu.Unlock()
	}
	var total int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM rolloutdb.threads WHERE ws = $1`, s.ws).Scan(&total); err != nil {
		return rep, errors.Wrap(err, "pgindex: rebuild: count threads")
	}
	rows, err := s.pool.Query(ctx, `SELECT id, location FROM rolloutdb.threads WHERE ws = $1 AND id COLLATE "C" > $2 ORDER BY id COLLATE "C"`, s.ws, after)
	if err != nil {
		return rep, errors.Wrap(err, "pgindex: rebuild: list threads")
	}
	type ref struct{ id, loc string }
	todo, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ref, error) {
		var f ref
		return f, r.Scan(&f.id, &f.loc)
	})
	if err != nil {
		return rep, errors.Wrap(err, "pgindex: rebuild: list threads")
	}
	done := total - len(todo)
	for len(todo) > 0 {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		chunk := todo[:min(len(todo), rebuildChunk)]
		var records int64
		err := s.withSlot(ctx, func() error {
			return s.write(ctx, "rebuild", func(t *txn) error {
				records = 0
				ids, locs := make([]string, len(chunk)), make([]string, len(chunk))
				for i, f := range chunk {
					ids[i], locs[i] = f.id, f.loc
				}
				locked, err := s.lockRows(ctx, t, ids, locs)
				if err != nil {
					return err
				}
				for _, id := range ids {
					n, err := s.catchUp(ctx, t, locked[id].row)
					if err := ignoreGone(err); err != nil {
						return errors.Wrapf(err, "rebuild thread %s", id)
					}
					records += int64(n)
				}
				// The chunk commits whole: its last thread is the mark.
				_, err = t.Exec(ctx, qMetaSet, s.ws, metaWatermark, ids[len(ids)-1])
				return err
			})
		})
		if err != nil {
			return rep, err
		}
		rep.Records += records
		rep.Threads += len(chunk)
		done += len(chunk)
		todo = todo[len(chunk):]
		prog := projection.RebuildProgress{Threads: done, Total: total, Records: rep.Records, Elapsed: time.Since(start)}
		s.progress.Store(&prog)
		if o.Progress != nil {
			o.Progress(prog)
		}
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM rolloutdb.index_meta WHERE ws = $1 AND key = $2`, s.ws, metaWatermark); err != nil {
		return rep, errors.Wrap(err, "pgindex: rebuild: end")
	}
	if !rep.Resumed {
		s.setReconciled(matched)
		_ = s.metaSet(ctx, metaMatched, fmt.Sprintf("%s|%d", matched.xmin, matched.at))
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// integrityChecks are what CheckIntegrity asks of the workspace's rows:
// each query returns the ids of the threads (or keys of rows) it finds
// wrong, and its line says what is wrong with them.
var integrityChecks = []struct{ what, q string }{
	{"rows whose thread the log does not have", `SELECT p.id FROM rolloutdb.index_threads p
		WHERE p.ws = $1 AND NOT EXISTS (SELECT 1 FROM rolloutdb.threads ft WHERE ft.ws = p.ws AND ft.id = p.id COLLATE "default")`},
	{"threads of the log with no row", `SELECT ft.id FROM rolloutdb.threads ft
		WHERE ft.ws = $1 AND NOT EXISTS (SELECT 1 FROM rolloutdb.index_threads p WHERE p.ws = ft.ws AND p.id = ft.id COLLATE "C")`},
	{"rows projected past the end of their frames", `SELECT p.id FROM rolloutdb.index_threads p` + tailJoin + `
		WHERE p.ws = $1 AND ft.tid IS NOT NULL AND p.projected_offset > coalesce(e.end_, 128)`},
	{"rows whose turn count is not their visible turns", `SELECT p.id FROM rolloutdb.index_threads p
		LEFT JOIN (SELECT tid, count(*) AS n, max(ordinal) AS hi FROM rolloutdb.index_turns WHERE ordinal IS NOT NULL GROUP BY tid) c ON c.tid = p.tid
		WHERE p.ws = $1 AND (p.turn_count <> coalesce(c.n, 0) OR coalesce(c.hi, 0) <> coalesce(c.n, 0))`},
	{"rows whose item count is not their items", `SELECT p.id FROM rolloutdb.index_threads p
		LEFT JOIN (SELECT tid, count(*) AS n FROM rolloutdb.index_items GROUP BY tid) i ON i.tid = p.tid
		LEFT JOIN (SELECT tid, sum(item_count) AS n FROM rolloutdb.index_turns WHERE ordinal IS NOT NULL GROUP BY tid) u ON u.tid = p.tid
		WHERE p.ws = $1 AND (p.item_count <> coalesce(i.n, 0) OR p.item_count <> coalesce(u.n, 0))`},
	{"items outside a visible turn", `SELECT DISTINCT p.id FROM rolloutdb.index_items i JOIN rolloutdb.index_threads p ON p.tid = i.tid
		WHERE p.ws = $1 AND NOT EXISTS (SELECT 1 FROM rolloutdb.index_turns u
			WHERE u.tid = i.tid AND u.instance = i.turn AND u.ordinal IS NOT NULL AND i.seq BETWEEN u.instance AND u.last_seq)`},
	{"rows whose label rows are not their labels", `SELECT p.id FROM rolloutdb.index_threads p
		LEFT JOIN LATERAL (SELECT array_agg(l.label ORDER BY l.label) AS ls,
				bool_and(l.ws = p.ws AND l.id = p.id AND l.location = p.location AND l.updated_at = p.updated_at AND l.created_at = p.created_at) AS same
			FROM rolloutdb.index_labels l WHERE l.tid = p.tid) l ON true
		WHERE p.ws = $1 AND (coalesce(l.ls, '{}') <> ARRAY(SELECT DISTINCT x FROM unnest(p.labels) x ORDER BY x) OR NOT coalesce(l.same, true))`},
	{"rows whose latest checkpoint is not one of theirs", `SELECT p.id FROM rolloutdb.index_threads p
		WHERE p.ws = $1 AND p.checkpoint_offset <> 0 AND NOT EXISTS (SELECT 1 FROM rolloutdb.index_checkpoints c
			WHERE c.tid = p.tid AND c.seq = p.checkpoint_seq AND c.frame_offset = p.checkpoint_offset)`},
	{"turn, item or checkpoint rows of no thread (any workspace)", `SELECT DISTINCT 'tid ' || x.tid FROM (
			SELECT tid FROM rolloutdb.index_turns UNION SELECT tid FROM rolloutdb.index_items UNION SELECT tid FROM rolloutdb.index_checkpoints
			UNION SELECT tid FROM rolloutdb.index_labels) x
		WHERE $1::int IS NOT NULL AND NOT EXISTS (SELECT 1 FROM rolloutdb.index_threads t WHERE t.tid = x.tid)`},
}

// CheckIntegrity checks the workspace's rows against each other and
// against the log, after the applier settles: every thread of the log has
// a row and every row a thread, no row is projected past its frames, the
// counts and ordinals of turns and items agree with their rows, items lie
// in visible turns, label rows are the labels, the latest checkpoint is a
// checkpoint row. Its cost grows with the workspace. (The database's own
// consistency is PostgreSQL's: amcheck, pg_checksums.) StateDB is "ok",
// or one line per problem found, naming up to 10 threads each; SearchDB
// is empty: the words are a column of the items rows.
func (s *Store) CheckIntegrity(ctx context.Context) (projection.IntegrityReport, error) {
	var rep projection.IntegrityReport
	if err := s.Settle(ctx); err != nil {
		return rep, err
	}
	if err := s.reconcile(ctx, false); err != nil {
		return rep, err
	}
	for _, c := range integrityChecks {
		rows, err := s.pool.Query(ctx, c.q, s.ws)
		if err != nil {
			return rep, errors.Wrapf(err, "pgindex: check %s", c.what)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return rep, errors.Wrapf(err, "pgindex: check %s", c.what)
		}
		if len(ids) == 0 {
			continue
		}
		shown := ids[:min(len(ids), 10)]
		line := fmt.Sprintf("%d %s: %s", len(ids), c.what, strings.Join(shown, ", "))
		if len(ids) > len(shown) {
			line += ", …"
		}
		rep.StateDB = append(rep.StateDB, line)
	}
	if len(rep.StateDB) == 0 {
		rep.StateDB = []string{"ok"}
	}
	return rep, nil
}

// Summary counts the workspace's threads in one query over their rows,
// made to agree with the log's threads first (as List does). A row may be
// behind frames another host committed and has not applied yet; Refresh
// brings every row up to date first. The log keeps no compressed
// threads: ArchivedCompressed is 0.
func (s *Store) Summary(ctx context.Context) (projection.Summary, error) {
	var sum projection.Summary
	if err := s.Settle(ctx); err != nil {
		return sum, err
	}
	if err := s.reconcile(ctx, false); err != nil {
		return sum, err
	}
	err := s.pool.QueryRow(ctx, `SELECT count(*),
		count(*) FILTER (WHERE location = 'active'), count(*) FILTER (WHERE location = 'archived'),
		count(*) FILTER (WHERE source_kind = $2), count(*) FILTER (WHERE forked_from <> ''),
		count(*) FILTER (WHERE current_turn <> ''), count(*) FILTER (WHERE checkpoint_offset > 0),
		count(*) FILTER (WHERE damage_count > 0), coalesce(sum(damage_count), 0),
		coalesce(sum(turn_count), 0), coalesce(sum(item_count), 0),
		coalesce(sum(greatest(file_size, 0)), 0), coalesce(sum(greatest(file_size, 0)) FILTER (WHERE location = 'active'), 0),
		coalesce(sum(greatest(file_size, 0)) FILTER (WHERE location = 'archived'), 0),
		coalesce(sum(total_tokens), 0)
		FROM rolloutdb.index_threads WHERE ws = $1`, s.ws, rollout.SourceSubagent).
		Scan(&sum.Threads, &sum.Active, &sum.Archived, &sum.Subagents, &sum.Forks, &sum.OpenTurns, &sum.WithCheckpoint,
			&sum.Damaged, &sum.DamageSeen, &sum.Turns, &sum.Items, &sum.RolloutBytes, &sum.ActiveBytes, &sum.ArchivedBytes, &sum.TotalTokens)
	return sum, errors.Wrap(err, "pgindex: summary")
}
