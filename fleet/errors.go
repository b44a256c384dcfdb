package fleet

import (
	"context"
	"net"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rolloutdb/rolloutdb/rollout"
)

var (
	// ErrUnavailable is returned when PostgreSQL cannot be reached or did
	// not answer in time. An append that returns it is not acknowledged
	// (it also matches rollout.ErrNotDurable); retrying it once the
	// database is back puts it in the thread exactly once.
	ErrUnavailable = errors.New("fleet: PostgreSQL unavailable")
	// ErrFenced is returned by an append of a host that no longer owns the
	// thread: its lease expired, or another host took the thread over.
	// Nothing of the append was written. Open the thread again to go on
	// (it may be owned elsewhere).
	ErrFenced = errors.New("fleet: fenced: this host no longer owns the thread")
	// ErrNewerSchema is returned by Open for a database whose layout a
	// newer version of rolloutdb wrote.
	ErrNewerSchema = errors.New("fleet: database layout is newer than this build")
	// ErrPermission is returned when the database role lacks a right the
	// fleet needs (to create its schema, or to write its tables).
	ErrPermission = errors.New("fleet: permission denied")
	// ErrNoSyncStandby is returned by Open with RequireSyncStandby when
	// the database has no synchronous standby.
	ErrNoSyncStandby = errors.New("fleet: no synchronous standby")
)

// An OwnerError says which host owns a thread another host asked for. It
// matches rollout.ErrThreadLocked.
type OwnerError struct {
	Thread string
	// Host is the owner's host name; LeaseUntil when its lease ends unless
	// renewed (database time).
	Host       string
	LeaseUntil time.Time
}

func (e *OwnerError) Error() string {
	return "thread " + e.Thread + " is owned by host " + e.Host + " (lease until " + e.LeaseUntil.UTC().Format(time.RFC3339Nano) + ")"
}

// Is makes an OwnerError match rollout.ErrThreadLocked.
func (e *OwnerError) Is(target error) bool { return target == rollout.ErrThreadLocked }

// unavailable wraps a failure to reach the database.
func unavailable(err error, what string) error {
	err = errors.Wrapf(err, "fleet: %s: PostgreSQL unavailable", what)
	err = errors.WithHint(err, "check that PostgreSQL is up and reachable at the DSN; nothing was acknowledged, and a retry once it is back is safe")
	return errors.Mark(errors.Mark(err, ErrUnavailable), rollout.ErrNotDurable)
}

// classify wraps a database error: unreachable or timed out is
// ErrUnavailable, a missing right ErrPermission.
func classify(err error, what string) error {
	if err == nil {
		return nil
	}
	if isUnavailable(err) {
		return unavailable(err, what)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42501" || pe.Code == "28000" || pe.Code == "28P01") {
		return errors.WithHint(errors.Mark(errors.Wrapf(err, "fleet: %s", what), ErrPermission),
			"grant the role CREATE on the database (for the schema rolloutdb) and rights on its tables, or check the DSN's user and password")
	}
	return errors.Wrapf(err, "fleet: %s", what)
}

// MarkUnavailable marks err ErrUnavailable (and rollout.ErrNotDurable) if
// it means PostgreSQL was not reached or did not answer, as the log's own
// errors are; other errors, and nil, are returned as they are. It is for
// errors of other code on the same database (the index).
func MarkUnavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !isUnavailable(err) {
		return err
	}
	err = errors.WithHint(err, "check that PostgreSQL is up and reachable at the DSN; a retry once it is back is safe")
	return errors.Mark(errors.Mark(err, ErrUnavailable), rollout.ErrNotDurable)
}

// isUnavailable reports whether err means the database was not reached or
// did not answer: the statement's outcome is unknown.
func isUnavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		return true
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	if errors.As(err, &ne) || errors.As(err, &ce) || pgconn.Timeout(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// Class 08: connection exceptions; 57P01-57P03: the server shuts
		// down or cannot accept connections yet.
		return pe.Code[:2] == "08" || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	// A connection that broke mid-statement, or one pgx had closed
	// already (after a cancelled query or a broken socket).
	return errors.Is(err, net.ErrClosed) || errors.Is(err, pgconn.ErrConnClosed) || isEOF(err)
}

func isEOF(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == "unexpected EOF" || e.Error() == "EOF" {
			return true
		}
	}
	return false
}

// readCommitted is the isolation every transaction of the fleet's runs
// at, whatever the database's default: a read after a row lock that
// waited must see what the lock waited for (the previous owner's last
// frames), which REPEATABLE READ would not.
var readCommitted = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
