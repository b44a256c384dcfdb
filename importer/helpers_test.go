package importer

import (
	"bytes"
	"os"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// The fixtures were written (checked out) just now: every turn is read.
func init() { ActiveWindow = 0 }

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o644) }

// kinds is the types of a turn's items, in order.
func kinds(tu Turn) []rollout.ItemType {
	var out []rollout.ItemType
	for _, it := range tu.Items {
		out = append(out, it.Type)
	}
	return out
}

// readBytes reads a session file's bytes in the named format, as Read
// reads a file (its mtime: long ago).
func readBytes(format string, b []byte, path string) (Session, error) {
	r := &Reader{s: Session{Format: format, SourcePath: path}}
	if err := r.setFormat(path, bytes.Contains(b, []byte(`"thread_rolled_back"`))); err != nil {
		return Session{}, err
	}
	src := bytes.NewReader(b)
	r.f, r.sc = src, lineScanner(src)
	if err := r.start(); err != nil {
		return Session{}, err
	}
	return r.readAll()
}
