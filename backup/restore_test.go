package backup

import (
	"errors"
	"math/rand/v2"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/rolloutdb/rolloutdb/vfs"
)

const target = "/restored/w"

// targetState says what is at target: "absent", "empty" (an empty
// directory), or "whole" (exactly the workspace snap); anything else, a
// half workspace, fails the test.
func targetState(t *testing.T, fsys vfs.FS, snap map[string]string) string {
	t.Helper()
	if _, err := fsys.Lstat(target); vfs.IsNotExist(err) {
		return "absent"
	} else if err != nil {
		t.Fatal(err)
	}
	if names, err := fsys.ReadDir(target); err == nil && len(names) == 0 {
		return "empty"
	}
	got := files(t, fsys, filepath.Join(target, ".craft"))
	if !equal(got, snap) {
		t.Fatalf("a half workspace at the target: %v, the backup holds %v", keys(got), keys(snap))
	}
	return "whole"
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v != w {
			return false
		}
	}
	return true
}

// backedUp is a workspace with a backup in dest, and the snapshot of it.
func backedUp(t *testing.T) (*testSource, map[string]string) {
	t.Helper()
	s := newWorkspace(t)
	if _, err := Run(bg, s, dest, Options{}); err != nil {
		t.Fatal(err)
	}
	return s, snapshot(t, s)
}

// A restore that fails at any file-system operation (reading the backup,
// writing, syncing or renaming the copy, the directory syncs, the check's
// reads) returns the error and leaves the target as it was (absent, or
// the empty directory it was) or, if it failed after the rename, whole:
// never a part of the workspace, and nothing beside it. A retry then
// restores it, or refuses a target that is whole already. (A failure to
// open the backup's lock file is passed over: a backup on read-only media
// restores without it.)
func TestRestoreFailuresLeaveNoHalfWorkspace(t *testing.T) {
	for _, empty := range []bool{false, true} {
		setup := func() (*testSource, map[string]string) {
			s, snap := backedUp(t)
			if empty {
				if err := s.mem.MkdirAll(target); err != nil {
					t.Fatal(err)
				}
			}
			return s, snap
		}
		s, _ := setup()
		total := 0
		s.ffs.Hook = func(vfs.Op, string) error { total++; return nil }
		if _, err := Restore(bg, dest, target, checkCopy(s.ffs), RestoreOptions{FS: s.ffs}); err != nil {
			t.Fatal(err)
		}
		failures := 0
		for k := 1; k <= total; k++ {
			s, snap := setup()
			n := 0
			var failed vfs.Op
			var failedOn string
			s.ffs.Hook = func(op vfs.Op, name string) error {
				if n++; n == k {
					failed, failedOn = op, name
					return syscall.EIO
				}
				return nil
			}
			_, err := Restore(bg, dest, target, checkCopy(s.ffs), RestoreOptions{FS: s.ffs})
			s.ffs.Hook = nil
			if err == nil {
				if got := targetState(t, s.mem, snap); got != "whole" || filepath.Base(failedOn) != "backup.lock" {
					t.Fatalf("a restore returned though operation %d (%s %s) failed, and left the target %s", k, failed, failedOn, got)
				}
				continue
			}
			failures++
			if !errors.Is(err, syscall.EIO) {
				t.Fatalf("failing operation %d (%s): %v, want its cause", k, failed, err)
			}
			state := targetState(t, s.mem, snap)
			if state == "empty" && !empty {
				t.Fatalf("failing operation %d (%s) left an empty target", k, failed)
			}
			if names, _ := s.mem.ReadDir(filepath.Dir(target)); len(names) > 1 || len(names) == 1 && names[0] != filepath.Base(target) {
				t.Fatalf("failing operation %d (%s) left %v beside the target", k, failed, names)
			}
			_, err = Restore(bg, dest, target, checkCopy(s.ffs), RestoreOptions{FS: s.ffs})
			if state == "whole" && !errors.Is(err, ErrRestoreTarget) || state != "whole" && err != nil {
				t.Fatalf("a retry after failing operation %d (%s), the target %s: %v", k, failed, state, err)
			}
			if got := targetState(t, s.mem, snap); got != "whole" {
				t.Fatalf("the retry after failing operation %d (%s) left the target %s", k, failed, got)
			}
		}
		t.Logf("target made empty first %v: %d of its %d operations failed it", empty, failures, total)
	}
}

// A power cut (or a kill) at any point of a restore leaves the target
// absent or whole, never a part of it; a restore that returned survives
// it whole (the target's name was synced). A restore after the cut
// succeeds.
func TestRestorePowerCut(t *testing.T) {
	for _, kill := range []bool{false, true} {
		for n := 1; ; n++ {
			s, snap := backedUp(t)
			rng := rand.New(rand.NewPCG(uint64(n), 9))
			var cut *vfs.MemFS
			ops := 0
			s.ffs.Hook = func(op vfs.Op, name string) error {
				if ops++; ops == n {
					cut = s.mem.Crash(rng, kill)
				}
				if cut != nil {
					return errCut
				}
				return nil
			}
			_, err := Restore(bg, dest, target, checkCopy(s.ffs), RestoreOptions{FS: s.ffs})
			returned := cut == nil
			if returned {
				if err != nil {
					t.Fatal(err)
				}
				cut = s.mem.Crash(rng, kill)
			}
			after := s.after(cut)
			state := targetState(t, cut, snap)
			if returned && state != "whole" {
				t.Fatalf("a power cut (kill %v) after the restore returned left the target %s", kill, state)
			}
			if state != "whole" {
				if _, err := Restore(bg, dest, target, checkCopy(after.ffs), RestoreOptions{FS: after.ffs}); err != nil {
					t.Fatalf("a restore after a cut (kill %v) at operation %d: %v", kill, n, err)
				}
				if got := targetState(t, cut, snap); got != "whole" {
					t.Fatalf("the restore after a cut at operation %d left the target %s", n, got)
				}
			}
			if returned {
				t.Logf("kill %v: cut at each of its %d operations", kill, n-1)
				break
			}
		}
	}
}
