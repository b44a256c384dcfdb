package pgtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
)

// Options configure a cluster. The zero value is ready to use.
type Options struct {
	// NoFsync turns fsync off: faster, and what a test that never crashes
	// the server can afford. Default: false, fsync on, as durability and
	// latency tests need.
	NoFsync bool
	// MaxConnections is max_connections. Default: PostgreSQL's (100).
	MaxConnections int
	// Settings are more postgresql.conf settings, name to value, written
	// after (and so over) those above; synchronous_commit is on unless
	// set here. listen_addresses, port and unix_socket_directories are
	// the cluster's own and are not taken from here.
	Settings map[string]string
	// BinDir is the directory of initdb and postgres. Default:
	// /usr/lib/postgresql/15/bin, or the highest version's directory
	// there when 15 is not installed.
	BinDir string
	// CPUs pins the server to these CPUs (as `taskset -c` would): the
	// postmaster is started bound to them, and every process it forks,
	// each backend included, inherits the binding. Default: none, the
	// server runs wherever the kernel puts it.
	CPUs []int
}

// startTimeout bounds a start, restart or wait whose context has no
// deadline.
const startTimeout = time.Minute

// Superuser is the name of every cluster's superuser.
const Superuser = "postgres"

// Cluster is a running (or killed) PostgreSQL server in a temporary
// directory of its own. Its methods are safe for concurrent use; those
// that change the server's state (Stop, Kill, Restart, Pause, Resume)
// run one at a time.
type Cluster struct {
	bin  binaries
	user *runAs // whom the programs run as; nil: this process's user
	dir  string
	port int // fixed once Start or Standby returns
	opts Options
	name string // the application_name a standby streams as; "" for a cluster made by Start

	mu       sync.Mutex
	pm       *postmaster // the running server; nil when stopped or killed
	paused   bool
	removed  bool
	standbys []*Cluster // made by Standby, stopped by Stop
	primary  *Cluster   // the cluster a standby was made from, until it is promoted
}

// Start makes a new cluster and starts it: initdb in a new temporary
// directory, then the server on a free loopback port. It returns once the
// server accepts connections; a server that fails to start has the end of
// its log in the error.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	c, err := newCluster(opts)
	if err != nil {
		return nil, err
	}
	if err := c.initdb(ctx); err != nil {
		return nil, errors.CombineErrors(err, c.Stop())
	}
	if err := c.startOnFreePort(ctx); err != nil {
		return nil, errors.CombineErrors(err, c.Stop())
	}
	return c, nil
}

// newCluster finds the programs and makes the cluster's directory, owned
// by the server's user, with this process's pid in it (see sweep).
func newCluster(opts Options) (*Cluster, error) {
	bin, err := findBinaries(opts.BinDir)
	if err != nil {
		return nil, err
	}
	user, err := serverUser()
	if err != nil {
		return nil, err
	}
	sweep()
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, errors.Wrap(err, "pgtest: make the cluster's directory")
	}
	c := &Cluster{bin: bin, user: user, dir: dir, opts: opts}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, errors.CombineErrors(errors.Wrap(err, "pgtest: write the owner file"), os.RemoveAll(dir))
	}
	if err := user.own(dir); err != nil {
		return nil, errors.CombineErrors(err, os.RemoveAll(dir))
	}
	return c, nil
}

// initdb makes the data directory and writes the configuration.
func (c *Cluster) initdb(ctx context.Context) error {
	// --no-sync: a crash of the machine during a test loses the test
	// anyway; fsync of the running server is Options.NoFsync's.
	if err := c.runTool(ctx, "initdb", "-D", c.DataDir(), "-U", Superuser, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return err
	}
	conf, err := c.config()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(c.DataDir(), "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return errors.Wrap(err, "pgtest: open postgresql.conf")
	}
	_, err = f.WriteString(conf)
	if err := errors.CombineErrors(err, f.Close()); err != nil {
		return errors.Wrap(err, "pgtest: write postgresql.conf")
	}
	// Every connection from this machine, replication ones included (for
	// pg_basebackup and a standby's walreceiver), is trusted.
	const hba = "local all all trust\nhost all all 127.0.0.1/32 trust\n" +
		"local replication all trust\nhost replication all 127.0.0.1/32 trust\n"
	return errors.Wrap(os.WriteFile(filepath.Join(c.DataDir(), "pg_hba.conf"), []byte(hba), 0o600), "pgtest: write pg_hba.conf")
}

