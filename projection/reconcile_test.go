package projection

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/journal"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// countingFS counts directory listings (and versions directories as the
// FS it wraps does).
type countingFS struct {
	vfs.FS
	listings atomic.Int64
}

func (c *countingFS) ReadDir(dir string) ([]string, error) {
	c.listings.Add(1)
	return c.FS.ReadDir(dir)
}

func (c *countingFS) DirVersion(dir string) (vfs.DirVersion, error) {
	v, _, err := vfs.VersionOf(c.FS, dir)
	return v, err
}

// settled makes every directory version of s count as settled, as it does
// RacyWindow after its last change.
func settled(s *Store) { s.now = func() time.Time { return time.Now().Add(time.Hour) } }

// On a quiet workspace List lists no directory, in this process or in a
// new one; whatever changed since (a rollout made, a row dropped or moved
// by hand, a rollout moved by hand) is seen by the next List.
func TestListDoesNotListAQuietWorkspace(t *testing.T) {
	w := newWorkspace(t)
	path := filepath.Join(t.TempDir(), "state.db")
	cfs := &countingFS{FS: vfs.OS}
	open := func() *Store {
		t.Helper()
		s, err := Open(context.Background(), Options{Path: path, Root: w.root, WorkspaceID: testWorkspace, FS: cfs})
		if err != nil {
			t.Fatal(err)
		}
		settled(s)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	s := open()
	w.store = s
	for _, id := range []string{"a", "b", "c"} {
		w.create(id, rollout.Source{})
		w.turn(id, "t", "hello "+id)
	}
	list := func(s *Store) (map[string]string, int64) {
		t.Helper()
		before := cfs.listings.Load()
		out := statuses(t, s)
		return out, cfs.listings.Load() - before
	}
	if got, _ := list(s); len(got) != 3 {
		t.Fatalf("listed %v", got)
	}
	if got, n := list(s); len(got) != 3 || n != 0 {
		t.Fatalf("second List on a quiet workspace: %v, %d directory listings; want 3 threads, none", got, n)
	}
	// A new process (another Store on the same state.db) takes state.db's
	// word for what matched.
	s2 := open()
	if got, n := list(s2); len(got) != 3 || n != 0 {
		t.Fatalf("List in a new process on a quiet workspace: %v, %d directory listings; want 3 threads, none", got, n)
	}
	// A rollout no row knows (a host that has not projected it yet).
	w.store = nil
	w.create("d", rollout.Source{})
	w.turn("d", "t", "hello d")
	w.store = s
	if got, n := list(s2); len(got) != 4 || n == 0 {
		t.Fatalf("a new rollout: %v after %d listings", got, n)
	}
	for _, s := range []*Store{s, s2} {
		list(s)
		if got, n := list(s); len(got) != 4 || n != 0 {
			t.Fatalf("quiet again: %v, %d listings", got, n)
		}
	}
	// Rows dropped and moved by hand: found through the change log, still
	// without a listing.
	other, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Exec(`DELETE FROM threads WHERE id = 'b'`); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(`UPDATE threads SET location = 'archived', rollout_path = 'threads/archived/c.rollout' WHERE id = 'c'`); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Store{s, s2} {
		got, n := list(s)
		if len(got) != 4 || got["b"] != LocationActive || got["c"] != LocationActive || n != 0 {
			t.Fatalf("rows changed by hand: %v after %d listings; want all four active, no listing", got, n)
		}
	}
	// A rollout moved by hand: its directories changed.
	w.move("a", LocationArchived)
	for _, s := range []*Store{s, s2} {
		if got, _ := list(s); got["a"] != LocationArchived {
			t.Fatalf("a rollout moved by hand is listed %v", got)
		}
	}
}

// A directory that changed moments ago is not trusted (its timestamps may
// not show a change made in the same tick): every List lists it until it
// settles, and sees what changed.
func TestListDoesNotTrustAnUnsettledDirectory(t *testing.T) {
	w := newWorkspace(t)
	cfs := &countingFS{FS: vfs.OS}
	s, err := Open(context.Background(), Options{Root: w.root, WorkspaceID: testWorkspace, FS: cfs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.now = func() time.Time { return time.Now().Add(-time.Hour) } // nothing settles
	w.store = s
	w.create("a", rollout.Source{})
	ctx := context.Background()
	for i := range 3 {
		before := cfs.listings.Load()
		if _, err := s.List(ctx, ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if cfs.listings.Load() == before {
			t.Fatalf("List %d trusted an unsettled directory", i)
		}
	}
}

// List keeps the rows it read, each good for as long as its rev is the
// row's: a row another store (another process) writes is read again, and
// what a caller does with a page never reaches the cache.
func TestListCacheSeesAnotherStoresWrites(t *testing.T) {
	w := newWorkspace(t)
	path := filepath.Join(t.TempDir(), "state.db")
	a, b := w.open(path), w.open(path)
	w.store = b // b projects what is appended; a only lists
	for _, id := range []string{"x", "y"} {
		w.create(id, rollout.Source{})
		w.turn(id, "t1", "hello "+id)
	}
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	get := func() map[string]ThreadInfo {
		t.Helper()
		p, err := a.List(ctx, ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]ThreadInfo{}
		for _, th := range p.Threads {
			out[th.ID] = th
		}
		return out
	}
	first := get()
	if len(first) != 2 || first["x"].Turns != 1 {
		t.Fatalf("first list: %+v", first)
	}
	name := "renamed by b"
	w.append("x", rec(t, rollout.KindMetadataUpdated, "", rollout.MetadataUpdated{Name: &name, Labels: []string{"l1"}}))
	w.turn("x", "t2", "again")
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := get()
	if x := got["x"]; x.Name != name || x.Turns != 2 || len(x.Labels) != 1 || x.Labels[0] != "l1" {
		t.Fatalf("after b's writes a lists x as %+v", x)
	}
	got["x"].Labels[0] = "changed by the caller"
	if x := get()["x"]; x.Labels[0] != "l1" || got["y"].Turns != 1 {
		t.Fatalf("a caller's change reached the cache: %+v", x)
	}
}

// removeFailsFS fails every Remove: a disk that refuses to let the stale
// mark go.
type removeFailsFS struct{ vfs.FS }

func (removeFailsFS) Remove(string) error { return errors.New("injected: remove refused") }

// An Open that cannot take the stale mark fails, stops what it started
// (the indexer runs on the connections it closes) and keeps the mark, so
// the next Open still sweeps. And a search.db deleted by hand is made
// anew: the first Search waits for it and finds everything.

func TestOpenThatCannotTakeTheStaleMarkFailsCleanly(t *testing.T) {
	w := newWorkspace(t)
	path := filepath.Join(t.TempDir(), "state.db")
	w.store = w.open(path)
	for i := range 20 {
		id := fmt.Sprintf("t%02d", i)
		w.create(id, rollout.Source{})
		w.turn(id, "a", "hello "+id)
	}
	if err := w.store.Close(); err != nil {
		t.Fatal(err)
	}
	w.store = nil
	// search.db left unclean: the indexer has work the moment it starts.
	if err := os.Remove(filepath.Join(filepath.Dir(path), "search.db")); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(w.root, journal.Dir, journal.StaleMark)
	if err := os.MkdirAll(filepath.Dir(mark), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mark, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		_, err := Open(context.Background(), Options{Path: path, Root: w.root, WorkspaceID: testWorkspace, FS: removeFailsFS{vfs.OS}})
		if err == nil || !strings.Contains(err.Error(), "injected") {
			t.Fatalf("Open with the mark's removal refused: %v", err)
		}
	}
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("the stale mark went with a failed open: %v", err)
	}
	s := w.open(path)
	if hits, err := s.Search(context.Background(), "t07", SearchOptions{}); err != nil || len(hits) != 3 {
		t.Fatalf("search after the failed opens: %+v %v", hits, err)
	}
}

// The state a race leaves: operations handed to the indexer were all
// skipped (their thread was being caught up at that moment), so nothing
// is queued, yet what was handed over counts as not applied. A flush
// (a Search) must still return.
func TestIndexFlushReturnsWhenHandedOperationsWereSkipped(t *testing.T) {
	w := newWorkspace(t)
	s := w.open(filepath.Join(t.TempDir(), "state.db"))
	x := s.idx
	if err := x.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	x.mu.Lock()
	x.enqueued++ // as enqueue does for ops it skips
	x.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := x.flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// Reads keep working, concurrently, once the reader's statement cache is
// full (a query then runs unprepared), and no cached statement is closed
// under a reader that holds it.
func TestReadsWithAFullStatementCache(t *testing.T) {
	w := newWorkspace(t)
	s := w.open(filepath.Join(t.TempDir(), "state.db"))
	w.store = s
	for _, id := range []string{"a", "b", "c"} {
		w.create(id, rollout.Source{})
		w.turn(id, "t1", "hello "+id)
	}
	ctx := context.Background()
	for i := 0; len(s.rstmts) < maxReadStmts; i++ {
		if _, err := s.rstmt(ctx, fmt.Sprintf("SELECT %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			for i := range 20 {
				o := ListOptions{Limit: 1 + (g+i)%3, Sort: Sort(i % 2)}
				if g%2 == 0 {
					o.Scope = ScopeAll
				}
				if _, err := s.List(ctx, o); err != nil {
					errs <- err
					return
				}
				if _, err := s.Turns(ctx, "b", 1, 1); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if len(s.rstmts) > maxReadStmts {
		t.Fatalf("%d statements cached, bound %d", len(s.rstmts), maxReadStmts)
	}
}

// frozenFS gives each directory the version it had when frozen: as if
// every later change fell in the same timestamp tick (the racy case).
type frozenFS struct {
	vfs.FS
	mu   sync.Mutex
	vers map[string]vfs.DirVersion
}

func (f *frozenFS) DirVersion(dir string) (vfs.DirVersion, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, ok := f.vers[dir]; ok {
		return v, nil
	}
	v, _, err := vfs.VersionOf(f.FS, dir)
	if err == nil && f.vers != nil {
		f.vers[dir] = v
	}
	return v, err
}

func (f *frozenFS) freeze() {
	f.mu.Lock()
	f.vers = map[string]vfs.DirVersion{}
	f.mu.Unlock()
}

// A listing made while the directories' version was not settled is not
// trusted once it settles: a rollout made after it, in the same timestamp
// tick, left the version as it was, and is listed all the same.
func TestAListingMadeBeforeTheVersionSettledIsNotTrusted(t *testing.T) {
	w := newWorkspace(t)
	fsys := &frozenFS{FS: vfs.OS}
	s, err := Open(context.Background(), Options{Path: filepath.Join(t.TempDir(), "state.db"), Root: w.root, WorkspaceID: testWorkspace, FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w.create("a", rollout.Source{}) // by another process: no row
	w.turn("a", "t", "hello a")
	fsys.freeze()
	s.now = func() time.Time { return time.Now().Add(-time.Hour) } // not settled
	if got := statuses(t, s); len(got) != 1 {
		t.Fatalf("listed %v, want a", got)
	}
	w.create("b", rollout.Source{}) // the same tick: the same version
	w.turn("b", "t", "hello b")
	settled(s)
	if got := statuses(t, s); len(got) != 2 {
		t.Fatalf("once settled: listed %v, want a and b (the listing before the version settled was trusted)", got)
	}
}
