// Package pgtest starts throwaway PostgreSQL clusters for tests, the
// crash harness and the benchmarks: a real server, never a mock, so that
// what the fleet engine is tested against is what it runs against.
//
// A cluster lives in a temporary directory of its own:
//
//	pgtest-NNN/
//	  data/          the data directory (initdb, or pg_basebackup for a standby)
//	  postgres.log   the server's log, appended to by every start
//	  .s.PGSQL.PORT  the unix socket (clients here use TCP on 127.0.0.1)
//
// It listens on a free loopback port, trusts every local connection, and
// has a superuser named postgres. Start costs about a second (initdb
// most of it), so a test package shares one cluster and gives each test a
// database of its own (CreateDatabase); the package pgtesting does that
// for tests. A test that kills, restarts, pauses or replicates a server
// starts a cluster of its own.
//
// # Running as root
//
// initdb and postgres refuse to run as root. When this process is root,
// every PostgreSQL program runs as the operating system user postgres
// (Debian's postgresql packages create it), and the cluster's directory is
// handed to that user.
//
// # Leaks
//
// The server is not daemonized by pg_ctl: the postmaster is a child of
// this process, started with a parent-death signal (SIGKILL), in a process
// group of its own. When this process dies — a panic, a test timeout, a
// kill -9 — the kernel kills the postmaster, and PostgreSQL's own children
// exit when they see it gone. The parent-death signal follows the thread
// that forked, not the process (go.dev/issue/27505), so the postmaster is
// started from a goroutine locked to its thread until the postmaster has
// exited. What is left behind by such a death is the temporary directory;
// the next Start removes those whose owning process is gone. One case is
// not covered: a cluster paused (SIGSTOP) when this process dies keeps its
// stopped backends until they are continued (kill -CONT).
//
// The package never touches a cluster it did not start: Debian's package
// may run its own "main" cluster on port 5432, which this one leaves alone.
package pgtest
