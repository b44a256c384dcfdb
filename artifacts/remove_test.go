package artifacts

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// RemoveAll removes a thread's directory but the files kept, never
// follows a link out of the data directory, and refuses a path that is
// not under an artifact directory.
func TestRemoveAllKeepsWhatIsKeptAndFollowsNoLink(t *testing.T) {
	s, _ := newStore(t)
	a, err := s.SpillToolResult("t1", "call-1", lines(200))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.SpillToolResult("t1", "call-2", lines(300))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveAll(ToolResultsDir+"/t1", map[string]bool{b.Ref.Path: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(*a.Ref); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an unkept file stayed: %v", err)
	}
	if _, err := s.Read(*b.Ref); err != nil {
		t.Fatalf("a kept file went: %v", err)
	}
	if err := s.RemoveAll(ToolResultsDir+"/t1", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(s.root, ToolResultsDir, "t1")); !os.IsNotExist(err) {
		t.Fatalf("the emptied directory stayed: %v", err)
	}

	outside := t.TempDir()
	precious := filepath.Join(outside, "precious.txt")
	if err := os.WriteFile(precious, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(s.root, ToolResultsDir, "t2")); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveAll(ToolResultsDir+"/t2", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Fatalf("RemoveAll followed a link out of the data directory: %v", err)
	}
	for _, rel := range []string{"threads/active", "../x", "/etc"} {
		if err := s.RemoveAll(rel, nil); !errors.Is(err, ErrPathEscape) {
			t.Fatalf("RemoveAll(%q): %v", rel, err)
		}
	}
}
