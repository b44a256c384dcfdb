package projection

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
)

// The full-text index lives in search.db, beside state.db: a contentless
// FTS5 table (no copy of any text) whose rowid names an item,
//
//	rowid = tid << 40 | seq
//
// tid the thread's key in state.db, seq the item's first version (its
// place, the items row's key). It is written by its own goroutine on its
// own connection, so that tokenizing and merging the index runs beside the
// projector (on the second core) rather than inside its transactions, and
// it may lag: Search brings it up to date first.
//
// The projector derives index operations while it applies records (an
// item's text put, replaced or deleted; a thread's rows dropped) and hands
// them over once its transaction commits, with, per thread, the projected
// seq they bring the index to (marks, kept in search.db's indexed table).
// When too much is queued (a rebuild outruns the index) the texts are
// dropped and the threads marked dirty: the indexer catches them up from
// state.db's items rows, reading each item's text from its rollout. The
// same catch-up runs after an unclean shutdown, for every thread whose
// mark differs from its projected seq. search.db records which state.db
// it indexes (a generation drawn when state.db's projections are built);
// another one's index is dropped and rebuilt.
//
// detail=none: the index stores which items hold a word, not where, which
// halves its size; FTS5 then refuses phrase and NEAR queries. Search's
// literal words are sent as words (AND) and a word made of several tokens
// ("go-test") is checked in the item's text, which Search reads anyway.
//
// contentless_delete=1: a row is deleted, or replaced by a new version of
// its item, by its rowid alone (a contentless table without it could
// forget a row only if handed the exact text it indexed, which is gone
// once a rollout is). The index holds exactly the shown items' words, so
// what a search's candidates are is what they look like.

const (
	createSearchFTS = `CREATE VIRTUAL TABLE fts USING ` + searchFTSArgs
	searchFTSArgs   = `fts5(text, content = '', contentless_delete = 1, detail = none, tokenize = 'unicode61 remove_diacritics 2')`
	// fts_terms counts, per word, the items holding it (ranking weighs
	// rare words more).
	createSearchTerms = `CREATE VIRTUAL TABLE fts_terms USING fts5vocab(fts, row)`
	tidShift          = 40
	// indexQueueLimit bounds the texts waiting for the index (bytes).
	indexQueueLimit = 64 << 20
)

func rowidOf(tid int64, seq uint64) int64 { return tid<<tidShift | int64(seq) }

func splitRowid(r int64) (tid int64, seq uint64) { return r >> tidShift, uint64(r & (1<<tidShift - 1)) }

type opKind uint8

const (
	opPut        opKind = iota + 1 // text of an item (a new one, or a new version of one)
	opDel                          // an item gone (rolled back, or a new version with no text)
	opDropThread                   // every row of a thread
	opMark                         // the thread's index is complete through seq (text: the thread's id)
	opReset                        // drop everything (a rebuild of state.db)
)

type indexOp struct {
	kind opKind
	tid  int64
	seq  uint64
	text string
}

// searchIndex is search.db and its writer.
type searchIndex struct {
	s    *Store
	path string
	w, r *sql.DB

	mu        sync.Mutex
	cond      *sync.Cond
	queue     []indexOp
	bytes     int
	dirty     map[int64]bool // threads to catch up from state.db
	scanAll   bool           // compare every thread's mark (after an unclean shutdown)
	enqueued  uint64
	applied   uint64
	closed    bool
	done      chan struct{}
	lastError error
	// retrying counts threads waiting for a retry of their catch-up
	// (retry); retries is the rounds of them since one went through.
	retrying, retries int
	// unfinished says the indexer stopped with threads to catch up.
	unfinished bool
	// catching says the cycle in progress compares or catches up threads;
	// cycles counts the cycles done (flush waits for both).
	catching bool
	cycles   uint64
	// failures counts the cycles failed in a row (their back-off).
	failures int
	// urgent says a flush waits: write now, do not linger.
	urgent bool

	resetCommitted bool // the cycle's reset committed (indexer only)
}

