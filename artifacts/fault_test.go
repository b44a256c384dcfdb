package artifacts

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/vfs"
)

// faultStore is a store on an in-memory file system whose operations a
// test can fail.
func faultStore(t *testing.T) (*Store, *vfs.MemFS, *vfs.FaultFS) {
	t.Helper()
	mem := vfs.NewMemFS()
	ffs := &vfs.FaultFS{FS: mem}
	root := "/ws/.craft"
	if err := mem.MkdirAll(root); err != nil {
		t.Fatal(err)
	}
	return New(root, Options{SpillAbove: 10, TerminalLogCap: 1 << 10, FS: ffs}), mem, ffs
}

// A spill that fails at any step (a full disk mid-write, a failed fsync, a
// failed link, a failed directory sync) returns the error and leaves no
// artifact a reference could name; once the cause is gone, the same call
// spills the output whole, under its own name.
func TestSpillFailuresLeaveNoArtifact(t *testing.T) {
	enospc := syscall.ENOSPC
	for _, c := range []struct {
		name string
		hook func(op vfs.Op, name string) error
	}{
		{"full disk mid-write", func(op vfs.Op, name string) error {
			if op == vfs.OpWrite {
				return &vfs.ShortWrite{N: 7, Err: enospc}
			}
			return nil
		}},
		{"failed fsync", func(op vfs.Op, name string) error {
			if op == vfs.OpSync {
				return syscall.EIO
			}
			return nil
		}},
		{"failed link", func(op vfs.Op, name string) error {
			if op == vfs.OpLink {
				return enospc
			}
			return nil
		}},
		{"failed directory sync", func(op vfs.Op, name string) error {
			if op == vfs.OpSyncDir {
				return syscall.EIO
			}
			return nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, mem, ffs := faultStore(t)
			out := bytes.Repeat([]byte("output line\n"), 20)
			ffs.Hook = c.hook
			if _, err := s.SpillToolResult("t1", "call-1", out); err == nil {
				t.Fatal("spill succeeded through a failing file system")
			}
			ffs.Hook = nil
			dir := filepath.Join(s.root, ToolResultsDir, "t1")
			names, _ := mem.ReadDir(dir)
			for _, n := range names {
				if n == "call-1.out" && c.name != "failed directory sync" {
					t.Fatalf("a failed spill left %s", n)
				}
				if strings.HasPrefix(n, vfs.TempPrefix) {
					t.Fatalf("a failed spill left its temporary file %s", n)
				}
			}
			res, err := s.SpillToolResult("t1", "call-1", out)
			if err != nil || res.Ref == nil {
				t.Fatalf("retry: %+v %v", res, err)
			}
			got, err := s.Read(*res.Ref)
			if err != nil || !bytes.Equal(got, out) {
				t.Fatalf("read after the retry: %v", err)
			}
			if want := "tool-results/t1/call-1.out"; res.Ref.Path != want {
				t.Fatalf("retried spill at %s, want %s (a retry finds its own file)", res.Ref.Path, want)
			}
			// The retry returned: the artifact survives a power cut, though
			// the first call made its directory and name and failed to sync
			// them (found by the crash harness).
			for seed := range uint64(10) {
				after := New(s.root, Options{FS: mem.Crash(rand.New(rand.NewPCG(seed, 2)), false)})
				if _, err := after.Read(*res.Ref); err != nil {
					t.Fatalf("seed %d: the retried spill lost in a power cut: %v", seed, err)
				}
			}
		})
	}
}

// A spill that returned survives a power cut whole: its bytes, its name and
// the directories above it were synced before it returned.
func TestSpillSurvivesACrash(t *testing.T) {
	for seed := range uint64(20) {
		s, mem, _ := faultStore(t)
		out := bytes.Repeat([]byte("x"), 100+int(seed))
		res, err := s.SpillToolResult("t1", "call", out)
		if err != nil {
			t.Fatal(err)
		}
		att, err := s.PutAttachment(out[:50])
		if err != nil {
			t.Fatal(err)
		}
		after := New(s.root, Options{FS: mem.Crash(rand.New(rand.NewPCG(seed, 1)), false)})
		for _, ref := range []Ref{*res.Ref, att} {
			if _, err := after.Read(ref); err != nil {
				t.Fatalf("seed %d: %s lost in a crash after it was written: %v", seed, ref.Path, err)
			}
		}
	}
}

