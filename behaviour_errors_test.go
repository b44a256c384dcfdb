package rolloutdb_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/projection"
)

// Wrong input: ids that are not plain names, ids the workspace does not
// have, and paths that would leave the workspace.

// Every call that takes a thread id refuses one that is not a plain name
// (ErrInvalidThreadID) and says of a plain one the workspace does not
// have that it is not there (ErrNotFound); neither makes anything. A data
// directory or an artifact path that would leave the workspace is
// refused.
func behaveWrongIDsAndPaths(t *testing.T, e engine) {
	ws, db := e.open(t, rolloutdb.Options{})
	mustThreadWithTurns(t, db, rolloutdb.ThreadOptions{ID: "real"}, "q")
	calls := map[string]func(id string) error{
		"OpenThread": func(id string) error { _, err := db.OpenThread(ctx, id); return err },
		"Resume":     func(id string) error { _, _, err := db.Resume(ctx, id, rolloutdb.ResumeOptions{}); return err },
		"ThreadInfo": func(id string) error { _, err := db.ThreadInfo(ctx, id); return err },
		"Turns":      func(id string) error { _, err := db.Turns(ctx, id, 1, 1); return err },
		"Follow":     func(id string) error { _, err := db.Follow(ctx, id, rolloutdb.FollowOptions{}); return err },
		"Fork":       func(id string) error { _, err := db.Fork(ctx, id, rolloutdb.ForkOptions{}); return err },
		"Archive":    func(id string) error { _, err := db.Archive(ctx, id, ""); return err },
		"Restore":    func(id string) error { _, err := db.Restore(ctx, id); return err },
		"Delete":     func(id string) error { _, err := db.Delete(ctx, id); return err },
	}
	names := make([]string, 0, len(calls))
	for name := range calls {
		names = append(names, name)
	}
	slices.Sort(names)
	bad := []string{"", "../../etc/passwd", "../real", "a/b", `a\b`, "/abs", "UPPER", "..", ".", "sp ace", "nul\x00", strings.Repeat("a", 65)}
	for _, id := range bad {
		for _, name := range names {
			isErr(t, fmt.Sprintf("%s(%q)", name, id), calls[name](id), rolloutdb.ErrInvalidThreadID)
		}
		if id == "" {
			continue // CreateThread makes an id
		}
		_, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: id})
		isErr(t, fmt.Sprintf("CreateThread(%q)", id), err, rolloutdb.ErrInvalidThreadID)
		_, err = db.Fork(ctx, "real", rolloutdb.ForkOptions{ID: id})
		isErr(t, fmt.Sprintf("Fork(real) as %q", id), err, rolloutdb.ErrInvalidThreadID)
	}
	for _, name := range names {
		if err := calls[name]("nope"); !errors.Is(err, rolloutdb.ErrNotFound) {
			t.Errorf("%s of a thread the workspace does not have: %v, want ErrNotFound", name, err)
		}
	}
	if ids, err := db.ListThreadIDs(ctx); err != nil || !slices.Equal(ids, []string{"real"}) {
		t.Fatalf("after refused calls the workspace holds %v, %v", ids, err)
	}
	if ids := listAll(t, db, projection.ListOptions{Scope: projection.ScopeAll}); !slices.Equal(ids, []string{"real"}) {
		t.Fatalf("after refused calls the list holds %v", ids)
	}
	long := strings.Repeat("a", 64) // the longest plain name
	if th := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: long}); th.ID() != long {
		t.Fatalf("a 64-character id became %q", th.ID())
	}

	// Options.DataDir is one directory name inside the workspace.
	for _, dir := range []string{"../escape", "a/b", "..", ".", `a\b`} {
		if other, err := e.try(t, ws, rolloutdb.Options{DataDir: dir}); err == nil {
			other.Close()
			t.Fatalf("a data directory %q was accepted", dir)
		}
	}
	// The blob store names nothing outside its directories.
	blobs := db.Artifacts()
	output := []byte(strings.Repeat("tool output\n", 8<<10)) // over Options.Artifacts.SpillAbove
	for _, p := range []string{"../workspace.json", "../../x", "/etc/passwd", "tool-results/../../workspace.json"} {
		if b, err := blobs.Read(artifacts.Ref{Path: p}); err == nil {
			t.Fatalf("artifact path %q read %d bytes", p, len(b))
		}
	}
	for _, thread := range []string{"../x", "a/b", ".."} {
		if _, err := blobs.SpillToolResult(thread, "call", output); err == nil {
			t.Fatalf("a tool result spilled for thread %q", thread)
		}
		if _, err := blobs.StartTerminal(thread, "term", "make"); err == nil {
			t.Fatalf("a terminal started for thread %q", thread)
		}
	}
	if _, err := blobs.SpillToolResult("real", "../../call", output); err == nil {
		t.Fatal("a tool result spilled under call id ../../call")
	}
}
