package rollout

import (
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrThreadLocked is returned when another writer (in this process or
	// another) holds the thread's rollout.
	ErrThreadLocked = vfs.ErrLocked
	// ErrThreadExists is returned when a rollout for this thread id already
	// exists.
	ErrThreadExists = errors.New("rollout: thread already exists")
	// ErrConflict is returned when an append named the seq it expected to
	// follow and the rollout had moved on. Nothing was written.
	ErrConflict = errors.New("rollout: append conflict")
	// ErrInvalidThreadID is returned for a thread id outside the allowed
	// character set or length. Such ids never reach a path.
	ErrInvalidThreadID = errors.New("rollout: invalid thread id")
	// ErrPathEscape is returned when a path built from input would leave
	// its root directory.
	ErrPathEscape = errors.New("rollout: path escapes the data directory")
	// ErrTooLarge is returned for a record or frame over the format's
	// bounds.
	ErrTooLarge = errors.New("rollout: record too large")
	// ErrClosed is returned when the writer has been closed. It matches
	// (errors.Is) every ClosedError: the closed errors of the packages
	// above match each other.
	ErrClosed error = &ClosedError{What: "rollout: writer"}
	// ErrNotDurable is returned when the frame was written but could not be
	// made durable (fsync failed); it has been cut from the file and is not
	// acknowledged.
	ErrNotDurable = errors.New("rollout: append not durable")
	// ErrThreadMismatch is returned when the file's header names another
	// thread.
	ErrThreadMismatch = errors.New("rollout: rollout belongs to another thread")
	// ErrUnknownKind is returned when DecodeBody is asked to decode a kind
	// this version does not know. The record itself is intact and must be
	// kept.
	ErrUnknownKind = errors.New("rollout: unknown record kind")
	// ErrCorrupt is matched (errors.Is) by every *CorruptionError.
	ErrCorrupt = errors.New("rollout: corrupt")
)

// Reason says why a region of a rollout was rejected. The values are stable:
// they are stored in diagnostics and printed by rolloutctl.
type Reason string

// Reasons a reader rejects bytes.
const (
	ReasonBadFileHeader  Reason = "bad_file_header"  // file header magic, version or checksum
	ReasonBadMagic       Reason = "bad_magic"        // no sync word where a frame must start
	ReasonHeaderChecksum Reason = "header_checksum"  // frame header fails its CRC
	ReasonBadLength      Reason = "bad_length"       // a checked header with lengths out of bounds
	ReasonPayloadCRC     Reason = "payload_checksum" // frame payload fails its CRC
	ReasonFileID         Reason = "file_id"          // frame from another file
	ReasonSeq            Reason = "seq"              // frame seq does not follow the previous frame
	ReasonDecode         Reason = "decode"           // payload checks but does not decode
	ReasonZeros          Reason = "zeros"            // zero bytes where a frame must start
	ReasonTruncated      Reason = "truncated"        // the file ends inside a frame
)

// CorruptionError describes one damaged region of a rollout: where it is,
// how long, which seqs were lost with it and why. Recovery acts on it with
// errors.As; errors.Is(err, ErrCorrupt) holds.
type CorruptionError struct {
	Path   string // rollout file, if known
	Offset int64  // first damaged byte
	Length int64  // damaged bytes skipped (to the next valid frame or EOF)
	// FirstSeq and LastSeq bound the seqs lost in the region, both 0 when
	// unknown. They are exact when the frame header survived; otherwise they
	// are the gap between the surrounding valid frames (LastSeq is 0 when no
	// valid frame follows).
	FirstSeq, LastSeq uint64
	Reason            Reason
	// Tail is true when no valid frame follows the damage: the residue of an
	// interrupted write, which the next writer truncates.
	Tail bool
	// AckLost is true when a later frame records a durable offset past this
	// damage: bytes that had been acknowledged as durable were destroyed.
	AckLost bool
}

func (e *CorruptionError) Error() string {
	where := "mid-file damage"
	if e.Tail {
		where = "torn tail"
	}
	if e.AckLost {
		where = "acknowledged data lost"
	}
	s := fmt.Sprintf("rollout %s: %s at offset %d (%d bytes): %s", e.Path, where, e.Offset, e.Length, e.Reason)
	if e.FirstSeq != 0 {
		if e.LastSeq != 0 {
			s += fmt.Sprintf(", seq %d..%d", e.FirstSeq, e.LastSeq)
		} else {
			s += fmt.Sprintf(", seq %d..", e.FirstSeq)
		}
	}
	return s
}

// Is makes errors.Is(err, ErrCorrupt) true for every *CorruptionError.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorrupt }

// withPath wraps err with a message that names the path (vfs.WithPath).
func withPath(err error, format string, args ...any) error {
	return vfs.WithPath(err, format, args...)
}

// A ClosedError says a call reached something closed (What: a writer, a
// store, a DB). Every ClosedError matches every other with errors.Is, so
// that a host checks one sentinel (rolloutdb.ErrClosed) whichever layer
// found the close.
type ClosedError struct{ What string }

func (e *ClosedError) Error() string { return e.What + " closed" }

// Is reports whether target is a ClosedError too.
func (e *ClosedError) Is(target error) bool {
	_, ok := target.(*ClosedError)
	return ok
}
