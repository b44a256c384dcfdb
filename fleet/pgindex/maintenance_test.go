package pgindex

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// A workspace indexed for the first time (its threads written before any
// index) is built from the log at Open, and says so; a second Open of it
// builds nothing.
func TestOpenBuildsAWorkspaceNeverIndexed(t *testing.T) {
	w := newWorld(t)
	w.feed = false
	scenario(w)
	lo, err := w.log.Pool().Exec(ctx, `DELETE FROM rolloutdb.index_meta`)
	if err != nil || lo.RowsAffected() == 0 {
		t.Fatalf("forget the index was built: %v", err)
	}
	exec(t, w.log.Pool(), `DELETE FROM rolloutdb.index_threads`)
	s := w.openIndex(w.log, Options{})
	rep := s.Report()
	if !rep.Created || rep.Rebuild == nil || rep.Rebuild.Threads != 2 || rep.Rebuild.Records == 0 || rep.BusinessStateLost {
		t.Fatalf("open report: %+v (rebuild %+v)", rep, rep.Rebuild)
	}
	for _, id := range []string{"s1", "s2"} {
		w.sameThread(s, id)
	}
	if rep := w.openIndex(w.log, Options{}).Report(); rep.Created || rep.Rebuild != nil {
		t.Fatalf("second open: %+v", rep)
	}
}

// A layout newer than this build's is refused and left alone; a database
// with no fleet log is refused.
func TestNewerLayoutIsRefused(t *testing.T) {
	w := newWorld(t)
	exec(t, w.log.Pool(), `UPDATE rolloutdb.index_schema_version SET version = $1`, SchemaVersion+1)
	_, err := Open(ctx, w.log.Pool(), w.log.Workspace(), fleetSource{w.log}, Options{})
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("open of a newer layout: %v", err)
	}
	var v int
	if err := w.log.Pool().QueryRow(ctx, `SELECT version FROM rolloutdb.index_schema_version`).Scan(&v); err != nil || v != SchemaVersion+1 {
		t.Fatalf("the layout was changed: %d %v", v, err)
	}
	exec(t, w.log.Pool(), `DROP SCHEMA rolloutdb CASCADE`)
	if _, err := Open(ctx, w.log.Pool(), w.log.Workspace(), fleetSource{w.log}, Options{}); !errors.Is(err, ErrNoFleet) {
		t.Fatalf("open without a fleet log: %v", err)
	}
}