// settingName is what a postgresql.conf setting's name may be.
var settingName = regexp.MustCompile(`^[a-z_][a-z0-9_.]*$`)

// config is what Start appends to postgresql.conf: later lines win over
// initdb's.
func (c *Cluster) config() (string, error) {
	set := map[string]string{
		"fsync":              "on",
		"synchronous_commit": "on",
		// A standby needs them (they are PostgreSQL 15's defaults).
		"wal_level":             "replica",
		"max_wal_senders":       "10",
		"max_replication_slots": "10",
		"hot_standby":           "on",
		// The log is the postmaster's stderr, in postgres.log.
		"logging_collector": "off",
	}
	if c.opts.NoFsync {
		set["fsync"] = "off"
	}
	if c.opts.MaxConnections > 0 {
		set["max_connections"] = strconv.Itoa(c.opts.MaxConnections)
	}
	for k, v := range c.opts.Settings {
		if !settingName.MatchString(k) {
			return "", errors.Newf("pgtest: %q is not a setting name", k)
		}
		set[k] = v
	}
	names := make([]string, 0, len(set))
	for k := range set {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("\n# Written by pgtest (internal/pgtest).\n")
	for _, k := range names {
		fmt.Fprintf(&b, "%s = %s\n", k, quoteLiteral(set[k]))
	}
	return b.String(), nil
}

// quoteLiteral quotes s as a string literal, for postgresql.conf and for
// SQL (standard_conforming_strings, PostgreSQL's default).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// errPortInUse marks a start that failed because another process took
// the port between freePort and the server's bind.
var errPortInUse = errors.New("pgtest: port in use")

// startOnFreePort starts the server on a free port, trying another port
// when one is taken before the server binds it.
func (c *Cluster) startOnFreePort(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		c.port = port
		c.mu.Lock()
		err = c.start(ctx)
		c.mu.Unlock()
		if err == nil || !errors.Is(err, errPortInUse) || attempt == 5 {
			return err
		}
	}
}

// freePort returns a loopback TCP port that nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, errors.Wrap(err, "pgtest: find a free port")
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// start starts the server and waits until it accepts connections. The
// caller holds c.mu.
func (c *Cluster) start(ctx context.Context) error {
	if c.removed {
		return errors.New("pgtest: the cluster was stopped and removed")
	}
	if c.pm != nil {
		return errors.New("pgtest: the server is running")
	}
	logStart := fileSize(c.LogPath())
	pm, err := c.spawn()
	if err != nil {
		return err
	}
	if err := c.waitReady(ctx, pm); err != nil {
		pm.signalAll(syscall.SIGKILL)
		<-pm.done
		log := readFrom(c.LogPath(), logStart)
		if strings.Contains(string(log), "could not bind") || strings.Contains(string(log), "Address already in use") {
			err = errors.Mark(err, errPortInUse)
		}
		return errors.WithDetailf(errors.Wrapf(err, "pgtest: start the server in %s; the end of its log:\n%s", c.dir, tail(log, 4096)),
			"log: %s", c.LogPath())
	}
	c.pm = pm
	return nil
}

// waitReady waits until the server answers a query, or has exited.
func (c *Cluster) waitReady(ctx context.Context, pm *postmaster) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var last error
	for {
		conn, err := connect(ctx, c.DSN("postgres"))
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(context.WithoutCancel(ctx))
			if err == nil {
				return nil
			}
		}
		last = err
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-pm.done:
			t.Stop()
			return errors.Newf("postgres exited (%v)", pm.err)
		case <-ctx.Done():
			t.Stop()
			return errors.Wrapf(ctx.Err(), "postgres did not accept connections (last: %v)", last)
		case <-t.C:
		}
	}
}

// withDefaultTimeout gives ctx a deadline of startTimeout if it has none.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, startTimeout)
}

// connect opens one connection, giving up after a second: a server that
// is starting answers at once, and one that does not is tried again.
func connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, errors.Wrap(err, "pgtest: parse DSN")
	}
	cfg.ConnectTimeout = time.Second
	return pgx.ConnectConfig(ctx, cfg)
}

// DSN returns the URL of database dbname on the server at addr
// (host:port), as the superuser, without TLS: the form a test hands a
// netproxy's address to.
func DSN(addr, dbname string) string {
	u := url.URL{Scheme: "postgres", User: url.User(Superuser), Host: addr, Path: "/" + dbname, RawQuery: "sslmode=disable"}
	return u.String()
}

