package projection

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/rollout"
)

const testWorkspace = "ws-test"

// tb is what the helpers need of a test: *testing.T and *rapid.T both.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// workspace writes rollouts the way a host does, without the facade
// (nothing may import it): a data directory, writers per thread, and
// optionally a store whose projector is fed each frame.
type workspace struct {
	t       tb
	root    string
	writers map[string]*rollout.Writer
	loc     map[string]string
	store   *Store // fed by append when non-nil and feed is true
	feed    bool
	clock   time.Time
	cleanup func(func())
}

func newWorkspace(t testing.TB) *workspace {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{rollout.ActiveDir, rollout.ArchivedDir} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w := &workspace{t: t, root: root, writers: map[string]*rollout.Writer{}, loc: map[string]string{}, feed: true,
		clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), cleanup: t.Cleanup}
	t.Cleanup(func() {
		for _, wr := range w.writers {
			_ = wr.Close()
		}
	})
	return w
}

func (w *workspace) now() time.Time {
	w.clock = w.clock.Add(time.Millisecond)
	return w.clock
}

func (w *workspace) writerOpts() rollout.Options {
	return rollout.Options{Sync: rollout.SyncNever, Now: w.now}
}

// open opens a store on the workspace; path "" is in memory.
func (w *workspace) open(path string) *Store {
	w.t.Helper()
	s, err := Open(context.Background(), Options{Path: path, Root: w.root, WorkspaceID: testWorkspace})
	if err != nil {
		w.t.Fatal(err)
	}
	w.cleanup(func() { _ = s.Close() })
	return s
}

func (w *workspace) path(id string) string {
	if w.loc[id] == LocationArchived {
		p, _ := rollout.ArchivedPath(w.root, id)
		return p
	}
	p, _ := rollout.ActivePath(w.root, id)
	return p
}

func (w *workspace) create(id string, src rollout.Source) {
	w.t.Helper()
	if src.Kind == "" {
		src.Kind = rollout.SourceUser
	}
	w.loc[id] = LocationActive
	wr, err := rollout.Create(context.Background(), w.path(id), rollout.ThreadOpened{ThreadID: id, WorkspaceID: testWorkspace, Source: src, Created: w.now()}, w.writerOpts())
	if err != nil {
		w.t.Fatal(err)
	}
	w.writers[id] = wr
}

