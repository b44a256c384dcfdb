// Package pgtesting is pgtest for tests: clusters that end with the test
// that made them, and one cluster a test package shares, with a fresh
// database for each test. It is apart from pgtest so that the programs
// using pgtest (rolloutcrash, rolloutbench) do not link the testing
// package.
//
// A package sharing a cluster says so in its TestMain:
//
//	func TestMain(m *testing.M) { pgtesting.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		dsn := pgtesting.Database(t)
//		...
//	}
package pgtesting

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rolloutdb/rolloutdb/internal/pgtest"
)

// New starts a cluster for t, stopped and removed when t ends. A test
// that kills, restarts, pauses or replicates a server takes one of its
// own this way.
func New(t testing.TB, opts pgtest.Options) *pgtest.Cluster {
	t.Helper()
	c, err := pgtest.Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop the cluster: %v", err)
		}
	})
	return c
}

// Standby makes a standby of c for t, stopped and removed when t ends
// (name as pgtest's Standby).
func Standby(t testing.TB, c *pgtest.Cluster, name string) *pgtest.Cluster {
	t.Helper()
	s, err := c.Standby(context.Background(), name)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop the standby: %v", err)
		}
	})
	return s
}

// shared is the cluster a test binary shares: started by the first
// Shared, stopped by Main.
var shared struct {
	main atomic.Bool // Main is running the tests
	once sync.Once
	c    *pgtest.Cluster
	err  error
	dbs  atomic.Int64 // databases made, for unique names
}

// Main runs the package's tests (m.Run), stops the shared cluster if a
// test started it, and exits with the tests' code. Call it from
// TestMain.
func Main(m *testing.M) {
	shared.main.Store(true)
	code := m.Run()
	if shared.c != nil {
		if err := shared.c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtesting: stop the shared cluster:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// Shared returns the cluster the test binary shares (default options:
// fsync on), starting it on first use. A test must not stop, kill,
// restart or pause it; New gives one that it may.
func Shared(t testing.TB) *pgtest.Cluster {
	t.Helper()
	if !shared.main.Load() {
		t.Fatal("pgtesting.Shared needs the package's TestMain to call pgtesting.Main, which stops the cluster")
	}
	shared.once.Do(func() { shared.c, shared.err = pgtest.Start(context.Background(), pgtest.Options{}) })
	if shared.err != nil {
		t.Fatalf("%+v", shared.err)
	}
	return shared.c
}

// notIdent is what a database name made from a test's name leaves out.
var notIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// Database creates a new database in the shared cluster, named after the
// test, and returns its DSN.
func Database(t testing.TB) string {
	t.Helper()
	c := Shared(t)
	n := shared.dbs.Add(1)
	name := notIdent.ReplaceAllString(strings.ToLower(t.Name()), "_")
	suffix := fmt.Sprintf("_%d", n)
	if len(name) > 63-len(suffix) {
		name = name[:63-len(suffix)]
	}
	dsn, err := c.CreateDatabase(context.Background(), name+suffix)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	return dsn
}
