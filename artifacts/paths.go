package artifacts

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Directories under the data directory.
const (
	ToolResultsDir = "tool-results"
	AttachmentsDir = "attachments"
	TerminalsDir   = "terminals"
)

// Errors callers branch on.
var (
	// ErrPathEscape is returned for a path or name that would leave the
	// data directory (or its artifact directory).
	ErrPathEscape = errors.New("artifacts: path leaves the data directory")
	// ErrInvalidName is returned for a thread, call or terminal id that is
	// not a plain name.
	ErrInvalidName = errors.New("artifacts: invalid name")
	// ErrDigestMismatch is returned when the bytes no longer hash to the
	// reference.
	ErrDigestMismatch = errors.New("artifacts: content does not match its reference")
	// ErrTooLarge is returned for more bytes than a limit allows.
	ErrTooLarge = errors.New("artifacts: too large")
)

// checkName accepts what the rollout package accepts as a thread id, and
// call and terminal ids made of the same characters plus '.' inside:
// 1-128 characters of a-z, A-Z, 0-9, '-', '_', '.', starting with a letter
// or digit, never "..". It is checked before a name touches a path. (The
// package imports nothing of ours; the rule is the same as
// rollout.ValidateThreadID's, with upper case and dots for host ids.)
func checkName(kind, s string) error {
	if s == "" || len(s) > 128 || strings.Contains(s, "..") {
		return fmt.Errorf("%w: %s %q", ErrInvalidName, kind, s)
	}
	for i, c := range s {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '-' && c != '_' && c != '.')) {
			return fmt.Errorf("%w: %s %q: character %q at %d", ErrInvalidName, kind, s, c, i)
		}
	}
	return nil
}

// join makes an absolute path from a path relative to root, refusing any
// that is absolute, has "..", or does not lie under one of the artifact
// directories.
func join(root, rel string) (string, error) {
	if rel == "" || filepath.IsAbs(rel) || strings.HasPrefix(rel, "/") || strings.Contains(rel, `\`) {
		return "", fmt.Errorf("%w: %q", ErrPathEscape, rel)
	}
	clean := filepath.Clean(filepath.FromSlash(rel))
	for _, part := range strings.Split(filepath.ToSlash(clean), "/") {
		if part == ".." || part == "." || part == "" {
			return "", fmt.Errorf("%w: %q", ErrPathEscape, rel)
		}
	}
	top, _, _ := strings.Cut(filepath.ToSlash(clean), "/")
	if top != ToolResultsDir && top != AttachmentsDir && top != TerminalsDir {
		return "", fmt.Errorf("%w: %q is not under %s, %s or %s", ErrPathEscape, rel, ToolResultsDir, AttachmentsDir, TerminalsDir)
	}
	return filepath.Join(root, clean), nil
}
