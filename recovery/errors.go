package recovery

import (
	"github.com/cockroachdb/errors"
)

// Identity errors: Resume fails with one of these (errors.Is) and a hint,
// never with a partial state. Each also matches ErrIdentity.
var (
	// ErrIdentity is matched by every identity error below.
	ErrIdentity = errors.New("recovery: thread identity check failed")
	// ErrNoHeader: the header record (seq 1, thread_opened) is unreadable,
	// missing, or not the first record.
	ErrNoHeader = errors.Mark(errors.New("recovery: thread header unreadable or not first"), ErrIdentity)
	// ErrThreadMismatch: the header names another thread than the file or
	// the request.
	ErrThreadMismatch = errors.Mark(errors.New("recovery: rollout belongs to another thread"), ErrIdentity)
	// ErrWorkspaceMismatch: the header names another workspace.
	ErrWorkspaceMismatch = errors.Mark(errors.New("recovery: rollout belongs to another workspace"), ErrIdentity)
	// ErrIdentityConflict: a later header with another identity or source.
	ErrIdentityConflict = errors.Mark(errors.New("recovery: conflicting thread headers"), ErrIdentity)
)

func identityError(sentinel error, hint, format string, args ...any) error {
	return errors.WithHint(errors.Wrapf(sentinel, format, args...), hint)
}

const hintInspect = "do not continue this thread: inspect it with rolloutctl verify and show; restore the rollout from a backup if it was copied over"
