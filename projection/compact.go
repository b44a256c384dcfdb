package projection

import (
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
)

// Compaction of the full-text index. The index never deletes (index.go):
// what rollbacks, dropped threads and older versions of items leave behind
// is filtered out by Search, and costs only space and candidates. Once it
// outweighs half of the live rows, the index is built again beside the
// old one, and swapped in:
//
//  1. fts_next and indexed_next are made empty, and the threads of
//     state.db listed (the highest tid kept: threads made later are new).
//  2. A few threads at a time, between the indexer's other work, each
//     thread's items rows are read in one snapshot and their texts from the
//     rollout, and written to fts_next with the snapshot's projected seq
//     as the thread's mark.
//  3. Meanwhile every operation of a thread already copied, or made after
//     step 1, is applied to both tables (index.go's applyChunk). One that
//     was committed before a copy's snapshot and applied after it is
//     applied twice: a row put twice with one text is one row, and the
//     rest is garbage the new table lists, as the old one would.
//  4. When every thread is copied, one transaction drops the old table and
//     renames the new one (and the marks, the garbage list, the counts).
//
// Searches use the old table until the swap, and never wait for a
// compaction. One that is cut short (Close, a crash, an error) leaves
// fts_next behind; the next open drops it.

// compactMinGarbage is the fewest rows left behind that start a
// compaction (a variable for tests).
var compactMinGarbage int64 = 10_000

// compactBatch bounds a compaction step: so many items' texts, or
// threads, are copied between the indexer's other work.
var (
	compactBatchItems   = 1024
	compactBatchThreads = 32 // (variables for tests)
)

const compactRetry = time.Minute

// compactCopied, when set (tests), is called on the indexer's goroutine
// after each thread a compaction copied.
var compactCopied func(tid int64, failed bool)

type compaction struct {
	maxTid int64
	todo   []int64        // threads still to copy, ascending
	done   map[int64]bool // copied: their operations reach fts_next too
	// The new table's counts and garbage list, as index.go keeps the
	// old one's.
	docs, garbageDocs int64
	garbage           map[int64]bool
	// failed: threads whose texts could not be read (their rollout
	// changed under the rows): caught up after the swap.
	failed []int64
}

// covers says whether operations of thread tid go to fts_next too.
func (c *compaction) covers(tid int64) bool { return c.done[tid] || tid > c.maxTid }

// compactDueLocked (mu held) says whether a compaction step is to run.
func (x *searchIndex) compactDueLocked() bool {
	if x.closed {
		return false
	}
	if x.compact != nil || x.compactReq {
		return true
	}
	return time.Now().After(x.compactWait) && x.garbageDocs >= compactMinGarbage && 2*x.garbageDocs >= x.docs
}

// compactStep starts a compaction, copies a batch of threads, or swaps.
// The indexer calls it between its cycles, never while a flush waits.
func (x *searchIndex) compactStep() {
	x.mu.Lock()
	due := !x.urgent && x.compactDueLocked()
	if due {
		x.compactReq = false
	}
	x.mu.Unlock()
	if !due {
		return
	}
	done := bgEnter()
	t0 := time.Now()
	var err error
	if x.compact == nil {
		err = x.startCompaction()
	}
	if err == nil {
		err = x.copyStep()
	}
	took := time.Since(t0)
	done()
	if err != nil {
		x.s.opts.Logger.Warn("rolloutdb: search index compaction failed; retried later", "err", err.Error())
		x.abortCompaction()
		x.mu.Lock()
		x.compactWait = time.Now().Add(compactRetry)
		x.compactFailures++
		x.cond.Broadcast()
		x.mu.Unlock()
		return
	}
	x.yield(took)
}

func (x *searchIndex) startCompaction() error {
	for _, q := range []string{`DROP TABLE IF EXISTS fts_next`, `DROP TABLE IF EXISTS indexed_next`,
		`CREATE VIRTUAL TABLE fts_next USING ` + searchFTSArgs, createIndexed("indexed_next")} {
		if _, err := x.w.Exec(q); err != nil {
			return errors.Wrap(err, "search.db: start compaction")
		}
	}
	c := &compaction{done: map[int64]bool{}, garbage: map[int64]bool{}}
	var err error
	if c.todo, err = queryInts(context.Background(), x.s.r, `SELECT tid FROM threads ORDER BY tid`); err != nil {
		return err
	}
	if len(c.todo) > 0 {
		c.maxTid = c.todo[len(c.todo)-1]
	}
	x.compact = c
	return nil
}

// abortCompaction drops what a compaction built.
func (x *searchIndex) abortCompaction() {
	x.compact = nil
	for _, q := range []string{`DROP TABLE IF EXISTS fts_next`, `DROP TABLE IF EXISTS indexed_next`} {
		_, _ = x.w.Exec(q)
	}
}

// copied is one thread's snapshot, read for fts_next.
type copied struct {
	tid       int64
	file      rolloutFile
	projected int64
	want      []itemAt
}