func rec(t tb, kind rollout.Kind, turn string, body any) rollout.Record {
	t.Helper()
	r, err := rollout.NewRecord(kind, turn, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (w *workspace) append(id string, recs ...rollout.Record) rollout.AppendResult {
	w.t.Helper()
	res, err := w.writers[id].Append(context.Background(), recs, rollout.AppendOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	if w.store != nil && w.feed {
		w.store.Enqueue(Batch{Thread: id, Location: w.loc[id], Offset: res.Offset, End: res.End, DataCRC: res.DataCRC, Records: recs})
	}
	return res
}

// turn appends a whole turn: start and user message in one frame, then an
// agent message, a tool call and result, and the commit frame.
func (w *workspace) turn(id, turn, text string) {
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

// deleteThread deletes a thread for good: its writer closed, its rollout
// removed, and its rows dropped from store s.
func (w *workspace) deleteThread(s *Store, id string) {
	w.t.Helper()
	if err := w.writers[id].Close(); err != nil {
		w.t.Fatal(err)
	}
	delete(w.writers, id)
	if err := os.Remove(w.path(id)); err != nil {
		w.t.Fatal(err)
	}
	if err := s.Forget(context.Background(), id); err != nil {
		w.t.Fatal(err)
	}
}

// move closes a thread's writer, moves its rollout and reopens it there.
func (w *workspace) move(id, loc string) {
	w.t.Helper()
	from := w.path(id)
	if err := w.writers[id].Close(); err != nil {
		w.t.Fatal(err)
	}
	w.loc[id] = loc
	if err := os.Rename(from, w.path(id)); err != nil {
		w.t.Fatal(err)
	}
	wr, _, err := rollout.Open(context.Background(), w.path(id), id, w.writerOpts())
	if err != nil {
		w.t.Fatal(err)
	}
	w.writers[id] = wr
}

// dump renders every projection, and the search index, in a canonical
// text form: two stores agree exactly when their dumps are equal. Thread
// keys (tids, which differ with history) are replaced by thread ids.
func dump(t tb, s *Store) string {
	t.Helper()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.idx.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	query := func(db *sql.DB, q string) {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		fmt.Fprintf(&b, "== %s\n", strings.Join(cols, ","))
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&b, vals...)
		}
	}
	// Every column but the key and the random stamp of the last write.
	query(s.w, `SELECT `+strings.TrimSuffix(strings.TrimPrefix(threadCols, "tid, "), ", rev")+` FROM threads ORDER BY id`)
	query(s.w, `SELECT label, thread_id FROM thread_labels ORDER BY label, thread_id`)
	query(s.w, `SELECT th.id, `+prefixCols("t.", turnCols)+` FROM turns t JOIN threads th ON th.tid = t.tid ORDER BY th.id, t.turn_id`)
	query(s.w, `SELECT th.id, i.seq, i.seq - i.toff, i.idh, i.seq + i.ver, i.frame, i.type FROM items i JOIN threads th ON th.tid = i.tid ORDER BY th.id, i.seq`)
	query(s.w, `SELECT th.id, c.seq, c.frame_offset, c.checkpoint_id, c.covered_turn, c.covered_instance, c.replacement_messages, c.trigger,
		c.tokens_before, c.tokens_after FROM checkpoints c JOIN threads th ON th.tid = c.tid ORDER BY th.id, c.seq`)
	query(s.w, `SELECT * FROM artifact_refs ORDER BY thread_id, seq`)
	// The index holds no text: it must hold every word of every live
	// item's shown text, and nothing else under a thread's key.
	fmt.Fprintf(&b, "== index\n%s\n", strings.Join(indexWords(t, s), "\n"))
	return b.String()
}

// indexWords checks the index against the items' shown texts (read from
// the rollouts, tokenized by FTS5 in memory) and returns "thread seq
// word" of the live items, sorted.
func indexWords(t tb, s *Store) []string {
	t.Helper()
	type live struct {
		id   string
		file rolloutFile
		want []itemAt
	}
	threads := map[int64]*live{}
	rows, err := s.w.Query(`SELECT th.tid, th.id, th.rollout_path, i.seq, i.seq + i.ver, i.frame FROM items i
		JOIN threads th ON th.tid = i.tid ORDER BY th.tid, i.seq`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var tid, seq, last, frame int64
		var id, rel string
		if err := rows.Scan(&tid, &id, &rel, &seq, &last, &frame); err != nil {
			t.Fatal(err)
		}
		l := threads[tid]
		if l == nil {
			l = &live{id: id, file: fileAt(id, rel)}
			threads[tid] = l
		}
		l.want = append(l.want, itemAt{seq: uint64(seq), lastSeq: uint64(last), frame: frame})
	}
	rows.Close()
	ids := map[int64]string{}
	if rows, err = s.w.Query(`SELECT tid, id FROM threads`); err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var tid int64
		var id string
		_ = rows.Scan(&tid, &id)
		ids[tid] = id
	}
	rows.Close()
	mem, err := sql.Open("sqlite", "file::memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	mem.SetMaxOpenConns(1)
	for _, q := range []string{`CREATE VIRTUAL TABLE f USING ` + searchFTSArgs, `CREATE VIRTUAL TABLE v USING fts5vocab(f, instance)`} {
		if _, err := mem.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	for tid, l := range threads {
		items, err := s.readItems(l.file, l.want)
		if err != nil {
			t.Fatalf("read the items of %s: %v", l.id, err)
		}
		for i, it := range items {
			if text := ftsText(&it); text != "" {
				if _, err := mem.Exec(`INSERT INTO f (rowid, text) VALUES (?, ?)`, rowidOf(tid, l.want[i].seq), text); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	words := func(db *sql.DB, table string) map[string]bool {
		rows, err := db.Query(`SELECT term, doc FROM ` + table)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]bool{}
		for rows.Next() {
			var term string
			var doc int64
			if err := rows.Scan(&term, &doc); err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("%d %s", doc, term)] = true
		}
		return out
	}
	if _, err := s.idx.w.Exec(`CREATE VIRTUAL TABLE IF NOT EXISTS temp.vocab USING fts5vocab(main, fts, instance)`); err != nil {
		t.Fatal(err)
	}
	want, have := words(mem, "v"), words(s.idx.w, "temp.vocab")
	var lines []string
	for k := range want {
		if !have[k] {
			t.Fatalf("the index lacks a word of a live item: %s", k)
		}
	}
	for k := range have {
		var doc int64
		var term string
		fmt.Sscanf(k, "%d %s", &doc, &term)
		tid, seq := splitRowid(doc)
		if !want[k] {
			if _, live := ids[tid]; !live {
				// A key no thread has (a row deleted behind the store's
				// back): Search passes over it, and the next comparison of
				// marks drops it, as does a thread given the key.
				continue
			}
			t.Fatalf("the index holds %q under thread %d (%q) seq %d, which no live item shows", term, tid, ids[tid], seq)
		}
		lines = append(lines, fmt.Sprintf("%s %d %s", ids[tid], seq, term))
	}
	// The counts ranking weighs words by are the rows there are.
	var n, docs, perThread int64
	if err := s.idx.w.QueryRow(`SELECT (SELECT count(*) FROM fts), (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'docs'),
		(SELECT coalesce(sum(docs), 0) FROM indexed)`).Scan(&n, &docs, &perThread); err != nil {
		t.Fatal(err)
	}
	if n != docs || n != perThread {
		t.Fatalf("the index has %d rows; it counts %d in all and %d by thread", n, docs, perThread)
	}
	sort.Strings(lines)
	return lines
}

// business renders the business tables.
func business(t tb, s *Store) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{`SELECT * FROM goals ORDER BY id`, `SELECT * FROM plans ORDER BY thread_id, step`,
		`SELECT * FROM subagent_edges ORDER BY parent, child`, `SELECT * FROM mailbox ORDER BY id`,
		`SELECT thread_id, offset, length, first_seq, last_seq, kind, reason, ack_lost FROM diagnostics ORDER BY id`} {
		rows, err := s.r.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		var lines []string
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, fmt.Sprint(vals...))
		}
		rows.Close()
		sort.Strings(lines)
		fmt.Fprintf(&b, "== %s\n%s\n", q, strings.Join(lines, "\n"))
	}
	return b.String()
}

// seedBusiness writes one of each kind of business row.
func seedBusiness(t tb, s *Store, a, b string) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.AddGoal(ctx, a, "ship it"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPlan(ctx, a, []PlanStep{{Text: "write", Status: "done"}, {Text: "test", Status: "pending"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.OpenEdge(ctx, a, b); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Send(ctx, b, a, "done"); err != nil {
		t.Fatal(err)
	}
}

func count(t tb, db *sql.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
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

// statuses lists every thread of s (ScopeAll): id to status.
func statuses(t tb, s *Store) map[string]string {
	t.Helper()
	p, err := s.List(context.Background(), ListOptions{Scope: ScopeAll})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, th := range p.Threads {
		out[th.ID] = th.Status
	}
	return out
}

// rolloutSize is a rollout's size on disk.
func rolloutSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// checkEqualsRebuild fails when the store's projection is not what a
// fresh rebuild gives.
func checkEqualsRebuild(t *testing.T, w *workspace, s *Store) {
	t.Helper()
	if err := s.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	fresh := w.open("")
	if got, want := dump(t, s), dump(t, fresh); got != want {
		t.Fatalf("projection differs from a rebuild (+ projected, - rebuilt):\n%s", dumpDiff(got, want))
	}
}