// indexPath is search.db beside state.db ("" for an in-memory store).
func indexPath(statePath string) string {
	if statePath == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(statePath), "search.db")
}

// openIndex opens (or makes) search.db for the state.db whose generation
// is gen. A search.db that is not a database, of another generation or
// version, or left by an unclean shutdown is dealt with by the indexer:
// made anew, or caught up.
func (s *Store) openIndex(ctx context.Context, gen string) error {
	x := &searchIndex{s: s, path: indexPath(s.opts.Path), dirty: map[int64]bool{}, done: make(chan struct{})}
	x.cond = sync.NewCond(&x.mu)
	scan, err := x.connect(ctx, gen)
	if err != nil {
		return err
	}
	x.scanAll = scan
	s.idx = x
	go x.run()
	return nil
}

// connect opens search.db; scan says every thread's mark must be compared
// with its projection (the file was made anew, or not closed cleanly).
func (x *searchIndex) connect(ctx context.Context, gen string) (scan bool, err error) {
	open := func() error {
		if x.path == "" {
			db, err := sql.Open("sqlite", "file::memory:")
			if err != nil {
				return err
			}
			db.SetMaxOpenConns(1)
			db.SetMaxIdleConns(1)
			db.SetConnMaxLifetime(0)
			db.SetConnMaxIdleTime(0)
			x.w, x.r = db, db
			return nil
		}
		base := "file:" + (&url.URL{Path: x.path}).EscapedPath() + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)"
		w, err := sql.Open("sqlite", base+"&_pragma=cache_size(-32768)&_txlock=immediate")
		if err != nil {
			return err
		}
		w.SetMaxOpenConns(1)
		w.SetMaxIdleConns(1)
		w.SetConnMaxLifetime(0)
		r, err := sql.Open("sqlite", base+"&_pragma=query_only(1)")
		if err != nil {
			_ = w.Close()
			return err
		}
		r.SetMaxOpenConns(4)
		r.SetMaxIdleConns(4)
		x.w, x.r = w, r
		return nil
	}
	if err := open(); err != nil {
		return false, errors.Wrapf(err, "open %s", x.path)
	}
	// What it says it is: this state.db's index, of this version, closed
	// cleanly. Anything else (including an unreadable file) is made anew,
	// or compared thread by thread.
	var g, v, clean string
	ok := x.w.QueryRowContext(ctx, `SELECT (SELECT value FROM meta WHERE key = 'generation'), (SELECT value FROM meta WHERE key = 'version'),
		(SELECT value FROM meta WHERE key = 'clean')`).Scan(&g, &v, &clean) == nil
	if !ok || g != gen || v != searchVersion {
		x.closeDB()
		if x.path != "" {
			for _, suffix := range []string{"", "-wal", "-shm"} {
				if err := os.Remove(x.path + suffix); err != nil && !os.IsNotExist(err) {
					return false, errors.Wrapf(err, "replace %s", x.path)
				}
			}
		}
		if err := open(); err != nil {
			return false, errors.Wrapf(err, "open %s", x.path)
		}
		for _, q := range []string{
			`CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID`,
			createIndexed("indexed"),
			createSearchFTS,
			createSearchTerms,
		} {
			if _, err := x.w.ExecContext(ctx, q); err != nil {
				return false, errors.Wrapf(err, "create %s", x.path)
			}
		}
		if _, err := x.w.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES ('generation', ?), ('version', ?), ('clean', '0')`, gen, searchVersion); err != nil {
			return false, errors.Wrapf(err, "create %s", x.path)
		}
		return true, nil
	}
	if _, err := x.w.ExecContext(ctx, `UPDATE meta SET value = '0' WHERE key = 'clean'`); err != nil {
		return false, errors.Wrapf(err, "open %s", x.path)
	}
	return clean != "1", nil
}

// searchVersion is search.db's layout; another one is made anew.
// 1: contentless_delete, per-row sizes. 2: neither, a garbage table.
// 3: contentless_delete again (a version 2 file is made anew).
const searchVersion = "3"

func createIndexed(name string) string {
	// seq: the thread's index is complete through it; docs: its rows;
	// id: the thread the mark was set for (a key handed out again after a
	// delete is another thread's).
	return `CREATE TABLE IF NOT EXISTS ` + name + ` (tid INTEGER PRIMARY KEY, seq INTEGER NOT NULL DEFAULT 0, docs INTEGER NOT NULL DEFAULT 0, id TEXT NOT NULL DEFAULT '')`
}

func (x *searchIndex) closeDB() {
	if x.r != nil && x.r != x.w {
		_ = x.r.Close()
	}
	if x.w != nil {
		_ = x.w.Close()
	}
	x.w, x.r = nil, nil
}

// indexOps stages index operations of the write transaction in progress
// (wmu held); they reach the index if it commits.
func (s *Store) indexOps(ops ...indexOp) { s.txOps = append(s.txOps, ops...) }

// enqueue hands a committed transaction's operations to the indexer.
func (x *searchIndex) enqueue(ops []indexOp) {
	if len(ops) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return
	}
	x.enqueued++
	for _, op := range ops {
		if x.dirty[op.tid] && (op.kind == opPut || op.kind == opMark) {
			continue // caught up from state.db anyway
		}
		x.queue = append(x.queue, op)
		x.bytes += len(op.text) + 32
	}
	if x.bytes > indexQueueLimit {
		x.overflowLocked()
	}
	x.cond.Broadcast()
}

// overflowLocked drops the queued texts (keeping what removes rows) and
// marks their threads to be caught up from state.db.
func (x *searchIndex) overflowLocked() {
	kept := x.queue[:0]
	for _, op := range x.queue {
		switch op.kind {
		case opPut, opMark:
			x.dirty[op.tid] = true
		default:
			kept = append(kept, op)
		}
	}
	x.queue, x.bytes = kept, len(kept)*32
}

// markDirty asks for threads to be caught up from state.db.
func (x *searchIndex) markDirty(tids ...int64) {
	x.mu.Lock()
	for _, t := range tids {
		x.dirty[t] = true
	}
	x.enqueued++
	x.cond.Broadcast()
	x.mu.Unlock()
}

// flush waits until everything enqueued before it is in the index (or
// failed: the error is returned, and search falls back to what it has).
func (x *searchIndex) flush(ctx context.Context) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	target := x.enqueued
	// Threads to catch up (a search.db made anew, an unclean shutdown, a
	// queue that overflowed) are waited for too: a search must not miss
	// what is projected. A cycle that fails ends the wait with its error.
	pending := func() bool { return x.applied < target || x.scanAll || len(x.dirty) > 0 || x.catching }
	if pending() {
		x.urgent = true
		x.cond.Broadcast()
	}
	defer func() { x.urgent = false }()
	stop := context.AfterFunc(ctx, func() {
		x.mu.Lock()
		x.cond.Broadcast()
		x.mu.Unlock()
	})
	defer stop()
	cycles := x.cycles
	for pending() && !x.closed {
		if err := ctx.Err(); err != nil {
			return err
		}
		if x.cycles != cycles && x.lastError != nil {
			break
		}
		x.cond.Wait()
	}
	return x.lastError
}

func (x *searchIndex) run() {
	defer close(x.done)
	for {
		x.mu.Lock()
		// applied < enqueued with nothing queued: the operations handed
		// over were all skipped (their threads were being caught up). A
		// cycle still runs, so that a flush waiting for them returns.
		for len(x.queue) == 0 && len(x.dirty) == 0 && !x.scanAll && !x.closed && x.applied == x.enqueued {
			x.cond.Wait()
		}
		if x.closed && len(x.queue) == 0 {
			// Threads still to catch up (or to compare) are left for the
			// next open: the index is not marked clean.
			x.unfinished = len(x.dirty) > 0 || x.scanAll || x.retrying > 0
			x.mu.Unlock()
			return
		}
		x.linger()
		ops, target, scan := x.queue, x.enqueued, x.scanAll
		x.queue, x.bytes, x.scanAll = nil, 0, false
		x.catching = scan || len(x.dirty) > 0
		x.mu.Unlock()

		x.resetCommitted = false
		err := x.apply(ops)
		if err == nil && scan {
			err = x.compareAll()
		}
		if err == nil {
			err = x.catchUpDirty()
		}
		x.mu.Lock()
		if err != nil && !x.closed {
			x.s.opts.Logger.Warn("rolloutdb: search index could not be updated; search may miss recent items", "err", err.Error())
			// Nothing taken is dropped: the scan is asked again and the
			// threads of the operations are caught up from state.db.
			x.scanAll = x.scanAll || scan
			for _, op := range ops {
				if op.tid != 0 {
					x.dirty[op.tid] = true
				}
			}
			// A reset not applied is applied first next time: the rows of
			// the old thread keys would otherwise stay under new ones. (One
			// that committed is not: it would drop what came after it.)
			for i := len(ops) - 1; i >= 0 && !x.resetCommitted; i-- {
				if ops[i].kind == opReset {
					x.queue = append([]indexOp{ops[i]}, x.queue...)
					x.bytes += 32
					break
				}
			}
		}
		x.lastError = err
		x.applied = target
		x.catching = false
		x.cycles++
		x.cond.Broadcast()
		if err != nil {
			// A failure that lasts (a full disk) is retried, not spun on:
			// 100 ms, doubling to 10 s, cut short by Close.
			x.failures++
			x.waitLocked(min(100*time.Millisecond<<min(x.failures-1, 7), 10*time.Second))
		} else {
			x.failures = 0
		}
		x.mu.Unlock()
	}
}

// waitLocked (mu held) waits d, or until the index is closed.
func (x *searchIndex) waitLocked(d time.Duration) {
	deadline := time.Now().Add(d)
	t := time.AfterFunc(d, func() {
		x.mu.Lock()
		x.cond.Broadcast()
		x.mu.Unlock()
	})
	defer t.Stop()
	for !x.closed && time.Now().Before(deadline) {
		x.cond.Wait()
	}
}

// indexLinger is how long the index waits for more work before it writes
// a small batch: FTS5 writes a segment per transaction, and fewer, larger
// ones cost less to write and to merge. A search (flush) cuts it short.
const (
	indexLinger      = 200 * time.Millisecond
	indexLingerBytes = 4 << 20
)

// linger (mu held) waits a little for more operations.
func (x *searchIndex) linger() {
	if x.urgent || x.closed || x.bytes >= indexLingerBytes || len(x.dirty) > 0 || x.scanAll {
		return
	}
	deadline := time.Now().Add(indexLinger)
	t := time.AfterFunc(indexLinger, func() {
		x.mu.Lock()
		x.cond.Broadcast()
		x.mu.Unlock()
	})
	defer t.Stop()
	for !x.urgent && !x.closed && x.bytes < indexLingerBytes && time.Now().Before(deadline) {
		x.cond.Wait()
	}
}

// indexChunk is how many operations are written between yields to the
// appenders (each a few tens of microseconds of tokenizing).
const indexChunk = 256

// apply writes queued operations, a chunk per transaction.
func (x *searchIndex) apply(ops []indexOp) error {
	for len(ops) > 0 {
		n := min(len(ops), indexChunk)
		done := bgEnter()
		t0 := time.Now()
		err := x.applyChunk(ops[:n])
		took := time.Since(t0)
		done()
		if err != nil {
			return err
		}
		ops = ops[n:]
		x.yield(took)
	}
	return nil
}

// yield paces the index while appends arrive: it works at most a quarter
// of the time then (tokenizing costs more per record than appending it),
// lagging behind and catching up once appends pause or a search waits.
func (x *searchIndex) yield(took time.Duration) {
	if !appendsHot() {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.urgent || x.closed {
		return
	}
	// The deadline before the timer: a timer that fired before a later
	// deadline would leave the wait with nothing to end it.
	deadline := time.Now().Add(3 * took)
	t := time.AfterFunc(3*took, func() {
		x.mu.Lock()
		x.cond.Broadcast()
		x.mu.Unlock()
	})
	defer t.Stop()
	for !x.urgent && !x.closed && time.Now().Before(deadline) {
		x.cond.Wait()
	}
}

func (x *searchIndex) applyChunk(ops []indexOp) error {
	tx, err := x.w.Begin()
	if err != nil {
		return errors.Wrap(err, "search.db: begin")
	}
	defer func() { _ = tx.Rollback() }()
	w := &indexWriter{tx: tx, docs: map[int64]int64{}}
	reset := false
	for _, op := range ops {
		if op.kind == opReset { // text: the new generation
			for _, q := range []string{`DROP TABLE fts_terms`, `DROP TABLE fts`, createSearchFTS, createSearchTerms, `DELETE FROM indexed`} {
				if _, err = tx.Exec(q); err != nil {
					return errors.Wrap(err, "search.db")
				}
			}
			if _, err = tx.Exec(`UPDATE meta SET value = ? WHERE key = 'generation'`, op.text); err != nil {
				return errors.Wrap(err, "search.db")
			}
			w = &indexWriter{tx: tx, docs: map[int64]int64{}}
			reset = true
			continue
		}
		if err := w.apply(op); err != nil {
			return errors.Wrap(err, "search.db")
		}
	}
	if err := w.finish(); err != nil {
		return errors.Wrap(err, "search.db")
	}
	// The count of rows ranking weighs words by, kept in the transaction:
	// another process's store may write the same search.db.
	if reset {
		_, err = tx.Exec(`INSERT INTO meta (key, value) VALUES ('docs', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, w.total)
	} else {
		_, err = tx.Exec(`INSERT INTO meta (key, value) VALUES ('docs', max(?, 0))
			ON CONFLICT (key) DO UPDATE SET value = max(CAST(value AS INTEGER) + ?, 0)`, w.total, w.total)
	}
	if err != nil {
		return errors.Wrap(err, "search.db")
	}
	if err := tx.Commit(); err != nil {
		return errors.Wrap(err, "search.db: commit")
	}
	if reset {
		x.resetCommitted = true
	}
	return nil
}