// copyStep copies the next threads into fts_next, or swaps it in once
// every thread is there.
func (x *searchIndex) copyStep() error {
	c := x.compact
	if len(c.todo) == 0 {
		return x.swap()
	}
	// One snapshot of state.db for the batch.
	rtx, err := x.s.r.BeginTx(context.Background(), &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer func() { _ = rtx.Rollback() }()
	var batch []copied
	items := 0
	for len(c.todo) > 0 && len(batch) < compactBatchThreads && items < compactBatchItems {
		cp := copied{tid: c.todo[0]}
		c.todo = c.todo[1:]
		var id, rel string
		err := rtx.QueryRow(`SELECT id, rollout_path, projected_seq FROM threads WHERE tid = ?`, cp.tid).Scan(&id, &rel, &cp.projected)
		if errors.Is(err, sql.ErrNoRows) {
			c.done[cp.tid] = true // gone since the list: nothing to copy
			continue
		}
		if err != nil {
			return err
		}
		cp.file = fileAt(id, rel)
		if cp.want, err = shownSince(rtx, cp.tid, 0); err != nil {
			return err
		}
		items += len(cp.want)
		batch = append(batch, cp)
	}
	_ = rtx.Rollback()

	tx, err := x.w.Begin()
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	put, err := tx.Prepare(`INSERT INTO fts_next (rowid, text) VALUES (?, ?)`)
	if err != nil {
		return err
	}
	var failed []int64
	var docs int64
	for _, cp := range batch {
		var n int64
		mark := cp.projected
		if len(cp.want) > 0 {
			texts, err := x.s.readItems(cp.file, cp.want)
			if err != nil {
				// The rollout changed under the rows: read-repair marks
				// the thread again; after the swap it is caught up.
				failed = append(failed, cp.tid)
				mark = 0
				texts = nil
			}
			for i, it := range texts {
				if text := ftsText(&it); text != "" {
					if _, err := put.Exec(rowidOf(cp.tid, cp.want[i].seq), text); err != nil {
						return err
					}
					n++
				}
			}
		}
		if _, err := tx.Exec(`INSERT INTO indexed_next (tid, seq, docs, id) VALUES (?, ?, ?, ?)`, cp.tid, mark, n, cp.file.id); err != nil {
			return err
		}
		docs += n
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	for _, cp := range batch {
		c.done[cp.tid] = true
		if compactCopied != nil {
			compactCopied(cp.tid, slices.Contains(failed, cp.tid))
		}
	}
	c.docs += docs
	c.failed = append(c.failed, failed...)
	return nil
}

// swap puts fts_next in the old table's place.
func (x *searchIndex) swap() error {
	c := x.compact
	// No search reads while the tables and the list change.
	x.swapMu.Lock()
	defer x.swapMu.Unlock()
	tx, err := x.w.Begin()
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	// A thread whose copy failed is redone whole after the swap, whatever
	// mark its later operations gave it.
	for _, tid := range c.failed {
		if _, err := tx.Exec(`UPDATE indexed_next SET seq = 0 WHERE tid = ?`, tid); err != nil {
			return err
		}
	}
	for _, q := range []string{`DROP TABLE fts_terms`, `DROP TABLE fts`, `ALTER TABLE fts_next RENAME TO fts`, createSearchTerms,
		`DROP TABLE indexed`, `ALTER TABLE indexed_next RENAME TO indexed`, `DELETE FROM garbage`} {
		if _, err := tx.Exec(q); err != nil {
			return errors.Wrap(err, "search.db: swap")
		}
	}
	for tid := range c.garbage {
		if _, err := tx.Exec(`INSERT INTO garbage (tid) VALUES (?)`, tid); err != nil {
			return err
		}
	}
	docs := max(c.docs, 0)
	if _, err := tx.Exec(`INSERT INTO meta (key, value) VALUES ('docs', ?), ('garbage_docs', ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, docs, c.garbageDocs); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return errors.Wrap(err, "search.db: swap")
	}
	x.compact = nil
	x.docs, x.garbageDocs = docs, c.garbageDocs
	x.mu.Lock()
	x.garbage = c.garbage
	for _, tid := range c.failed {
		x.dirty[tid] = true
	}
	x.compactions++
	x.cond.Broadcast()
	x.mu.Unlock()
	return nil
}

// compactNow compacts the index whatever its garbage, and waits for the
// swap (or the compaction's failure).
func (x *searchIndex) compactNow(ctx context.Context) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	swaps, failures := x.compactions, x.compactFailures
	x.compactReq = true
	x.cond.Broadcast()
	stop := context.AfterFunc(ctx, func() {
		x.mu.Lock()
		x.cond.Broadcast()
		x.mu.Unlock()
	})
	defer stop()
	for x.compactions == swaps && x.compactFailures == failures && !x.closed {
		if err := ctx.Err(); err != nil {
			return err
		}
		x.cond.Wait()
	}
	if x.compactFailures != failures {
		return errors.New("search index compaction failed")
	}
	if x.compactions == swaps {
		return errors.New("search index closed")
	}
	return nil
}
