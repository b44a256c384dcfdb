package recovery

import (
	"github.com/cockroachdb/errors"
)

// Identity errors: Resume fails with one of these (errors.Is) and a hint,
// never with a partial state. Each also matches ErrIdentity.
var (
	// ErrIdentity is matched by every identity error below.
	ErrIdentity = errors.New("recovery: thread identity check failed")
	// ErrNoHeader is returned when the header record (seq 1, thread_opened)
	// is unreadable, missing, or not the first record.
	ErrNoHeader error = &identityKind{"recovery: thread header unreadable or not first"}
	// ErrThreadMismatch is returned when the header names another thread
	// than the file or the request.
	ErrThreadMismatch error = &identityKind{"recovery: rollout belongs to another thread"}
	// ErrWorkspaceMismatch is returned when the header names another
	// workspace.
	ErrWorkspaceMismatch error = &identityKind{"recovery: rollout belongs to another workspace"}
	// ErrIdentityConflict is returned for a later header with another
	// identity or source.
	ErrIdentityConflict error = &identityKind{"recovery: conflicting thread headers"}
)

// identityKind is one kind of identity error: itself, and ErrIdentity, to
// the standard library's errors.Is as to cockroachdb's.
type identityKind struct{ msg string }

func (e *identityKind) Error() string        { return e.msg }
func (e *identityKind) Is(target error) bool { return target == ErrIdentity }

func identityError(sentinel error, hint, format string, args ...any) error {
	return errors.WithHint(errors.Wrapf(sentinel, format, args...), hint)
}

const hintInspect = "do not continue this thread: inspect it with rolloutctl verify and show; restore the rollout from a backup if it was copied over"
