package artifacts

import (
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzPaths: a reference read from a record (which may be tampered with)
// never resolves outside the artifact directories, and a preview of any
// bytes is valid UTF-8 and bounded.
func FuzzPaths(f *testing.F) {
	f.Add("tool-results/t1/c.out", []byte("out\n"))
	f.Add("../../etc/passwd", []byte{0xff, 0xfe, '\n'})
	f.Add("attachments/ab/../../../x", []byte(strings.Repeat("日本\n", 100)))
	f.Add("terminals/t1/x.log", []byte{})
	root := filepath.FromSlash("/data/ws/.craft")
	f.Fuzz(func(t *testing.T, rel string, b []byte) {
		if p, err := join(root, rel); err == nil {
			r, rerr := filepath.Rel(root, p)
			top, _, _ := strings.Cut(filepath.ToSlash(r), "/")
			if rerr != nil || strings.HasPrefix(r, "..") || (top != ToolResultsDir && top != AttachmentsDir && top != TerminalsDir) {
				t.Fatalf("join(%q) = %q: outside the artifact directories", rel, p)
			}
		}
		p := Preview(b, 3, 200)
		if !utf8.ValidString(p) || len(p) > 200+100 {
			t.Fatalf("preview of %d bytes: %d bytes, valid %v", len(b), len(p), utf8.ValidString(p))
		}
	})
}
