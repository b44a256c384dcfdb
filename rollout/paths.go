package rollout

import (
	"path/filepath"
	"strings"

	"github.com/cockroachdb/errors"
)

// Layout of a workspace data directory (".craft" by default). Every path the
// library builds comes from here, from a validated thread id, or from
// SafeJoin.
const (
	ActiveDir      = "threads/active"
	ArchivedDir    = "threads/archived"
	RolloutExt     = ".rollout"
	TornSuffix     = ".torn-" // <id>.rollout.torn-<offset>: bytes cut from a torn tail
	tempFilePrefix = ".tmp-"  // a file being created; never a rollout
)

// ActivePath is the rollout of an active thread under the data directory
// root. The id is validated first.
func ActivePath(root, threadID string) (string, error) {
	if err := ValidateThreadID(threadID); err != nil {
		return "", err
	}
	return filepath.Join(root, ActiveDir, threadID+RolloutExt), nil
}

// ArchivedPath is the rollout of an archived thread under root.
func ArchivedPath(root, threadID string) (string, error) {
	if err := ValidateThreadID(threadID); err != nil {
		return "", err
	}
	return filepath.Join(root, ArchivedDir, threadID+RolloutExt), nil
}

// SafeJoin joins a relative path taken from input (a record, an argument) to
// root and refuses any result outside root: absolute paths, "..", and
// empty names are ErrPathEscape. It is lexical; symlinks inside the data
// directory are the operator's.
func SafeJoin(root, rel string) (string, error) {
	if rel == "" || filepath.IsAbs(rel) || strings.ContainsRune(rel, 0) || strings.Contains(rel, `\`) {
		return "", errors.Wrapf(ErrPathEscape, "%q", truncateForError(rel))
	}
	clean := filepath.Clean(filepath.FromSlash(rel))
	if clean == "." || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return "", errors.Wrapf(ErrPathEscape, "%q", truncateForError(rel))
	}
	return filepath.Join(root, clean), nil
}