// A terminal record whose replacement fails (the rename) keeps its last
// saved content: a reader never sees a half-written record.
func TestTerminalRecordSurvivesAFailedSave(t *testing.T) {
	s, _, ffs := faultStore(t)
	if _, err := s.StartTerminal("t1", "term", "make test"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendLog("t1", "term", []byte("building\n")); err != nil {
		t.Fatal(err)
	}
	ffs.Hook = func(op vfs.Op, name string) error {
		if op == vfs.OpRename {
			return syscall.ENOSPC
		}
		return nil
	}
	if _, err := s.EndTerminal("t1", "term", 0); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("end with a failing rename: %v", err)
	}
	ffs.Hook = nil
	ts, err := s.Terminals("t1")
	if err != nil || len(ts) != 1 || ts[0].Status != TerminalRunning {
		t.Fatalf("after a failed save: %+v %v", ts, err)
	}
	end, err := s.EndTerminal("t1", "term", 0)
	if err != nil || end.Status != TerminalCompleted || end.Log.Size != int64(len("building\n")) {
		t.Fatalf("end after the cause went: %+v %v", end, err)
	}
}

// An ended terminal's log survives a power cut as its record describes it
// (EndTerminal's doc: its log is synced and its digest recorded).
func TestEndedTerminalLogSurvivesACrash(t *testing.T) {
	for seed := range uint64(10) {
		s, mem, _ := faultStore(t)
		if _, err := s.StartTerminal("t1", "term", "make test"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AppendLog("t1", "term", []byte("building\nok\n")); err != nil {
			t.Fatal(err)
		}
		end, err := s.EndTerminal("t1", "term", 0)
		if err != nil {
			t.Fatal(err)
		}
		after := New(s.root, Options{FS: mem.Crash(rand.New(rand.NewPCG(seed, 3)), false)})
		if b, err := after.Read(end.Log); err != nil || string(b) != "building\nok\n" {
			t.Fatalf("seed %d: the ended terminal's log after a power cut: %q %v", seed, b, err)
		}
	}
}

// GC goes by the file system's own modification times: a temporary file a
// crash left is removed once older than the grace period, and an
// unreferenced output only then.
func TestGCGoesByModificationTimes(t *testing.T) {
	s, mem, _ := faultStore(t)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	mem.SetClock(func() time.Time { return now })
	s.opts.Now = func() time.Time { return now }
	res, err := s.SpillToolResult("t1", "call", bytes.Repeat([]byte("y"), 100))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(s.root, ToolResultsDir, "t1")
	if _, err := vfs.WriteTemp(mem, dir, []byte("left by a crash")); err != nil {
		t.Fatal(err)
	}
	o := GCOptions{Threads: map[string]bool{"t1": true}, Grace: time.Hour}
	rep, err := s.GC(o)
	if err != nil || len(rep.Removed) != 0 || len(rep.Kept) != 2 {
		t.Fatalf("GC of young files: %+v %v", rep, err)
	}
	now = now.Add(2 * time.Hour)
	rep, err = s.GC(o)
	if err != nil || len(rep.Removed) != 2 {
		t.Fatalf("GC of old files: %+v %v", rep, err)
	}
	whys := map[string]bool{}
	for _, e := range rep.Removed {
		whys[e.Why] = true
	}
	if !whys[WhyTempLeft] || !whys[WhyUnreferenced] {
		t.Fatalf("removed for %v, want a temporary file and an unreferenced output", whys)
	}
	if _, err := s.Read(*res.Ref); err == nil {
		t.Fatal("the unreferenced output is still readable after GC")
	}
}

// A link planted where an artifact directory should be is not followed by
// GC: nothing outside the data directory is removed. (From a review: the
// walk over vfs followed a linked top directory.)
func TestGCDoesNotFollowALinkedArtifactDirectory(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "keep.out")
	if err := os.WriteFile(victim, []byte("not ours"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(victim, old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, ToolResultsDir)); err != nil {
		t.Fatal(err)
	}
	s := New(root, Options{})
	if _, err := s.GC(GCOptions{Grace: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("GC removed a file outside the data directory through a link: %v", err)
	}
}
