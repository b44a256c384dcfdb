package artifacts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newStore(t *testing.T) (*Store, *clock) {
	c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	return New(t.TempDir(), Options{SpillAbove: 100, PreviewBytes: 120, PreviewLines: 3, TerminalLogCap: 50, Now: c.now}), c
}

func lines(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "line %03d of the output\n", i)
	}
	return b.Bytes()
}

func TestSpillToolResult(t *testing.T) {
	s, _ := newStore(t)
	small, err := s.SpillToolResult("t1", "call-1", []byte("ok\n"))
	if err != nil || small.Ref != nil || small.Preview != "ok\n" {
		t.Fatalf("small output: %+v %v", small, err)
	}
	out := lines(200)
	res, err := s.SpillToolResult("t1", "call-2", out)
	if err != nil || res.Ref == nil {
		t.Fatalf("large output: %+v %v", res, err)
	}
	if res.Ref.Path != "tool-results/t1/call-2.out" || res.Ref.Size != int64(len(out)) {
		t.Fatalf("ref: %+v", res.Ref)
	}
	if !strings.HasPrefix(res.Preview, "line 000") || !strings.HasSuffix(res.Preview, "line 199 of the output\n") ||
		!strings.Contains(res.Preview, "omitted") || len(res.Preview) > 120+60 {
		t.Fatalf("preview (%d bytes):\n%s", len(res.Preview), res.Preview)
	}
	back, err := s.Read(*res.Ref)
	if err != nil || !bytes.Equal(back, out) {
		t.Fatalf("read back: %v", err)
	}
	// A retried call finds its own file; other bytes under the same call
	// id never overwrite it.
	again, err := s.SpillToolResult("t1", "call-2", out)
	if err != nil || *again.Ref != *res.Ref {
		t.Fatalf("retry: %+v %v", again.Ref, err)
	}
	other, err := s.SpillToolResult("t1", "call-2", lines(300))
	if err != nil || other.Ref.Path != "tool-results/t1/call-2-2.out" {
		t.Fatalf("different bytes, same call: %+v %v", other.Ref, err)
	}
	if back, _ := s.Read(*res.Ref); !bytes.Equal(back, out) {
		t.Fatal("the first output was overwritten")
	}
}

func TestPreviewNeverSplitsCharacters(t *testing.T) {
	text := strings.Repeat("日本語のテキスト\n", 40)
	p := Preview([]byte(text), 3, 100)
	if !utf8.ValidString(p) || !strings.Contains(p, "omitted") {
		t.Fatalf("preview: %q", p)
	}
	if p := Preview([]byte("short"), 3, 100); p != "short" {
		t.Fatalf("short text: %q", p)
	}
	one := bytes.Repeat([]byte("x"), 1000) // one long line
	if p := Preview(one, 3, 100); len(p) > 160 || !strings.Contains(p, "omitted") {
		t.Fatalf("one long line: %d bytes: %q", len(p), p)
	}
}

func TestReadChecksReferences(t *testing.T) {
	s, _ := newStore(t)
	res, err := s.SpillToolResult("t1", "c", lines(50))
	if err != nil {
		t.Fatal(err)
	}
	ref := *res.Ref
	for _, bad := range []Ref{
		{Path: "../outside", Size: 1, SHA256: ref.SHA256},
		{Path: "/etc/passwd", Size: 1, SHA256: ref.SHA256},
		{Path: "tool-results/../../x", Size: 1, SHA256: ref.SHA256},
		{Path: "threads/active/t1.rollout", Size: 1, SHA256: ref.SHA256},
		{Path: `tool-results\t1\c.out`, Size: 1, SHA256: ref.SHA256},
	} {
		if _, err := s.Read(bad); !errors.Is(err, ErrPathEscape) {
			t.Errorf("Read(%q): %v", bad.Path, err)
		}
	}
	// Tampered bytes, a lying size, a lying digest.
	path := filepath.Join(s.root, filepath.FromSlash(ref.Path))
	b, _ := os.ReadFile(path)
	b[10] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(ref); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("tampered: %v", err)
	}
	if _, err := s.Read(Ref{Path: ref.Path, Size: 1 << 40, SHA256: ref.SHA256}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("huge claimed size: %v", err)
	}
	// Names that would leave their directory are refused before any write.
	for _, name := range []string{"../x", "a/b", "", ".hidden", "x..y"} {
		if _, err := s.SpillToolResult(name, "c", lines(50)); !errors.Is(err, ErrInvalidName) {
			t.Errorf("thread %q: %v", name, err)
		}
		if _, err := s.SpillToolResult("t1", name, lines(50)); !errors.Is(err, ErrInvalidName) {
			t.Errorf("call %q: %v", name, err)
		}
	}
}