// A rebuild interrupted after some chunks continues after its watermark
// (at the next Rebuild or Open), and ends with the rows an uninterrupted
// one makes; a restart starts over. Progress is reported per chunk.
func TestRebuildResumesFromItsWatermark(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	for i := range 7 {
		id := fmt.Sprintf("r%d", i)
		w.create(id, rollout.Source{})
		w.turn(id, "a", fmt.Sprintf("thread %d", i))
	}
	want := dump(t, s)
	defer func(n int) { rebuildChunk = n }(rebuildChunk)
	rebuildChunk = 2
	cctx, cancel := context.WithCancel(ctx)
	var seen []projection.RebuildProgress
	_, err := s.Rebuild(cctx, projection.RebuildOptions{Restart: true, Progress: func(p projection.RebuildProgress) {
		seen = append(seen, p)
		if p.Threads == 4 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) || len(seen) != 2 || seen[1].Total != 7 {
		t.Fatalf("interrupted rebuild: %v, progress %+v", err, seen)
	}
	if m := s.Metrics(); m.Rebuild != nil {
		t.Fatalf("a rebuild's progress after it stopped: %+v", m.Rebuild)
	}
	// A new Open finishes it.
	o := w.openIndex(w.log, Options{})
	if rep := o.Report(); rep.Rebuild == nil || !rep.Rebuild.Resumed || rep.Rebuild.Threads != 3 {
		t.Fatalf("open after an interrupted rebuild: %+v", rep.Rebuild)
	}
	if got := dump(t, o); got != want {
		t.Fatalf("resumed rebuild:\n%s", dumpDiff(got, want))
	}
	rep, err := s.Rebuild(ctx, projection.RebuildOptions{})
	if err != nil || rep.Resumed || rep.Threads != 7 || rep.RecordsPerSec() <= 0 {
		t.Fatalf("a rebuild after: %+v %v", rep, err)
	}
	if got := dump(t, s); got != want {
		t.Fatalf("rebuild:\n%s", dumpDiff(got, want))
	}
}

// A rebuild while the host writes loses nothing: what is appended during
// it reaches the rows through the applier or a read.
func TestRebuildWhileWriting(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	for i := range 6 {
		w.create(fmt.Sprint("w", i), rollout.Source{})
	}
	defer func(n int) { rebuildChunk = n }(rebuildChunk)
	rebuildChunk = 1
	done := make(chan error, 1)
	go func() {
		_, err := s.Rebuild(ctx, projection.RebuildOptions{Restart: true})
		done <- err
	}()
	for round := range 4 {
		for i := range 6 {
			w.turn(fmt.Sprint("w", i), fmt.Sprint("r", round), "while rebuilding")
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		w.sameThread(s, fmt.Sprint("w", i))
	}
	checkEqualsRebuild(t, s)
}

// CheckIntegrity says ok of rows as the applier leaves them, and names
// what is wrong with rows tampered with behind its back.
func TestCheckIntegrityFindsWhatIsWrong(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	scenario(w)
	if rep, err := s.CheckIntegrity(ctx); err != nil || !rep.OK() || len(rep.StateDB) != 1 {
		t.Fatalf("integrity of sound rows: %+v %v", rep, err)
	}
	pool := s.pool
	for _, c := range []struct {
		break_, want string
	}{
		{`UPDATE rolloutdb.index_threads SET turn_count = turn_count + 1 WHERE id = 's1'`, "turn count"},
		{`UPDATE rolloutdb.index_threads SET item_count = 0 WHERE id = 's2'`, "item count"},
		{`UPDATE rolloutdb.index_labels SET updated_at = 1 WHERE id = 's2' AND label = 'sub'`, "label rows"},
		{`DELETE FROM rolloutdb.index_turns t USING rolloutdb.index_threads th WHERE th.tid = t.tid AND th.id = 's2'`, "items outside a visible turn"},
		{`UPDATE rolloutdb.index_threads SET projected_offset = projected_offset + 1000 WHERE id = 's1'`, "projected past"},
		{`UPDATE rolloutdb.index_threads SET checkpoint_offset = 5, checkpoint_seq = 999 WHERE id = 's1'`, "latest checkpoint"},
	} {
		exec(t, pool, c.break_)
		rep, err := s.CheckIntegrity(ctx)
		if err != nil || rep.OK() || !strings.Contains(strings.Join(rep.StateDB, "\n"), c.want) {
			t.Fatalf("after %s: %+v %v, want a line about %q", c.break_, rep, err, c.want)
		}
	}
	if _, err := s.Rebuild(ctx, projection.RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	if rep, err := s.CheckIntegrity(ctx); err != nil || !rep.OK() {
		t.Fatalf("integrity after a rebuild: %+v %v", rep, err)
	}
}

// blockApplier locks a thread's row in a transaction of its own, so that
// the applier's next cycle waits for it; the func returned lets it go.
func blockApplier(t *testing.T, s *Store, id string) func() {
	t.Helper()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM rolloutdb.index_threads WHERE ws = $1 AND id = $2 FOR UPDATE`, s.ws, id); err != nil {
		t.Fatal(err)
	}
	return func() { _ = tx.Rollback(ctx) }
}

// publish appends recs to a thread of the fleet and the local workspace,
// and returns the fleet's batch, not enqueued (the local one is).
func (w *world) publish(id string, recs ...rollout.Record) projection.Batch {
	w.t.Helper()
	at := w.now()
	for i := range recs {
		recs[i].Time = at
	}
	feed := w.feed
	w.feed = false
	res := w.append(id, recs...)
	w.feed = feed
	for i := range recs {
		recs[i].Seq = res.FirstSeq + uint64(i)
	}
	w.local.Enqueue(projection.Batch{Thread: id, Offset: res.Offset, End: res.End, DataCRC: res.DataCRC, Records: recs})
	return projection.Batch{Thread: id, Offset: res.Offset, End: res.End, DataCRC: res.DataCRC, Records: recs}
}

func items(t *testing.T, turn string, n int) []rollout.Record {
	var out []rollout.Record
	for i := range n {
		out = append(out, rec(t, rollout.KindItemAppended, turn, rollout.Item{ID: fmt.Sprint(turn, i), Type: rollout.ItemAgentMessage, Text: "lag"}))
	}
	return out
}

// MaxLag holds an Enqueue while the applier is that far behind, until it
// catches up; Settle waits for what was enqueued; a queue past QueueLimit
// drops the thread's frames and catches it up from the log instead; an
// invalid thread id is refused; metrics count it all.
func TestApplierLagAndOverflow(t *testing.T) {
	w := newWorld(t)
	s := w.openIndex(w.log, Options{MaxLag: 4, QueueLimit: 1000, Linger: -1})
	w.pg = s
	w.create("t1", rollout.Source{})
	w.append("t1", rec(t, rollout.KindTurnStarted, "a", rollout.TurnStarted{}))
	if err := s.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	release := blockApplier(t, s, "t1")
	s.Enqueue(w.publish("t1", items(t, "a", 5)...)) // taken by a cycle, which waits for the lock
	held := w.publish("t1", items(t, "b", 1)...)
	done := make(chan struct{})
	go func() {
		s.Enqueue(held) // 5 records unapplied: past MaxLag
		close(done)
	}()
	p := s.proj
	p.mu.Lock()
	for p.stalls == 0 {
		p.cond.Wait()
	}
	p.mu.Unlock()
	select {
	case <-done:
		t.Fatal("Enqueue returned while the applier was MaxLag behind")
	default:
	}
	release()
	<-done
	if err := s.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if m := s.Metrics(); m.Stalls != 1 || m.Stalled <= 0 || m.LagRecords != 0 || m.Applied < 7 {
		t.Fatalf("metrics after a stall: %+v", m)
	}
	w.sameThread(s, "t1")

	// Past QueueLimit: the thread is caught up from the log.
	o := w.openIndex(w.log, Options{MaxLag: -1, QueueLimit: 6, Linger: -1})
	w.pg = o
	release = blockApplier(t, o, "t1")
	o.Enqueue(w.publish("t1", items(t, "c", 1)...))
	for _, n := range []int{3, 4, 2} {
		o.Enqueue(w.publish("t1", items(t, fmt.Sprint("d", n), n)...))
	}
	before := o.Metrics().CatchUps
	release()
	if err := o.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if m := o.Metrics(); m.CatchUps <= before {
		t.Fatalf("an overflowed queue was not caught up from the log: %+v", m)
	}
	w.sameThread(o, "t1")

	o.Enqueue(projection.Batch{Thread: "../escape", Offset: 128, End: 200, Records: []rollout.Record{rec(t, rollout.KindMetadataUpdated, "", rollout.MetadataUpdated{})}})
	if err := o.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := o.pool.QueryRow(ctx, `SELECT count(*) FROM rolloutdb.index_threads WHERE id <> 't1'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows of a refused id: %d %v", n, err)
	}
	checkEqualsRebuild(t, o)
}

// A closed store refuses reads and writes with ErrClosed; CopyTo says to
// use the database's tools.
func TestClosedStoreAndCopyTo(t *testing.T) {
	w := newWorld(t)
	s := w.openIndex(w.log, Options{})
	if err := s.CopyTo(ctx, t.TempDir()+"/x"); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("CopyTo: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if _, err := s.List(ctx, projection.ListOptions{}); !errors.Is(err, rollout.ErrClosed) {
		t.Fatalf("List after Close: %v", err)
	}
	if _, err := s.AddGoal(ctx, "t1", "x"); !errors.Is(err, rollout.ErrClosed) {
		t.Fatalf("AddGoal after Close: %v", err)
	}
	if err := s.Settle(ctx); !errors.Is(err, rollout.ErrClosed) {
		t.Fatalf("Settle after Close: %v", err)
	}
	s.Enqueue(projection.Batch{Thread: "t1", Records: []rollout.Record{{}}}) // dropped, not a panic
}
