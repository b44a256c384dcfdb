package pgindex

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/internal/pgtest/pgtesting"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

var ctx = context.Background()

// The package's tests share one throwaway PostgreSQL cluster (fsync on),
// a new database each.
func TestMain(m *testing.M) { pgtesting.Main(m) }

const testWorkspace = "ws-test"

// fleetSource is the adapter a facade would have: a fleet log as the
// index's Source.
type fleetSource struct{ l *fleet.Log }

func (f fleetSource) Read(ctx context.Context, id string) (Snapshot, error) {
	s, err := f.l.Read(ctx, id)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (f fleetSource) Path(id string) string { return f.l.Path(id) }

// world writes threads as a host does, without the facade (nothing may
// import it): to a fleet log, each frame handed to the host's index
// (when feed is set), and the same records, byte for byte, to a local
// workspace's rollouts with its own projection.Store (local), fed the
// same way: the oracle the fleet's index is compared with.
type world struct {
	t       testing.TB
	dsn     string
	log     *fleet.Log
	pg      *Store
	root    string
	local   *projection.Store
	threads map[string]*fleet.Thread
	writers map[string]*rollout.Writer
	loc     map[string]string
	feed    bool
	clock   time.Time
	// kept collects the fleet's batches (for a benchmark to enqueue).
	kept []projection.Batch
	keep bool
}

// newWorld opens a fleet log (host "a") on a new database, its index, and
// a local workspace with its store.
func newWorld(t testing.TB) *world {
	t.Helper()
	w := &world{t: t, dsn: pgtesting.Database(t), threads: map[string]*fleet.Thread{}, writers: map[string]*rollout.Writer{},
		loc: map[string]string{}, feed: true, clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	w.log = w.openLog("a")
	w.pg = w.openIndex(w.log, Options{})
	w.root = t.TempDir()
	for _, d := range []string{rollout.ActiveDir, rollout.ArchivedDir} {
		if err := os.MkdirAll(filepath.Join(w.root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	local, err := projection.Open(ctx, projection.Options{Root: w.root, WorkspaceID: testWorkspace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = local.Close() })
	w.local = local
	t.Cleanup(func() {
		for _, th := range w.threads {
			_ = th.Close()
		}
		for _, wr := range w.writers {
			_ = wr.Close()
		}
	})
	return w
}

func (w *world) openLog(host string) *fleet.Log {
	w.t.Helper()
	l, err := fleet.Open(ctx, w.dsn, fleet.Options{Host: host, WorkspaceID: testWorkspace})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = l.Close() })
	return l
}

// openIndex opens another Store of l's workspace (another host's).
func (w *world) openIndex(l *fleet.Log, o Options) *Store {
	w.t.Helper()
	if o.WorkspaceID == "" {
		o.WorkspaceID = testWorkspace
	}
	s, err := Open(ctx, l.Pool(), l.Workspace(), fleetSource{l}, o)
	if err != nil {
		w.t.Fatalf("%+v", err)
	}
	w.t.Cleanup(func() { _ = s.Close() })
	return s
}

func (w *world) now() time.Time {
	w.clock = w.clock.Add(time.Millisecond)
	return w.clock
}

func rec(t testing.TB, kind rollout.Kind, turn string, body any) rollout.Record {
	t.Helper()
	r, err := rollout.NewRecord(kind, turn, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (w *world) localPath(id string) string {
	if w.loc[id] == projection.LocationArchived {
		p, _ := rollout.ArchivedPath(w.root, id)
		return p
	}
	p, _ := rollout.ActivePath(w.root, id)
	return p
}

func (w *world) create(id string, src rollout.Source) {
	w.t.Helper()
	if src.Kind == "" {
		src.Kind = rollout.SourceUser
	}
	opened := rollout.ThreadOpened{ThreadID: id, WorkspaceID: testWorkspace, Source: src, Created: w.now()}
	th, err := w.log.Create(ctx, opened)
	if err != nil {
		w.t.Fatal(err)
	}
	w.threads[id] = th
	w.loc[id] = projection.LocationActive
	res, hdr, _ := th.Created()
	if w.keep {
		w.kept = append(w.kept, projection.Batch{Thread: id, Location: projection.LocationActive, Offset: res.Offset, End: res.End, DataCRC: res.DataCRC,
			FileID: th.Header().FileID, Records: []rollout.Record{hdr}})
	}
	if w.feed {
		w.pg.Enqueue(projection.Batch{Thread: id, Location: projection.LocationActive, Offset: res.Offset, End: res.End, DataCRC: res.DataCRC,
			FileID: th.Header().FileID, Records: []rollout.Record{hdr}})
	}
	wr, err := rollout.Create(ctx, w.localPath(id), opened, rollout.Options{Sync: rollout.SyncNever, CompressAbove: -1, Now: w.now})
	if err != nil {
		w.t.Fatal(err)
	}
	w.writers[id] = wr
	if lres, lhdr, ok := wr.Created(); ok && w.feed {
		w.local.Enqueue(projection.Batch{Thread: id, Location: projection.LocationActive, Offset: lres.Offset, End: lres.End, DataCRC: lres.DataCRC,
			FileID: wr.Header().FileID, Records: []rollout.Record{lhdr}})
	}
}

// append appends one frame to both, and hands it to both indexes.
func (w *world) append(id string, recs ...rollout.Record) rollout.AppendResult {
	w.t.Helper()
	at := w.now()
	mine := make([]rollout.Record, len(recs))
	theirs := make([]rollout.Record, len(recs))
	for i, r := range recs {
		if r.Time.IsZero() {
			r.Time = at
		}
		mine[i], theirs[i] = r, r
	}
	res, err := w.threads[id].Append(ctx, mine, rollout.AppendOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	lres, err := w.writers[id].Append(ctx, theirs, rollout.AppendOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	if lres.Offset != res.Offset || lres.End != res.End || lres.DataCRC != res.DataCRC {
		w.t.Fatalf("the local rollout's frame is not the fleet's: %+v, %+v", lres, res)
	}
	if w.keep {
		w.kept = append(w.kept, projection.Batch{Thread: id, Location: w.loc[id], Offset: res.Offset, End: res.End, DataCRC: res.DataCRC, Records: mine})
	}
	if w.feed {
		w.pg.Enqueue(projection.Batch{Thread: id, Location: w.loc[id], Offset: res.Offset, End: res.End, DataCRC: res.DataCRC, Records: mine})
		w.local.Enqueue(projection.Batch{Thread: id, Location: w.loc[id], Offset: res.Offset, End: res.End, DataCRC: res.DataCRC, Records: theirs})
	}
	return res
}

// turn appends a whole turn: start and user message in one frame, then an
// agent message, a tool call and result, and the commit frame
// (projection's tests' turn).
func (w *world) turn(id, turn, text string) {
	w.t.Helper()
	t := w.t
	w.append(id, rec(t, rollout.KindTurnStarted, turn, rollout.TurnStarted{Model: "m1"}),
		rec(t, rollout.KindItemAppended, turn, rollout.Item{ID: turn + "-u", Type: rollout.ItemUserMessage, Text: text}))
	w.append(id, rec(t, rollout.KindItemAppended, turn, rollout.Item{ID: turn + "-a", Type: rollout.ItemAgentMessage, Status: rollout.ItemInProgress, Text: "thinking"}))
	w.append(id,
		rec(t, rollout.KindItemAppended, turn, rollout.Item{ID: turn + "-c", Type: rollout.ItemToolCall, CallID: turn, Name: "grep", Arguments: `{"q":"x"}`}),
		rec(t, rollout.KindItemAppended, turn, rollout.Item{ID: turn + "-r", Type: rollout.ItemToolResult, CallID: turn, Text: "result of " + text}),
		rec(t, rollout.KindItemAppended, turn, rollout.Item{ID: turn + "-a", Type: rollout.ItemAgentMessage, Status: rollout.ItemCompleted, Text: "answer to " + text}),
		rec(t, rollout.KindModelHistoryAppended, turn, rollout.ModelHistory{Messages: [][]byte{[]byte(`{"role":"user"}`)}}),
		rec(t, rollout.KindTurnCompleted, turn, rollout.TurnCompleted{Status: rollout.TurnStatusCompleted, Usage: rollout.Usage{InputTokens: 10, OutputTokens: 5, TotalTokens: 15}}))
}

func (w *world) metadata(id string, u rollout.MetadataUpdated) {
	w.t.Helper()
	w.append(id, rec(w.t, rollout.KindMetadataUpdated, "", u))
}

// move moves a thread (archive, restore) in both: no frame is published,
// as when another host moves it.
func (w *world) move(id, to string) {
	w.t.Helper()
	from := w.loc[id]
	if err := w.log.Move(ctx, id, from, to, w.threads[id]); err != nil {
		w.t.Fatal(err)
	}
	old := w.localPath(id)
	if err := w.writers[id].Close(); err != nil {
		w.t.Fatal(err)
	}
	w.loc[id] = to
	if err := os.Rename(old, w.localPath(id)); err != nil {
		w.t.Fatal(err)
	}
	wr, _, err := rollout.Open(ctx, w.localPath(id), id, rollout.Options{Sync: rollout.SyncNever, CompressAbove: -1, Now: w.now})
	if err != nil {
		w.t.Fatal(err)
	}
	w.writers[id] = wr
}

// remove deletes a thread from both, and forgets it in both indexes.
func (w *world) remove(id string) {
	w.t.Helper()
	if err := w.threads[id].Close(); err != nil {
		w.t.Fatal(err)
	}
	delete(w.threads, id)
	if err := w.log.Delete(ctx, id); err != nil {
		w.t.Fatal(err)
	}
	if err := w.writers[id].Close(); err != nil {
		w.t.Fatal(err)
	}
	delete(w.writers, id)
	if err := os.Remove(w.localPath(id)); err != nil {
		w.t.Fatal(err)
	}
	if err := w.pg.Forget(ctx, id); err != nil {
		w.t.Fatal(err)
	}
	if err := w.local.Forget(ctx, id); err != nil {
		w.t.Fatal(err)
	}
}

// info is a thread's ThreadInfo without where its rollout is (a path in
// one engine, a fleet name in the other).
func info(t projection.ThreadInfo) projection.ThreadInfo {
	t.RolloutPath = ""
	return t
}

// sameThread fails unless both indexes say the same of a thread: its
// row, every turn with its items, its checkpoints.
func (w *world) sameThread(s *Store, id string) {
	w.t.Helper()
	want, werr := w.local.Thread(ctx, id)
	got, gerr := s.Thread(ctx, id)
	if (werr == nil) != (gerr == nil) {
		w.t.Fatalf("thread %s: local %v, fleet %v", id, werr, gerr)
	}
	if werr != nil {
		return
	}
	if !reflect.DeepEqual(info(got), info(want)) {
		w.t.Fatalf("thread %s:\nfleet %+v\nlocal %+v", id, info(got), info(want))
	}
	wt, err := w.local.Turns(ctx, id, 1, 1<<20)
	if err != nil {
		w.t.Fatal(err)
	}
	gt, err := s.Turns(ctx, id, 1, 1<<20)
	if err != nil {
		w.t.Fatal(err)
	}
	if !reflect.DeepEqual(gt, wt) {
		w.t.Fatalf("turns of %s:\nfleet %+v\nlocal %+v", id, gt, wt)
	}
	wc, _ := w.local.Checkpoints(ctx, id)
	gc, err := s.Checkpoints(ctx, id)
	if err != nil || !reflect.DeepEqual(gc, wc) {
		w.t.Fatalf("checkpoints of %s: fleet %+v %v, local %+v", id, gc, err, wc)
	}
	wi, _ := w.local.TurnIDs(ctx, id)
	gi, err := s.TurnIDs(ctx, id)
	if err != nil || !reflect.DeepEqual(gi, wi) {
		w.t.Fatalf("turn ids of %s: fleet %v %v, local %v", id, gi, err, wi)
	}
}

// sameList fails unless both indexes list the same pages for o.
func (w *world) sameList(s *Store, o projection.ListOptions) []string {
	w.t.Helper()
	var ids []string
	lc, gc := o.Cursor, o.Cursor
	for range 100 {
		o.Cursor = lc
		wp, werr := w.local.List(ctx, o)
		o.Cursor = gc
		gp, gerr := s.List(ctx, o)
		if werr != nil || gerr != nil {
			w.t.Fatalf("list %+v: local %v, fleet %v", o, werr, gerr)
		}
		if len(wp.Threads) != len(gp.Threads) {
			w.t.Fatalf("list %+v: fleet %d threads %v, local %d %v", o, len(gp.Threads), pageIDs(gp), len(wp.Threads), pageIDs(wp))
		}
		for i := range wp.Threads {
			if !reflect.DeepEqual(info(gp.Threads[i]), info(wp.Threads[i])) {
				w.t.Fatalf("list %+v, row %d:\nfleet %+v\nlocal %+v", o, i, info(gp.Threads[i]), info(wp.Threads[i]))
			}
			ids = append(ids, gp.Threads[i].ID)
		}
		if (wp.NextCursor == "") != (gp.NextCursor == "") {
			w.t.Fatalf("list %+v: next cursor fleet %q, local %q", o, gp.NextCursor, wp.NextCursor)
		}
		if gp.NextCursor == "" {
			return ids
		}
		if gp.NextCursor != wp.NextCursor {
			w.t.Fatalf("list %+v: cursors differ: fleet %q, local %q", o, gp.NextCursor, wp.NextCursor)
		}
		lc, gc = wp.NextCursor, gp.NextCursor
	}
	w.t.Fatal("list: more than 100 pages")
	return nil
}

func pageIDs(p projection.Page) []string {
	var out []string
	for _, t := range p.Threads {
		out = append(out, t.ID)
	}
	return out
}

// hitKey is what two engines' hits share: the item, its turn, its type
// and snippet (not the rank: state.db's is bm25, the fleet's ts_rank).
func hitKey(h projection.Hit) string {
	return fmt.Sprintf("%s/%s/%d/%s/%s %q", h.Thread, h.Turn, h.Ordinal, h.Item, h.Type, h.Snippet)
}

// sameSearch fails unless both indexes find the same items for q (in
// whatever order; when the limit cut the hits, the fleet's must be among
// what the local index finds without it: the two rank differently), and
// returns the fleet's as thread/item, sorted.
func (w *world) sameSearch(s *Store, q string, o projection.SearchOptions) []string {
	w.t.Helper()
	limit := o.Limit
	if limit <= 0 {
		limit = 20
	}
	wh, werr := w.local.Search(ctx, q, o)
	gh, gerr := s.Search(ctx, q, o)
	if (werr == nil) != (gerr == nil) {
		w.t.Fatalf("search %q %+v: local %v, fleet %v", q, o, werr, gerr)
	}
	cut := len(gh) == limit
	if cut {
		all := o
		all.Limit, all.Window = 500, max(o.Window, 500)
		if wh, werr = w.local.Search(ctx, q, all); werr != nil {
			w.t.Fatal(werr)
		}
	}
	var want, got, ids []string
	for _, h := range wh {
		want = append(want, hitKey(h))
	}
	for _, h := range gh {
		got = append(got, hitKey(h))
		ids = append(ids, h.Thread+"/"+h.Item)
	}
	sort.Strings(want)
	sort.Strings(got)
	sort.Strings(ids)
	if cut {
		for _, g := range got {
			if !slices.Contains(want, g) {
				w.t.Fatalf("search %q %+v: fleet hit %s is not local's: %v", q, o, g, want)
			}
		}
		if len(wh) < limit {
			w.t.Fatalf("search %q %+v: fleet %d hits, local %d", q, o, len(gh), len(wh))
		}
	} else if !reflect.DeepEqual(got, want) {
		w.t.Fatalf("search %q %+v:\nfleet %v\nlocal %v", q, o, got, want)
	}
	return ids
}

// dump renders a workspace's projected rows in a canonical text form:
// two indexes agree exactly when their dumps are equal. Keys that differ
// with history (tids, file ids, stamps) are left out or replaced by
// thread ids.
func dump(t testing.TB, s *Store) string {
	t.Helper()
	if err := s.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	cols := strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(threadCols, "tid, "), ", rev"), "file_id, ", "")
	for _, q := range []string{
		`SELECT ` + cols + ` FROM rolloutdb.index_threads WHERE ws = $1 ORDER BY id`,
		`SELECT l.label, l.id, l.location, l.updated_at, l.created_at FROM rolloutdb.index_labels l WHERE ws = $1 ORDER BY l.id, l.label`,
		`SELECT th.id, ` + prefixCols("t.", turnCols) + ` FROM rolloutdb.index_turns t JOIN rolloutdb.index_threads th ON th.tid = t.tid
			WHERE th.ws = $1 ORDER BY th.id, t.turn_id`,
		`SELECT th.id, i.seq, i.turn, i.idh, i.last_seq, i.frame, i.type, i.words::text FROM rolloutdb.index_items i
			JOIN rolloutdb.index_threads th ON th.tid = i.tid WHERE th.ws = $1 ORDER BY th.id, i.seq`,
		`SELECT th.id, c.seq, c.frame_offset, c.checkpoint_id, c.covered_turn, c.covered_instance, c.replacement_messages, c.trigger,
			c.tokens_before, c.tokens_after FROM rolloutdb.index_checkpoints c JOIN rolloutdb.index_threads th ON th.tid = c.tid
			WHERE th.ws = $1 ORDER BY th.id, c.seq`,
		`SELECT thread_id, seq, path, size, sha256 FROM rolloutdb.index_artifact_refs WHERE ws = $1 ORDER BY thread_id, seq`,
	} {
		rows, err := s.pool.Query(ctx, q, s.ws)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		fmt.Fprintf(&b, "== %.60s\n", q)
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&b, vals...)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// dumpDiff shows the lines of two dumps that differ.
func dumpDiff(got, want string) string {
	in := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	g, w := in(got), in(want)
	var b strings.Builder
	for _, l := range strings.Split(got, "\n") {
		if g[l] > w[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	for _, l := range strings.Split(want, "\n") {
		if w[l] > g[l] {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	return b.String()
}

// checkEqualsRebuild fails when the store's rows are not what a rebuild
// of them gives.
func checkEqualsRebuild(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	before := dump(t, s)
	if _, err := s.Rebuild(ctx, projection.RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	if after := dump(t, s); after != before {
		t.Fatalf("rows differ from a rebuild (+ rebuilt, - incremental):\n%s", dumpDiff(after, before))
	}
	if rep, err := s.CheckIntegrity(ctx); err != nil || !rep.OK() {
		t.Fatalf("integrity: %+v %v", rep, err)
	}
}

// exec runs SQL on the store's pool (a test reaching behind the API).
func exec(t testing.TB, pool *pgxpool.Pool, q string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(ctx, q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}