// indexWriter applies operations to the FTS5 table and the marks, and
// counts the rows they add and remove, per thread.
type indexWriter struct {
	tx        *sql.Tx
	docs      map[int64]int64 // rows added, per thread
	total     int64           // rows added, all threads
	put, mark *sql.Stmt
	del, drop *sql.Stmt
}

func (w *indexWriter) prepare(st **sql.Stmt, q string) (*sql.Stmt, error) {
	if *st == nil {
		var err error
		if *st, err = w.tx.Prepare(q); err != nil {
			return nil, err
		}
	}
	return *st, nil
}

func (w *indexWriter) apply(op indexOp) error {
	switch op.kind {
	case opPut:
		// What the rowid held goes first, counted if it was there (an
		// older version of the item; or the same, put again by a catch-up).
		if err := w.apply(indexOp{kind: opDel, tid: op.tid, seq: op.seq}); err != nil {
			return err
		}
		put, err := w.prepare(&w.put, `INSERT INTO fts (rowid, text) VALUES (?, ?)`)
		if err != nil {
			return err
		}
		w.docs[op.tid]++
		w.total++
		_, err = put.Exec(rowidOf(op.tid, op.seq), op.text)
		return err
	case opDel:
		del, err := w.prepare(&w.del, `DELETE FROM fts WHERE rowid = ?`)
		if err != nil {
			return err
		}
		res, err := del.Exec(rowidOf(op.tid, op.seq))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			w.docs[op.tid]--
			w.total--
		}
		return nil
	case opDropThread:
		drop, err := w.prepare(&w.drop, `DELETE FROM fts WHERE rowid >= ? AND rowid < ?`)
		if err != nil {
			return err
		}
		var n int64
		if err := w.tx.QueryRow(`SELECT coalesce((SELECT docs FROM indexed WHERE tid = ?), 0)`, op.tid).Scan(&n); err != nil {
			return err
		}
		n += w.docs[op.tid]
		delete(w.docs, op.tid)
		w.total -= n
		if _, err := drop.Exec(rowidOf(op.tid, 0), rowidOf(op.tid+1, 0)); err != nil {
			return err
		}
		_, err = w.tx.Exec(`DELETE FROM indexed WHERE tid = ?`, op.tid)
		return err
	case opMark:
		mark, err := w.prepare(&w.mark, `INSERT INTO indexed (tid, seq, id) VALUES (?, ?, ?) ON CONFLICT (tid) DO UPDATE SET seq = excluded.seq, id = excluded.id`)
		if err != nil {
			return err
		}
		_, err = mark.Exec(op.tid, int64(op.seq), op.text)
		return err
	}
	return nil
}