// DSN returns the URL of database dbname on this cluster
// (postgres://postgres@127.0.0.1:PORT/dbname?sslmode=disable).
func (c *Cluster) DSN(dbname string) string { return DSN(c.Addr(), dbname) }

// Addr is the server's address, 127.0.0.1:PORT.
func (c *Cluster) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) }

// Port is the server's TCP port. It stays the same across Kill and
// Restart.
func (c *Cluster) Port() int { return c.port }

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string { return filepath.Join(c.dir, "data") }

// LogPath is the server's log file, appended to by every start.
func (c *Cluster) LogPath() string { return filepath.Join(c.dir, "postgres.log") }

// ReadLog returns the server's log: what every start of it wrote.
func (c *Cluster) ReadLog() (string, error) {
	b, err := os.ReadFile(c.LogPath())
	return string(b), errors.Wrap(err, "pgtest: read the server log")
}

// Name is the application_name (and replication slot) a standby streams
// as, to be named in synchronous_standby_names; "" for a cluster made by
// Start.
func (c *Cluster) Name() string { return c.name }

// maxIdentifier is PostgreSQL's NAMEDATALEN-1.
const maxIdentifier = 63

// CreateDatabase creates the database name and returns its DSN. Tests
// sharing one cluster take a database each.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	if name == "" || len(name) > maxIdentifier {
		return "", errors.Newf("pgtest: database name %q must be 1 to %d bytes", name, maxIdentifier)
	}
	if err := c.Exec(ctx, "postgres", "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", errors.Wrapf(err, "pgtest: create database %s", name)
	}
	return c.DSN(name), nil
}

// Exec runs sql (statements without parameters) in database dbname on a
// connection of its own.
func (c *Cluster) Exec(ctx context.Context, dbname, sql string) error {
	conn, err := pgx.Connect(ctx, c.DSN(dbname))
	if err != nil {
		return errors.Wrap(err, "pgtest: connect")
	}
	_, err = conn.Exec(ctx, sql)
	return errors.CombineErrors(errors.Wrap(err, "pgtest"), conn.Close(context.WithoutCancel(ctx)))
}

// Stop shuts the server down (fast shutdown: sessions are ended, what was
// committed is checkpointed), stops the standbys made from it, and removes
// the cluster's directory. Stop of a stopped cluster does nothing.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	standbys := c.standbys
	c.standbys = nil
	c.mu.Unlock()
	var err error
	for _, s := range standbys {
		err = errors.CombineErrors(err, s.Stop())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return err
	}
	c.stopServer(syscall.SIGINT)
	c.removed = true
	return errors.CombineErrors(err, errors.Wrap(os.RemoveAll(c.dir), "pgtest: remove the cluster's directory"))
}

// Kill stops the server as a crash would (immediate shutdown, as pg_ctl
// stop -m immediate: no checkpoint, sessions cut), and keeps its data:
// Restart runs crash recovery. Kill of a server that is not running does
// nothing.
func (c *Cluster) Kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopServer(syscall.SIGQUIT)
}

// Restart starts the server again on the same port and data directory,
// shutting it down first (fast) if it is running, and returns once it
// accepts connections. After Kill, that is crash recovery.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopServer(syscall.SIGINT)
	return c.start(ctx)
}

// Pause stops the server and every process of it (SIGSTOP): connections
// stay open and nothing is answered, as with a server that hangs. Resume
// undoes it; Stop, Kill and Restart resume it first.
func (c *Cluster) Pause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pm == nil {
		return errors.New("pgtest: the server is not running")
	}
	c.pm.signalAll(syscall.SIGSTOP)
	c.paused = true
	return nil
}

// Resume continues a paused server (SIGCONT).
func (c *Cluster) Resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pm != nil && c.paused {
		c.pm.signalAll(syscall.SIGCONT)
	}
	c.paused = false
}

// Running reports whether the server is running (a paused one is).
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pm != nil && !c.pm.exited()
}

// dirPrefix and ownerFile name a cluster's directory and the file in it
// holding the pid of the process that made it.
const (
	dirPrefix = "pgtest-"
	ownerFile = "owner.pid"
)

// sweep removes the directories of clusters whose owning process is gone
// (it died before Stop; its server died with it).
func sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue // not one of ours, or one being made
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		_ = os.RemoveAll(d)
	}
}
