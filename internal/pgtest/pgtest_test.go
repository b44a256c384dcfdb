package pgtest_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/internal/netproxy"
	"github.com/rolloutdb/rolloutdb/internal/pgtest"
	"github.com/rolloutdb/rolloutdb/internal/pgtest/pgtesting"
)

func TestMain(m *testing.M) { pgtesting.Main(m) }

// connect opens a connection for the rest of the test.
func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// rows returns the values of table kv, in key order.
func rows(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	r, err := conn.Query(context.Background(), "SELECT v FROM kv ORDER BY k")
	if err != nil {
		t.Fatal(err)
	}
	vs, err := pgx.CollectRows(r, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func TestDatabasesAreSeparate(t *testing.T) {
	t.Parallel()
	a, b := connect(t, pgtesting.Database(t)), connect(t, pgtesting.Database(t))
	exec(t, a, "CREATE TABLE kv (k int PRIMARY KEY, v text)")
	exec(t, a, "INSERT INTO kv VALUES (1, $1)", "in a")
	if got := rows(t, a); len(got) != 1 || got[0] != "in a" {
		t.Fatalf("a holds %q", got)
	}
	if _, err := b.Exec(context.Background(), "SELECT * FROM kv"); err == nil {
		t.Fatal("database b has a's table")
	}
	if int(a.Config().Port) != pgtesting.Shared(t).Port() || a.Config().Host != "127.0.0.1" {
		t.Fatalf("connected to %s:%d, not the shared cluster", a.Config().Host, a.Config().Port)
	}
	var fsync string
	if err := a.QueryRow(context.Background(), "SHOW fsync").Scan(&fsync); err != nil || fsync != "on" {
		t.Fatalf("fsync = %q, %v; the default is on", fsync, err)
	}
}

func TestKillKeepsWhatWasCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := pgtesting.New(t, pgtest.Options{})
	dsn, err := c.CreateDatabase(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	exec(t, conn, "CREATE TABLE kv (k int PRIMARY KEY, v text)")
	exec(t, conn, "INSERT INTO kv VALUES (1, 'committed')")
	port := c.Port()

	c.Kill()
	if c.Running() {
		t.Fatal("running after Kill")
	}
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("a session survived Kill")
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("%+v", err)
	}
	if c.Port() != port {
		t.Fatalf("restarted on port %d, not %d", c.Port(), port)
	}
	if got := rows(t, connect(t, dsn)); len(got) != 1 || got[0] != "committed" {
		t.Fatalf("after Kill and Restart: %q", got)
	}
	log, err := c.ReadLog()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log, "not properly shut down") {
		t.Fatalf("the restart after Kill ran no crash recovery; log:\n%s", log)
	}
}

func TestStandbyStreamsSyncsAndPromotes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary := pgtesting.New(t, pgtest.Options{})
	p := connect(t, primary.DSN("postgres"))
	exec(t, p, "CREATE TABLE kv (k int PRIMARY KEY, v text)")
	exec(t, p, "INSERT INTO kv VALUES (1, 'before the backup')")

	standby := pgtesting.Standby(t, primary, "replica_a")
	if standby.Name() != "replica_a" || standby.Port() == primary.Port() {
		t.Fatalf("standby %q on port %d (primary's %d)", standby.Name(), standby.Port(), primary.Port())
	}
	if err := primary.WaitStreaming(ctx, standby); err != nil {
		t.Fatalf("%+v", err)
	}
	exec(t, p, "INSERT INTO kv VALUES (2, 'streamed')")
	if err := primary.WaitReplayed(ctx, standby); err != nil {
		t.Fatalf("%+v", err)
	}
	s := connect(t, standby.DSN("postgres"))
	if got := rows(t, s); len(got) != 2 || got[1] != "streamed" {
		t.Fatalf("the standby has %q", got)
	}
	if _, err := s.Exec(ctx, "INSERT INTO kv VALUES (3, 'on a standby')"); err == nil {
		t.Fatal("a standby took a write")
	}

	// Synchronous: a commit waits for the standby, so it does not return
	// while the standby is paused.
	if err := primary.SetSynchronousStandbyNames(ctx, standby.Name()); err != nil {
		t.Fatalf("%+v", err)
	}
	if err := primary.WaitSynchronous(ctx, standby); err != nil {
		t.Fatalf("%+v", err)
	}
	if err := standby.Pause(); err != nil {
		t.Fatal(err)
	}
	waiting := connect(t, primary.DSN("postgres"))
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := waiting.Exec(short, "INSERT INTO kv VALUES (3, 'waits for the standby')")
	cancel()
	if err == nil {
		t.Fatal("a synchronous commit returned while its standby was paused")
	}
	standby.Resume()
	if err := primary.SetSynchronousStandbyNames(ctx, ""); err != nil {
		t.Fatalf("%+v", err)
	}

	if err := standby.Promote(ctx); err != nil {
		t.Fatalf("%+v", err)
	}
	promoted := connect(t, standby.DSN("postgres"))
	exec(t, promoted, "INSERT INTO kv VALUES (4, 'promoted')")
	if got := rows(t, promoted); len(got) != 4 || got[3] != "promoted" {
		t.Fatalf("the promoted standby has %q", got)
	}
	// It is a primary of its own: the old one's Stop leaves it running.
	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	if !standby.Running() {
		t.Fatal("the old primary's Stop stopped the promoted standby")
	}
	exec(t, promoted, "INSERT INTO kv VALUES (5, 'after the old primary stopped')")
}

