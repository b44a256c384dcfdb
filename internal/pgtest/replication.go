package pgtest

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/cockroachdb/errors"
)

// standbyName is what a standby's name may be: it is its application_name
// and the name of its replication slot on the primary.
var standbyName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// Standby makes a streaming standby of c and starts it: pg_basebackup -R
// of c's data into a new cluster directory, streaming through a
// replication slot of its own (so that c keeps the WAL it has not
// received), as application_name name ("" names it standbyN). The standby
// accepts read-only connections; Promote makes it a primary. c's Stop
// stops it too, until it is promoted.
func (c *Cluster) Standby(ctx context.Context, name string) (*Cluster, error) {
	c.mu.Lock()
	if name == "" {
		name = fmt.Sprintf("standby%d", len(c.standbys)+1)
	}
	running := c.pm != nil
	c.mu.Unlock()
	if !running {
		return nil, errors.New("pgtest: Standby of a server that is not running")
	}
	if !standbyName.MatchString(name) {
		return nil, errors.Newf("pgtest: standby name %q must be 1 to 63 of a-z, 0-9 and _", name)
	}
	s, err := newCluster(c.opts)
	if err != nil {
		return nil, err
	}
	s.name = name
	// -R writes standby.signal and primary_conninfo (with this
	// application_name); -C -S makes the slot; -N: see initdb.
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s application_name=%s", c.port, Superuser, name)
	if err := s.runTool(ctx, "pg_basebackup", "-d", conninfo, "-D", s.DataDir(), "-R", "-X", "stream", "-c", "fast", "-C", "-S", name, "-N"); err != nil {
		return nil, errors.CombineErrors(err, s.Stop())
	}
	if err := s.startOnFreePort(ctx); err != nil {
		return nil, errors.CombineErrors(err, s.Stop())
	}
	c.mu.Lock()
	c.standbys = append(c.standbys, s)
	c.mu.Unlock()
	s.mu.Lock()
	s.primary = c
	s.mu.Unlock()
	return s, nil
}

// Promote makes a standby a primary (pg_promote) and returns once it
// accepts writes. It is then no longer its old primary's: that one's
// Stop leaves it running.
func (c *Cluster) Promote(ctx context.Context) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var ok bool
	if err := c.queryRow(ctx, "SELECT pg_promote(true, 60)", &ok); err != nil {
		return errors.Wrap(err, "pgtest: promote")
	}
	if !ok {
		return errors.Newf("pgtest: promote: the standby %s did not leave recovery in 60 s; see %s", c.name, c.LogPath())
	}
	// A primary of its own now: its old primary's Stop leaves it running.
	c.mu.Lock()
	old := c.primary
	c.primary = nil
	c.mu.Unlock()
	if old != nil {
		old.mu.Lock()
		for i, s := range old.standbys {
			if s == c {
				old.standbys = append(old.standbys[:i], old.standbys[i+1:]...)
				break
			}
		}
		old.mu.Unlock()
	}
	return nil
}

// SetSynchronousStandbyNames sets synchronous_standby_names on this
// primary (ALTER SYSTEM, then a reload), as a synchronous-replication
// test needs: "" turns synchronous replication off. It returns once the
// setting is in force for the next commit: a new session shows it, and
// the checkpointer, which tells committing backends whether to wait for a
// standby, has read it too (a CHECKPOINT waits for the checkpointer's next
// round, which begins by reading a pending reload).
func (c *Cluster) SetSynchronousStandbyNames(ctx context.Context, value string) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	if err := c.Exec(ctx, "postgres", "ALTER SYSTEM SET synchronous_standby_names = "+quoteLiteral(value)); err != nil {
		return err
	}
	if err := c.Exec(ctx, "postgres", "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	// A session is forked from the postmaster, which has re-read the
	// configuration and signalled its children before it forks the next
	// one.
	err := poll(ctx, func(ctx context.Context) (bool, error) {
		var got string
		err := c.queryRow(ctx, "SHOW synchronous_standby_names", &got)
		return got == value, err
	})
	if err != nil {
		return errors.Wrap(err, "pgtest: wait for synchronous_standby_names")
	}
	return c.Exec(ctx, "postgres", "CHECKPOINT")
}

// WaitStreaming waits until this primary streams WAL to standby
// (pg_stat_replication's state is streaming).
func (c *Cluster) WaitStreaming(ctx context.Context, standby *Cluster) error {
	return c.waitReplication(ctx, standby, "streaming", "")
}

// WaitSynchronous waits until this primary streams to standby as a
// synchronous standby (sync_state sync or quorum): commits wait for it.
func (c *Cluster) WaitSynchronous(ctx context.Context, standby *Cluster) error {
	return c.waitReplication(ctx, standby, "streaming", "sync")
}

func (c *Cluster) waitReplication(ctx context.Context, standby *Cluster, state, syncState string) error {
	if standby.name == "" {
		return errors.New("pgtest: not a standby (made by Standby)")
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	err := poll(ctx, func(ctx context.Context) (bool, error) {
		var st, sync string
		err := c.queryRow(ctx, "SELECT coalesce(max(state), ''), coalesce(max(sync_state), '') FROM pg_stat_replication WHERE application_name = '"+standby.name+"'", &st, &sync)
		if syncState == "sync" && sync == "quorum" {
			sync = "sync"
		}
		return err == nil && st == state && (syncState == "" || sync == syncState), err
	})
	return errors.Wrapf(err, "pgtest: wait for %s to stream from %s", standby.name, c.Addr())
}

// WaitReplayed waits until standby has replayed all the WAL this primary
// has written so far: what was committed here is visible there.
func (c *Cluster) WaitReplayed(ctx context.Context, standby *Cluster) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var lsn string
	if err := c.queryRow(ctx, "SELECT pg_current_wal_lsn()::text", &lsn); err != nil {
		return errors.Wrap(err, "pgtest: read the primary's WAL position")
	}
	err := poll(ctx, func(ctx context.Context) (bool, error) {
		var done bool
		err := standby.queryRow(ctx, "SELECT coalesce(pg_last_wal_replay_lsn() >= '"+lsn+"'::pg_lsn, false)", &done)
		return done, err
	})
	return errors.Wrapf(err, "pgtest: wait for %s to replay up to %s", standby.name, lsn)
}

// queryRow runs a query in the database postgres on a connection of its
// own and scans its one row.
func (c *Cluster) queryRow(ctx context.Context, sql string, dest ...any) error {
	conn, err := connect(ctx, c.DSN("postgres"))
	if err != nil {
		return err
	}
	err = conn.QueryRow(ctx, sql).Scan(dest...)
	return errors.CombineErrors(err, conn.Close(context.WithoutCancel(ctx)))
}

// poll calls f every 10 ms until it reports done or ctx ends; the error
// is f's last, with ctx's.
func poll(ctx context.Context, f func(context.Context) (bool, error)) error {
	var last error
	for {
		done, err := f(ctx)
		if done {
			return nil
		}
		last = err
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			if last != nil {
				return errors.Wrapf(ctx.Err(), "last: %v", last)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}
