package projection

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// populated makes a workspace with three threads and a state.db holding
// their projections and some business state, closed.
func populated(t *testing.T) (*workspace, string) {
	t.Helper()
	w := newWorkspace(t)
	path := filepath.Join(t.TempDir(), "state.db")
	s := w.open(path)
	w.store = s
	for i := range 3 {
		id := fmt.Sprintf("t%d", i)
		w.create(id, rollout.Source{})
		w.turn(id, "a", "hello "+id)
	}
	seedBusiness(t, s, "t0", "t1")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	w.store = nil
	return w, path
}

func openLogged(t *testing.T, w *workspace, path string) (*Store, *bytes.Buffer) {
	t.Helper()
	var log bytes.Buffer
	s, err := Open(context.Background(), Options{Path: path, Root: w.root, WorkspaceID: testWorkspace, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, &log
}

func TestCorruptStateDBIsKeptAsideAndRebuilt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"not a database", func(t *testing.T, path string) {
			if err := os.WriteFile(path, bytes.Repeat([]byte("garbage!"), 1024), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"damaged pages", func(t *testing.T, path string) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// Keep the file header (first 100 bytes), ruin every page
			// after the first: the b-trees no longer check.
			for i := 4096; i < len(b); i++ {
				b[i] = byte(i*7 + 3)
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, path := populated(t)
			tc.damage(t, path)
			original, _ := os.ReadFile(path)
			s, log := openLogged(t, w, path)
			rep := s.Report()
			if !rep.Corrupt || !rep.BusinessStateLost || !rep.Created || rep.KeptAs == "" || rep.Reason == "" {
				t.Fatalf("report: %+v", rep)
			}
			if kept, err := os.ReadFile(rep.KeptAs); err != nil || !bytes.Equal(kept, original) {
				t.Fatalf("the corrupt file was not kept as it was: %v", err)
			}
			if !strings.Contains(log.String(), "BUSINESS STATE LOST") || !strings.Contains(log.String(), "level=ERROR") {
				t.Fatalf("not logged loudly: %s", log)
			}
			p, err := s.List(context.Background(), ListOptions{})
			if err != nil || len(p.Threads) != 3 || p.Threads[0].Turns != 1 {
				t.Fatalf("projections not back: %+v %v", p, err)
			}
			if g, _ := s.Goals(context.Background(), "t0"); len(g) != 0 {
				t.Fatalf("goals from nowhere: %+v", g)
			}
			// The next open is clean.
			_ = s.Close()
			s2, _ := openLogged(t, w, path)
			if rep := s2.Report(); rep.Corrupt || rep.Created || rep.BusinessStateLost {
				t.Fatalf("second open: %+v", rep)
			}
		})
	}
}

func TestMissingStateDBIsRebuiltAndLossReported(t *testing.T) {
	w, path := populated(t)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		_ = os.Remove(path + suffix)
	}
	s, log := openLogged(t, w, path)
	rep := s.Report()
	if !rep.Created || rep.Corrupt || !rep.BusinessStateLost || rep.Rebuild == nil || rep.Rebuild.Threads != 3 {
		t.Fatalf("report: %+v", rep)
	}
	if !strings.Contains(log.String(), "state.db was missing") {
		t.Fatalf("log: %s", log)
	}
	// A new workspace has nothing to lose and says nothing.
	empty := newWorkspace(t)
	s2, log2 := openLogged(t, empty, filepath.Join(t.TempDir(), "state.db"))
	if rep := s2.Report(); !rep.Created || rep.BusinessStateLost || log2.Len() != 0 {
		t.Fatalf("fresh workspace: %+v %s", rep, log2)
	}
}