// finish writes the threads' row counts.
func (w *indexWriter) finish() error {
	for tid, n := range w.docs {
		if n == 0 {
			continue
		}
		if _, err := w.tx.Exec(`INSERT INTO indexed (tid, docs) VALUES (?, max(?, 0))
			ON CONFLICT (tid) DO UPDATE SET docs = max(docs + ?, 0)`, tid, n, n); err != nil {
			return err
		}
	}
	return nil
}

// compareAll finds, after an unclean shutdown, the threads whose index
// mark is not their projected seq (and the rows of threads gone).
func (x *searchIndex) compareAll() error {
	type mark struct {
		seq int64
		id  string
	}
	marks := map[int64]mark{}
	rows, err := x.r.Query(`SELECT tid, seq, id FROM indexed`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var tid int64
		var m mark
		if err := rows.Scan(&tid, &m.seq, &m.id); err != nil {
			rows.Close()
			return err
		}
		marks[tid] = m
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = x.s.r.Query(`SELECT tid, projected_seq, id FROM threads`)
	if err != nil {
		return err
	}
	var dirty []int64
	for rows.Next() {
		var tid, seq int64
		var id string
		if err := rows.Scan(&tid, &seq, &id); err != nil {
			rows.Close()
			return err
		}
		if m, ok := marks[tid]; !ok || m.seq != seq || m.id != "" && m.id != id {
			dirty = append(dirty, tid)
		}
		delete(marks, tid)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(marks) > 0 {
		var ops []indexOp
		for tid := range marks {
			ops = append(ops, indexOp{kind: opDropThread, tid: tid})
		}
		if err := x.apply(ops); err != nil {
			return err
		}
	}
	x.mu.Lock()
	for _, tid := range dirty {
		x.dirty[tid] = true
	}
	x.mu.Unlock()
	return nil
}

// catchUpDirty indexes dirty threads from state.db: every item whose
// shown version is newer than the thread's mark gets its text read from
// the rollout and put (replacing what the row held).
func (x *searchIndex) catchUpDirty() error {
	// A thread whose rollout cannot be read is tried again later (retry),
	// not forgotten: one unreadable rollout neither fails the searches
	// that wait for the catch-up nor keeps the other threads waiting.
	var later []int64
	var laterErr error
	for {
		x.mu.Lock()
		if x.closed || len(x.dirty) == 0 {
			if len(later) == 0 {
				x.retries = 0
			}
			x.mu.Unlock()
			if len(later) > 0 {
				x.retry(later, laterErr)
			}
			return nil
		}
		var batch []int64
		for tid := range x.dirty {
			batch = append(batch, tid)
			delete(x.dirty, tid)
			if len(batch) == 64 {
				break
			}
		}
		x.mu.Unlock()
		slices.Sort(batch)
		for i, tid := range batch {
			err := x.catchUpThread(tid)
			var ue *unreadableError
			switch {
			case errors.As(err, &ue):
				later, laterErr = append(later, tid), err
			case err != nil:
				x.markDirty(append(batch[i:], later...)...) // this one, the rest of the batch, and those for later
				return err
			}
		}
	}
}

// retry marks threads dirty again after a delay that doubles with each
// round of failures (1 s to 5 min), and says so in the log.
func (x *searchIndex) retry(tids []int64, cause error) {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return
	}
	x.retrying += len(tids)
	x.retries++
	delay := min(time.Second<<min(x.retries-1, 9), 5*time.Minute)
	x.mu.Unlock()
	x.s.opts.Logger.Warn("rolloutdb: search index could not read threads' rollouts; their items are retried later",
		"threads", len(tids), "retry_in", delay.String(), "err", cause.Error())
	time.AfterFunc(delay, func() {
		x.mu.Lock()
		x.retrying -= len(tids)
		x.mu.Unlock()
		x.markDirty(tids...)
	})
}

// unreadableError is a catch-up that could not read a thread's rollout
// (moved meanwhile, damaged, or an I/O error).
type unreadableError struct{ err error }

func (e *unreadableError) Error() string { return e.err.Error() }
func (e *unreadableError) Unwrap() error { return e.err }

func (x *searchIndex) catchUpThread(tid int64) error {
	// A consistent snapshot of the thread's rows.
	rtx, err := x.s.r.BeginTx(context.Background(), &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer func() { _ = rtx.Rollback() }()
	var id, rel string
	var projected int64
	err = rtx.QueryRow(`SELECT id, rollout_path, projected_seq FROM threads WHERE tid = ?`, tid).Scan(&id, &rel, &projected)
	if errors.Is(err, sql.ErrNoRows) {
		return x.apply([]indexOp{{kind: opDropThread, tid: tid}})
	}
	if err != nil {
		return err
	}
	// Redone whole, not from the thread's mark: the index may hold rows
	// its items no longer show (a rollback or delete whose operations were
	// lost with a failed chunk or a kill), which a catch-up from the mark
	// would leave, and Search counts every candidate toward its window. A
	// catch-up runs after a failure, an unclean shutdown or an overflowed
	// queue only.
	want, err := shownSince(rtx, tid, 0)
	if err != nil {
		return err
	}
	_ = rtx.Rollback()
	ops := []indexOp{{kind: opDropThread, tid: tid}}
	if len(want) > 0 {
		items, err := x.s.readItems(fileAt(id, rel), want)
		if err != nil {
			return &unreadableError{err}
		}
		for i, it := range items {
			if text := ftsText(&it); text != "" {
				ops = append(ops, indexOp{kind: opPut, tid: tid, seq: want[i].seq, text: text})
			} else {
				ops = append(ops, indexOp{kind: opDel, tid: tid, seq: want[i].seq}) // an older version may have had text
			}
		}
	}
	ops = append(ops, indexOp{kind: opMark, tid: tid, seq: uint64(projected), text: id})
	return x.apply(ops)
}

// shownSince lists where the shown version of each item of thread tid is
// whose shown version is newer than seq after (0: all), in seq order.
func shownSince(tx *sql.Tx, tid, after int64) ([]itemAt, error) {
	rows, err := tx.Query(`SELECT seq, seq + ver, frame FROM items WHERE tid = ? AND seq + ver > ? ORDER BY seq`, tid, after)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []itemAt
	for rows.Next() {
		var it itemAt
		var seq, last int64
		if err := rows.Scan(&seq, &last, &it.frame); err != nil {
			return nil, err
		}
		it.seq, it.lastSeq = uint64(seq), uint64(last)
		out = append(out, it)
	}
	return out, rows.Err()
}

// close applies what is queued, marks the index clean and closes it.
func (x *searchIndex) close() error {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return nil
	}
	x.closed = true
	x.cond.Broadcast()
	x.mu.Unlock()
	<-x.done
	var err error
	if x.lastError == nil && !x.unfinished {
		_, err = x.w.Exec(`UPDATE meta SET value = '1' WHERE key = 'clean'`)
	}
	x.closeDB()
	return err
}

// newGeneration draws the id that binds a search.db to the state.db whose
// projections it indexes.
func newGeneration() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d", hex.EncodeToString(b[:]), time.Now().UnixNano())
}