func TestAttachmentsAreStoredOnce(t *testing.T) {
	s, _ := newStore(t)
	a, err := s.PutAttachment([]byte("png bytes"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.PutAttachment([]byte("png bytes"))
	if err != nil || a != b || !strings.HasPrefix(a.Path, "attachments/"+a.SHA256[:2]+"/") {
		t.Fatalf("dedupe: %+v %+v %v", a, b, err)
	}
	files, _ := filepath.Glob(filepath.Join(s.root, AttachmentsDir, "*", "*"))
	if len(files) != 1 {
		t.Fatalf("%d files for one attachment", len(files))
	}
}

func TestTerminals(t *testing.T) {
	s, c := newStore(t)
	if _, err := s.StartTerminal("t1", "term-1", "go test ./..."); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartTerminal("t1", "term-1", "again"); err == nil {
		t.Fatal("a terminal id started twice")
	}
	n, err := s.AppendLog("t1", "term-1", bytes.Repeat([]byte("a"), 30))
	if err != nil || n != 30 {
		t.Fatal(n, err)
	}
	n, err = s.AppendLog("t1", "term-1", bytes.Repeat([]byte("b"), 30)) // over the cap of 50
	if err != nil || n != 20 {
		t.Fatal(n, err)
	}
	done, err := s.EndTerminal("t1", "term-1", 0)
	if err != nil || done.Status != TerminalCompleted || done.Log.Size != 50 || !done.Truncated || *done.ExitCode != 0 {
		t.Fatalf("ended: %+v %v", done, err)
	}
	if log, err := s.Read(done.Log); err != nil || len(log) != 50 {
		t.Fatalf("log: %d bytes %v", len(log), err)
	}
	// A terminal still running when its host went away is lost at open.
	if _, err := s.StartTerminal("t2", "term-2", "sleep 1000"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartTerminal("t2", "term-3", "tail -f"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartTerminal("t3", "term-5", "make watch"); err != nil {
		t.Fatal(err)
	}
	// t3 is held by a live host elsewhere: its terminal may be running.
	lost, err := s.MarkLost(func(thread string) bool { return thread == "t3" })
	if err != nil || len(lost) != 2 || lost[0].Status != TerminalLost {
		t.Fatalf("lost: %+v %v", lost, err)
	}
	if ts, _ := s.Terminals("t3"); len(ts) != 1 || ts[0].Status != TerminalRunning {
		t.Fatalf("a live host's terminal was marked: %+v", ts)
	}
	if _, err := s.EndTerminal("t3", "term-5", 0); err != nil {
		t.Fatal(err)
	}
	// Retention: completed and lost go after 7 days; running never.
	if _, err := s.StartTerminal("t2", "term-4", "server"); err != nil {
		t.Fatal(err)
	}
	c.t = c.t.Add(6 * 24 * time.Hour)
	if gone, _ := s.SweepTerminals(); len(gone) != 0 {
		t.Fatalf("swept early: %+v", gone)
	}
	c.t = c.t.Add(2 * 24 * time.Hour)
	gone, err := s.SweepTerminals()
	if err != nil || len(gone) != 4 {
		t.Fatalf("swept %d: %+v %v", len(gone), gone, err)
	}
	left, _ := s.Terminals("")
	if len(left) != 1 || left[0].ID != "term-4" || left[0].Status != TerminalRunning {
		t.Fatalf("left: %+v", left)
	}
}

// The sweep trusts a terminal record only for the thread whose directory
// holds it: a record under terminals/a/ that names thread "b" (tampered, or
// copied between threads) does not make it remove thread b's terminal,
// which is still running.
// From a review: the sweep removed thread b's running terminal.
func TestSweepIgnoresARecordNamingAnotherThread(t *testing.T) {
	s, c := newStore(t)
	if _, err := s.StartTerminal("b", "term", "server"); err != nil {
		t.Fatal(err)
	}
	ended := c.t.Add(-30 * 24 * time.Hour)
	code := 0
	forged := Terminal{ID: "term", Thread: "b", Command: "ls", Status: TerminalCompleted, StartedAt: ended, EndedAt: &ended, ExitCode: &code}
	b, _ := json.Marshal(forged)
	if err := os.MkdirAll(filepath.Join(s.root, TerminalsDir, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.root, TerminalsDir, "a", "term.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SweepTerminals(); err != nil {
		t.Logf("sweep: %v", err)
	}
	left, _ := s.Terminals("b")
	if len(left) != 1 || left[0].Status != TerminalRunning {
		t.Fatalf("thread b's running terminal was swept through another thread's record: %+v", left)
	}
}

func TestGCKeepsWhatIsReferenced(t *testing.T) {
	s, c := newStore(t)
	keep, _ := s.SpillToolResult("t1", "keep", lines(50))
	drop, _ := s.SpillToolResult("t1", "drop", lines(60))
	orphan, _ := s.SpillToolResult("gone", "x", lines(70))
	att, _ := s.PutAttachment([]byte("attached"))
	unused, _ := s.PutAttachment([]byte("no longer attached"))
	if _, err := s.StartTerminal("gone", "term", "ls"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartTerminal("t1", "term", "ls"); err != nil {
		t.Fatal(err)
	}
	refs := map[string]bool{keep.Ref.Path: true, att.Path: true}
	threads := map[string]bool{"t1": true}
	// Everything is younger than the grace period: nothing goes yet.
	rep, err := s.GC(GCOptions{Referenced: refs, Threads: threads})
	if err != nil || len(rep.Removed) != 0 {
		t.Fatalf("young files removed: %+v %v", rep, err)
	}
	c.t = c.t.Add(2 * time.Hour)
	ageAll(t, s.root, c.t.Add(-90*time.Minute))
	dry, err := s.GC(GCOptions{Referenced: refs, Threads: threads, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	rep, err = s.GC(GCOptions{Referenced: refs, Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(dry.Removed) != fmt.Sprint(rep.Removed) {
		t.Fatalf("dry run %+v, run %+v", dry.Removed, rep.Removed)
	}
	removed := map[string]string{}
	for _, e := range rep.Removed {
		removed[e.Path] = e.Why
	}
	want := map[string]string{
		drop.Ref.Path:              WhyUnreferenced,
		orphan.Ref.Path:            WhyThreadGone,
		unused.Path:                WhyUnreferenced,
		"terminals/gone/term.json": WhyThreadGone,
		"terminals/gone/term.log":  WhyThreadGone,
	}
	if fmt.Sprint(removed) != fmt.Sprint(want) {
		t.Fatalf("removed %v\nwant %v", removed, want)
	}
	for _, ref := range []Ref{*keep.Ref, att} {
		if _, err := s.Read(ref); err != nil {
			t.Fatalf("GC removed a referenced artifact: %v", err)
		}
	}
}

// ageAll sets every file's modification time, as if written long ago.
func ageAll(t *testing.T, root string, when time.Time) {
	t.Helper()
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			err = os.Chtimes(p, when, when)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
