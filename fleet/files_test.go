package fleet_test

import (
	"bytes"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// Artifacts written through one host's Files are read by another's:
// spilled tool outputs, attachments stored once by content, terminal
// records and logs, and GC, all through package artifacts unchanged.
func TestArtifactsAcrossHosts(t *testing.T) {
	dsn := testDSN(t)
	a := artifacts.New("/ws", artifacts.Options{FS: openLog(t, dsn, "a", fleet.Options{}).Files(), SpillAbove: 16})
	// b's clock is an hour ahead: GC finds everything past its grace.
	later := func() time.Time { return time.Now().Add(time.Hour) }
	b := artifacts.New("/ws", artifacts.Options{FS: openLog(t, dsn, "b", fleet.Options{}).Files(), SpillAbove: 16, Now: later})
	out := []byte(strings.Repeat("line of tool output\n", 100))
	res, err := a.SpillToolResult("t1", "call-1", out)
	if err != nil || res.Ref == nil {
		t.Fatalf("spill: %+v %v", res, err)
	}
	if again, err := a.SpillToolResult("t1", "call-1", out); err != nil || again.Ref.Path != res.Ref.Path {
		t.Fatalf("retried spill: %+v %v", again, err)
	}
	other, err := a.SpillToolResult("t1", "call-1", append(out, 'x'))
	if err != nil || other.Ref.Path == res.Ref.Path {
		t.Fatalf("different bytes under the same call: %+v %v", other, err)
	}
	got, err := b.Read(*res.Ref)
	if err != nil || !bytes.Equal(got, out) {
		t.Fatalf("read on the other host: %v", err)
	}
	bad := *res.Ref
	bad.SHA256 = strings.Repeat("0", 64)
	if _, err := b.Read(bad); !errors.Is(err, artifacts.ErrDigestMismatch) {
		t.Fatalf("wrong digest: %v", err)
	}
	bad = *res.Ref
	bad.Path = "../../etc/passwd"
	if _, err := b.Read(bad); err == nil {
		t.Fatal("a path out of the workspace was read")
	}
	r1, err := a.PutAttachment([]byte("image bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if r2, err := b.PutAttachment([]byte("image bytes")); err != nil || r2 != r1 {
		t.Fatalf("same attachment from another host: %+v %v", r2, err)
	}

	if _, err := a.StartTerminal("t1", "term-1", "make test"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := a.AppendLog("t1", "term-1", []byte("ok\n")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.EndTerminal("t1", "term-1", 0); err != nil {
		t.Fatal(err)
	}
	terms, err := b.Terminals("t1")
	if err != nil || len(terms) != 1 || terms[0].Status != artifacts.TerminalCompleted || terms[0].Log.Size != 9 {
		t.Fatalf("terminals on the other host: %+v %v", terms, err)
	}
	if log, err := b.Read(terms[0].Log); err != nil || string(log) != "ok\nok\nok\n" {
		t.Fatalf("terminal log: %q %v", log, err)
	}

	// GC by another host: what a surviving record references stays, the
	// rest goes once past the grace period.
	rep, err := b.GC(artifacts.GCOptions{Referenced: map[string]bool{res.Ref.Path: true}, Threads: map[string]bool{"t1": true}, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	removed := map[string]bool{}
	for _, e := range rep.Removed {
		removed[e.Path] = true
	}
	if !removed[other.Ref.Path] || !removed[r1.Path] || removed[res.Ref.Path] || len(rep.Removed) != 2 {
		t.Fatalf("GC removed %v, kept %v", rep.Removed, rep.Kept)
	}
	if _, err := a.Read(*other.Ref); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read of a collected output: %v", err)
	}
}

// The file semantics artifacts rely on: create-new, link refusing an
// existing name, rename replacing, a directory as a prefix, remove.
func TestFilesSemantics(t *testing.T) {
	f := openLog(t, testDSN(t), "a", fleet.Options{}).Files()
	w, err := f.Create("/d/x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Create("/d/x"); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second create: %v", err)
	}
	if _, err := w.WriteAt([]byte("hello"), 2); err != nil {
		t.Fatal(err)
	}
	if size, err := f.Stat("/d/x"); err != nil || size != 0 {
		t.Fatalf("size before sync: %d %v", size, err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if b, err := vfs.ReadFile(f, "/d/x", 100); err != nil || string(b) != "\x00\x00hello" {
		t.Fatalf("read back %q %v", b, err)
	}
	if err := f.Link("/d/x", "/d/y"); err != nil {
		t.Fatal(err)
	}
	if err := f.Link("/d/x", "/d/y"); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("link over a name: %v", err)
	}
	if err := f.Link("/d/none", "/d/z"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("link of nothing: %v", err)
	}
	if err := vfs.WriteFileAtomic(f, "/d/sub/r", []byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := f.Rename("/d/sub/r", "/d/x"); err != nil {
		t.Fatal(err)
	}
	if names, err := f.ReadDir("/d"); err != nil || strings.Join(names, ",") != "x,y" {
		t.Fatalf("ReadDir: %v %v", names, err)
	}
	if info, err := f.Lstat("/d"); err != nil || !info.Dir {
		t.Fatalf("Lstat of a directory: %+v %v", info, err)
	}
	if err := f.Remove("/d"); err == nil {
		t.Fatal("removed a directory that holds files")
	}
	for _, n := range []string{"/d/x", "/d/y"} {
		if err := f.Remove(n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.Lstat("/d"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Lstat of an emptied directory: %v", err)
	}
}
