package rolloutdb

import (
	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/backup"
	"github.com/rolloutdb/rolloutdb/follow"
	"github.com/rolloutdb/rolloutdb/internal/location"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The errors a host branches on, with errors.Is. Those of the packages
// below are the same values under the facade's name, so that a host
// imports one package to check them.
var (
	// ErrClosed is returned by a DB, Thread or Turn after Close, and by
	// every call on what a closed DB had open. It matches the closed
	// errors of the packages below (rollout.ErrClosed, projection.ErrClosed)
	// with errors.Is.
	ErrClosed error = &rollout.ClosedError{What: "rolloutdb"}
	// ErrWorkspaceFormat is returned by Open when workspace.json is
	// unreadable or from a newer version.
	ErrWorkspaceFormat = errors.New("rolloutdb: unsupported workspace format")

	// ErrThreadOpen is returned when this DB already has the thread open:
	// use that handle (or close it first).
	ErrThreadOpen = errors.New("rolloutdb: thread already open in this DB")
	// ErrThreadLocked is returned when another writer (another process)
	// holds the thread.
	ErrThreadLocked = rollout.ErrThreadLocked
	// ErrThreadExists is returned by CreateThread for an id in use.
	ErrThreadExists = rollout.ErrThreadExists
	// ErrInvalidThreadID is returned for an id that is not a plain name
	// (rollout.ValidateThreadID).
	ErrInvalidThreadID = rollout.ErrInvalidThreadID
	// ErrNotFound is returned for a thread the workspace does not have.
	ErrNotFound = projection.ErrNotFound
	// ErrNoSuchRow is returned by a write of business state (Business,
	// BusinessWrites) that names a goal, a message or an edge the
	// workspace does not have.
	ErrNoSuchRow = projection.ErrNoSuchRow
	// ErrConflict is returned by an append whose expected seq is not the
	// thread's last: nothing was written.
	ErrConflict = rollout.ErrConflict
	// ErrNotDurable is returned by an append that was written and then cut
	// back (a failed sync): it is not acknowledged, and may be retried.
	ErrNotDurable = rollout.ErrNotDurable
	// ErrTooLarge is returned for a record or frame over the size limit.
	ErrTooLarge = rollout.ErrTooLarge
	// ErrIdentity is returned by Resume for a rollout whose header does
	// not match the thread or the workspace.
	ErrIdentity = recovery.ErrIdentity

	// ErrTurnInProgress is returned by StartTurn while a turn is open: a
	// thread has one turn open at a time.
	ErrTurnInProgress = errors.New("rolloutdb: a turn is already in progress")
	// ErrTurnEnded is returned for a turn committed or cancelled already.
	ErrTurnEnded = errors.New("rolloutdb: turn already ended")
	// ErrNoSuchTurn is returned for a turn number (Fork's AtTurn) the
	// thread does not have.
	ErrNoSuchTurn = errors.New("rolloutdb: no such turn")
	// ErrRollbackTooFar is returned by a rollback of more turns than the
	// thread shows.
	ErrRollbackTooFar = errors.New("rolloutdb: rollback past the first turn")
	// ErrEmptyUpdate is returned by a metadata update that names nothing
	// to change.
	ErrEmptyUpdate = errors.New("rolloutdb: metadata update changes nothing")

	// ErrThreadArchived is returned for a new turn on an archived thread:
	// restore it first.
	ErrThreadArchived = errors.New("rolloutdb: thread is archived")
	// ErrNotArchived is returned by Restore of a thread that is active.
	ErrNotArchived = errors.New("rolloutdb: thread is not archived")
	// ErrSubagent is returned for a subagent thread archived, restored or
	// deleted on its own: it follows its root.
	ErrSubagent = errors.New("rolloutdb: subagent threads follow their root")

	// ErrThreadDeleted ends a follower whose thread was deleted.
	ErrThreadDeleted = follow.ErrThreadDeleted
	// ErrRolloutReplaced ends a follower whose rollout no longer holds,
	// where it was, the last frame the follower read (a repair rewrote it,
	// or a failed write was cut back). Follow again with AfterSeq at the
	// last seq seen.
	ErrRolloutReplaced = follow.ErrRolloutReplaced

	// ErrNotABackup is returned when a backup's destination holds
	// something that is not a backup of this workspace.
	ErrNotABackup = backup.ErrNotABackup
	// ErrRestoreTarget is returned when a restore's target exists and is
	// not an empty directory.
	ErrRestoreTarget = backup.ErrRestoreTarget

	// ErrUnsupportedURL is returned by Open, Backup, VerifyBackup and
	// RestoreBackup for a workspace or backup written as a URL
	// (scheme://...) of a scheme this build does not serve, rather than
	// making a directory named after it. No scheme is served yet; a
	// directory whose name looks like one is written ./s3://...
	ErrUnsupportedURL = location.ErrUnsupportedURL
)
