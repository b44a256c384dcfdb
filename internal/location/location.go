// Package location tells a local path from a URL (scheme://...) where
// the facade and rolloutctl take a workspace or a backup's place. It owns
// the test and the error; which schemes a build serves is the caller's to
// decide, before it asks Local. It never touches the file system, so that
// a URL is refused before anything is made in its name.
package location

import (
	"regexp"

	"github.com/cockroachdb/errors"
)

// ErrUnsupportedURL is returned for a workspace or backup written as a URL
// of a scheme this build does not serve (s3://, and postgres:// until the
// fleet engine serves it), instead of taking it for a directory name.
var ErrUnsupportedURL = errors.New("rolloutdb: a URL of a scheme this build does not serve")

// urlPrefix is a URL's scheme (RFC 3986: a letter, then letters, digits,
// + - .) and ://. A scheme of one letter is not taken: on Windows, C://x is
// a path.
var urlPrefix = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]+)://`)

// Scheme returns the scheme of p when p is written as a URL.
func Scheme(p string) (scheme string, ok bool) {
	m := urlPrefix.FindStringSubmatch(p)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// Local returns nil when p is a local path, and otherwise an error marked
// ErrUnsupportedURL that names what p is for (a "workspace", a "backup").
func Local(what, p string) error {
	scheme, ok := Scheme(p)
	if !ok {
		return nil
	}
	err := errors.Newf("rolloutdb: %s %q is a URL of scheme %s, which this build does not serve; a local %s is a directory path", what, p, scheme, what)
	return errors.WithHint(errors.Mark(err, ErrUnsupportedURL),
		"a directory whose name starts that way is written as a relative path: ./"+p)
}