func TestBusinessStateSurvivesRebuild(t *testing.T) {
	ctx := context.Background()
	w, path := populated(t)
	s, _ := openLogged(t, w, path)
	before := business(t, s)
	if !strings.Contains(before, "ship it") {
		t.Fatalf("seeded business state missing: %s", before)
	}
	proj := dump(t, s)
	if _, err := s.Rebuild(ctx, RebuildOptions{Restart: true}); err != nil {
		t.Fatal(err)
	}
	if got := business(t, s); got != before {
		t.Fatalf("rebuild changed business state:\n%s\nwant\n%s", got, before)
	}
	if got := dump(t, s); got != proj {
		t.Fatalf("rebuild changed projections:\n%s\nwant\n%s", got, proj)
	}
	// Edges, goals and messages work as a host uses them.
	if err := s.CloseEdge(ctx, "t0", "t1"); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseEdge(ctx, "t0", "t2"); !errors.Is(err, ErrNoSuchRow) {
		t.Fatalf("closing an edge that is not there: %v", err)
	}
	edges, _ := s.Edges(ctx, EdgeFilter{Parent: "t0"})
	if len(edges) != 1 || edges[0].Status != EdgeClosed || edges[0].ClosedAt == nil {
		t.Fatalf("edges: %+v", edges)
	}
	inbox, _ := s.Inbox(ctx, "t0", true)
	if len(inbox) != 1 || inbox[0].Body != "done" {
		t.Fatalf("inbox: %+v", inbox)
	}
	if err := s.MarkRead(ctx, inbox[0].ID); err != nil {
		t.Fatal(err)
	}
	if inbox, _ := s.Inbox(ctx, "t0", true); len(inbox) != 0 {
		t.Fatalf("read message still unread: %+v", inbox)
	}
	goals, _ := s.Goals(ctx, "t0")
	if err := s.SetGoalStatus(ctx, goals[0].ID, GoalDone); err != nil {
		t.Fatal(err)
	}
	if plan, _ := s.Plan(ctx, "t0"); len(plan) != 2 || plan[1].Text != "test" {
		t.Fatalf("plan: %+v", plan)
	}
	if err := s.DeleteBusinessState(ctx, []string{"t0"}); err != nil {
		t.Fatal(err)
	}
	if got := business(t, s); strings.Contains(got, "t0") {
		t.Fatalf("t0's business rows survived its deletion:\n%s", got)
	}
}

func TestRebuildResumesFromWatermark(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	const threads = 30
	defer func(n int64) { rebuildChunk = n }(rebuildChunk)
	rebuildChunk = 500
	for i := range threads {
		id := fmt.Sprintf("t%02d", i)
		w.create(id, rollout.Source{})
		for j := range 20 { // 181 records a thread: a chunk is 3 threads
			w.turn(id, fmt.Sprintf("u%d", j), "words")
		}
	}
	s := w.open(filepath.Join(t.TempDir(), "state.db"))
	want := dump(t, s)
	cctx, cancel := context.WithCancel(ctx)
	calls := 0
	_, err := s.Rebuild(cctx, RebuildOptions{Restart: true, Progress: func(p RebuildProgress) {
		calls++
		if p.Threads >= threads {
			t.Errorf("first chunk did everything: %+v", p)
		}
		cancel() // interrupted after the first committed chunk
	}})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("interrupted rebuild: %v after %d chunks", err, calls)
	}
	done := count(t, s.r, `SELECT count(*) FROM threads`)
	if done == 0 || done >= threads {
		t.Fatalf("%d threads after the first chunk", done)
	}
	rep, err := s.Rebuild(ctx, RebuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Resumed || rep.Threads != threads-done {
		t.Fatalf("resumed rebuild: %+v (done before: %d)", rep, done)
	}
	if got := dump(t, s); got != want {
		t.Fatal("resumed rebuild differs from a full one")
	}
	if n := count(t, s.r, `SELECT count(*) FROM meta WHERE key = ?`, watermarkKey); n != 0 {
		t.Fatal("watermark left behind")
	}
}