func TestPartitionFailsAQueryAndHealLetsANewConnectionWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(pgtesting.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netproxy.Start(pgtesting.Shared(t).Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	dsn := pgtest.DSN(proxy.Addr(), cfg.Database)

	for _, mode := range []netproxy.Mode{netproxy.Blackhole, netproxy.Refuse} {
		t.Run(mode.String(), func(t *testing.T) {
			conn := connect(t, dsn)
			if err := conn.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			proxy.Partition(mode)
			const deadline = 500 * time.Millisecond
			start := time.Now()
			qctx, cancel := context.WithTimeout(ctx, deadline)
			var one int
			err := conn.QueryRow(qctx, "SELECT 1").Scan(&one)
			cancel()
			if err == nil {
				t.Fatal("a query went through a partition")
			}
			if took := time.Since(start); took > deadline+2*time.Second {
				t.Fatalf("the query failed after %v, past its deadline of %v", took, deadline)
			}
			if mode == netproxy.Blackhole && !errors.Is(err, context.DeadlineExceeded) && !pgconnTimeout(err) {
				t.Fatalf("in a blackhole the query failed with %v, not its deadline", err)
			}
			proxy.Heal()
			if err := connect(t, dsn).Ping(ctx); err != nil {
				t.Fatalf("a new connection after Heal: %v", err)
			}
		})
	}
}

// pgconnTimeout reports whether pgx says a query timed out.
func pgconnTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

func TestStartFailureShowsTheLog(t *testing.T) {
	t.Parallel()
	_, err := pgtest.Start(context.Background(), pgtest.Options{NoFsync: true, Settings: map[string]string{"shared_buffers": "lots"}})
	if err == nil {
		t.Fatal("started with a bad setting")
	}
	if !strings.Contains(err.Error(), `invalid value for parameter "shared_buffers"`) {
		t.Fatalf("the error does not show the log: %v", err)
	}
}

func TestStartWithoutPostgresSaysWhatToInstall(t *testing.T) {
	t.Parallel()
	_, err := pgtest.Start(context.Background(), pgtest.Options{BinDir: t.TempDir()})
	if !errors.Is(err, pgtest.ErrNoPostgres) {
		t.Fatalf("Start with no programs: %v; want ErrNoPostgres", err)
	}
}

// TestCPUs checks that a pinned server's backends, forked after it
// started, run on its CPUs only, and that the process that started it is
// not pinned with it.
func TestCPUs(t *testing.T) {
	t.Parallel()
	c := pgtesting.New(t, pgtest.Options{NoFsync: true, CPUs: []int{0}})
	conn := connect(t, c.DSN("postgres"))
	var pid int
	if err := conn.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if got := allowedCPUs(t, strconv.Itoa(pid)); got != "0" {
		t.Errorf("backend %d runs on CPUs %q, want 0", pid, got)
	}
	all := allowedCPUs(t, "self")
	if runtime.NumCPU() > 1 && all == "0" {
		t.Errorf("this process was left on CPU 0 (%q)", all)
	}
}

// allowedCPUs reads Cpus_allowed_list of /proc/PID/status.
func allowedCPUs(t *testing.T, pid string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Cpus_allowed_list in /proc/%s/status", pid)
	return ""
}