func TestProjectorFallsBackToRolloutWhenQueueOverflows(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s, err := Open(ctx, Options{Root: w.root, WorkspaceID: testWorkspace, QueueLimit: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w.store = s
	w.create("t1", rollout.Source{})
	for i := range 20 {
		w.turn("t1", fmt.Sprintf("a%d", i), "x")
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Read straight from the table: no read-repair helps here.
	if n := count(t, s.r, `SELECT turn_count FROM threads WHERE id = 't1'`); n != 20 {
		t.Fatalf("projector applied %d turns of 20", n)
	}
	if got, want := dump(t, s), dump(t, w.open("")); got != want {
		t.Fatalf("projector result differs from a rebuild:\n%s\nwant\n%s", got, want)
	}
}

// A rebuild while a host appends (through the projector, as the facade
// does) ends with the same projection as a rebuild of the final files.
// The appends happen between the rebuild's chunks, to threads already
// rebuilt and to threads not reached yet.
func TestRebuildWhileWriting(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	defer func(n int64) { rebuildChunk = n }(rebuildChunk)
	rebuildChunk = 1 // a chunk per thread
	s := w.open(filepath.Join(t.TempDir(), "state.db"))
	w.store = s
	for i := range 8 {
		id := fmt.Sprintf("t%d", i)
		w.create(id, rollout.Source{})
		for j := range 10 {
			w.turn(id, fmt.Sprintf("u%d", j), "before")
		}
	}
	if err := s.Flush(ctx); err != nil { // the projector idle when the rebuild starts
		t.Fatal(err)
	}
	chunks := 0
	_, err := s.Rebuild(ctx, RebuildOptions{Restart: true, Progress: func(RebuildProgress) {
		chunks++
		for i := range 8 {
			w.turn(fmt.Sprintf("t%d", i), fmt.Sprintf("during%d", chunks), "during")
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The projector gets to a thread cleared by the rebuild before the
	// rebuild does (it projects it whole): the rebuild then has nothing
	// left to do for it, so there are fewer chunks than threads.
	if chunks < 2 {
		t.Fatalf("rebuild in %d chunks: the test needs appends between chunks", chunks)
	}
	w.turn("t0", "last", "after")
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := dump(t, s), dump(t, w.open("")); got != want {
		t.Fatalf("projection after a rebuild under writes differs (+ projected, - rebuilt):\n%s", dumpDiff(got, want))
	}
}

// A -wal left without its database is not replayed into a new state.db.
func TestOrphanWALIsKeptAside(t *testing.T) {
	w, path := populated(t)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+"-wal", bytes.Repeat([]byte{0x37, 0x7f, 0x06, 0x82}, 2048), 0o644); err != nil {
		t.Fatal(err)
	}
	s, log := openLogged(t, w, path)
	if !s.Report().Created || !strings.Contains(log.String(), "kept aside") {
		t.Fatalf("report %+v, log %s", s.Report(), log)
	}
	if p, err := s.List(context.Background(), ListOptions{}); err != nil || len(p.Threads) != 3 {
		t.Fatalf("list: %+v %v", p, err)
	}
	kept, _ := filepath.Glob(path + "-wal.orphan-*")
	if len(kept) != 1 {
		t.Fatalf("orphan not kept: %v", kept)
	}
}

// Projections commit without an fsync (they are rebuilt from the rollouts,
// and read-repair catches up what a power cut loses); business state and
// the cleanup queue commit with synchronous=FULL, which makes the
// write-ahead log durable up to them. The pragma is what SQLite promises
// by: check it inside each kind of transaction.
func TestBusinessStateCommitsDurablyProjectionsDoNot(t *testing.T) {
	w := newWorkspace(t)
	s, _ := openLogged(t, w, filepath.Join(t.TempDir(), "state.db"))
	mode := func(write func(context.Context, func(*sql.Tx) error) error) int {
		var m int
		if err := write(context.Background(), func(tx *sql.Tx) error {
			return tx.QueryRow("PRAGMA synchronous").Scan(&m)
		}); err != nil {
			t.Fatal(err)
		}
		return m
	}
	const normal, full = 1, 2
	if m := mode(s.write); m != normal {
		t.Fatalf("projection transaction: synchronous=%d, want NORMAL", m)
	}
	if m := mode(s.writeDurable); m != full {
		t.Fatalf("business transaction: synchronous=%d, want FULL", m)
	}
	if m := mode(s.write); m != normal {
		t.Fatalf("after a business transaction: synchronous=%d, want NORMAL again", m)
	}
	// Every business and cleanup write goes through writeDurable.
	for _, file := range []string{"business.go", "cleanup.go"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "s.write(ctx") {
			t.Fatalf("%s commits business state without writeDurable", file)
		}
	}
}

// Open does not read the whole file: a state.db whose data pages are
// damaged (its schema intact) opens at once. The damage is found where it
// shows (here by CheckIntegrity, as rolloutctl verify --state runs it):
// from then on the store refuses with ErrCorrupt, and the next Open keeps
// the file aside and rebuilds, reporting the business state lost.
func TestCorruptionFoundInUseIsKeptAsideAtTheNextOpen(t *testing.T) {
	for _, find := range []struct {
		name string
		fn   func(s *Store) error
	}{
		{"by a statement", func(s *Store) error {
			_, err := s.Rebuild(context.Background(), RebuildOptions{Restart: true})
			return err
		}},
		{"by CheckIntegrity", func(s *Store) error {
			rep, err := s.CheckIntegrity(context.Background())
			if rep.OK() {
				return fmt.Errorf("integrity report says ok: %+v (%v)", rep, err)
			}
			return err
		}},
	} {
		t.Run(find.name, func(t *testing.T) { corruptionFoundInUse(t, find.fn) })
	}
}

func corruptionFoundInUse(t *testing.T, find func(*Store) error) {
	w := newWorkspace(t)
	path := filepath.Join(t.TempDir(), "state.db")
	s := w.open(path)
	w.store = s
	for i := range 40 {
		id := fmt.Sprintf("t%02d", i)
		w.create(id, rollout.Source{})
		for j := range 5 {
			w.turn(id, fmt.Sprintf("a%d", j), strings.Repeat("hello "+id+" ", 20))
		}
	}
	seedBusiness(t, s, "t00", "t01")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	w.store = nil
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 40*4096 {
		t.Fatalf("state.db of %d bytes: too small to damage only its data", len(b))
	}
	for i := len(b) / 2; i < len(b); i++ { // the second half: table data, not the schema
		b[i] = byte(i*7 + 3)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s, log := openLogged(t, w, path)
	if rep := s.Report(); rep.Corrupt || rep.Created {
		t.Fatalf("Open read the whole file: %+v", rep)
	}
	ctx := context.Background()
	if err := find(s); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("finding the damage: %v, want ErrCorrupt", err)
	}
	if _, err := s.List(ctx, ListOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("List after the damage was found: %v, want ErrCorrupt", err)
	}
	if !strings.Contains(log.String(), "state.db is corrupt") {
		t.Fatalf("not logged: %s", log)
	}
	_ = s.Close()
	s2, _ := openLogged(t, w, path)
	rep2 := s2.Report()
	if !rep2.Corrupt || !rep2.BusinessStateLost || rep2.KeptAs == "" || !strings.Contains(rep2.Reason, "found corrupt in use") {
		t.Fatalf("the next open: %+v", rep2)
	}
	if _, err := os.Stat(rep2.KeptAs + corruptMarkSuffix); err != nil {
		t.Fatalf("the mark did not go with the kept file: %v", err)
	}
	p, err := s2.List(ctx, ListOptions{Limit: 100})
	if err != nil || len(p.Threads) != 40 {
		t.Fatalf("projections not back: %d %v", len(p.Threads), err)
	}
	if rep, err := s2.CheckIntegrity(ctx); err != nil || !rep.OK() {
		t.Fatalf("the rebuilt state.db: %+v %v", rep, err)
	}
	_ = s2.Close()
	s3, _ := openLogged(t, w, path)
	if rep := s3.Report(); rep.Corrupt || rep.Created {
		t.Fatalf("third open: %+v", rep)
	}
}

// Reads after Close return an error, as writes do ("store closed").
// From a review: the read path dereferenced a nil *sql.DB and panicked.
func TestReadsAfterCloseDoNotPanic(t *testing.T) {
	ctx := context.Background()
	w := newWorkspace(t)
	s := w.open("")
	w.create("t1", rollout.Source{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for name, read := range map[string]func() error{
		"Thread": func() error { _, err := s.Thread(ctx, "t1"); return err },
		"List":   func() error { _, err := s.List(ctx, ListOptions{}); return err },
		"Goals":  func() error { _, err := s.Goals(ctx, "t1"); return err },
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s after Close panics: %v", name, p)
				}
			}()
			_ = read()
		}()
	}
}
