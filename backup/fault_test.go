package backup

import (
	"errors"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rolloutdb/rolloutdb/vfs"
)

// inDest reports whether name is in the backup's destination.
func inDest(name string) bool { return name == dest || strings.HasPrefix(name, dest+"/") }

// isManifest reports whether name is the manifest or its temporary file.
func isManifest(name string) bool {
	return filepath.Dir(name) == destData && (filepath.Base(name) == ManifestName || strings.HasPrefix(filepath.Base(name), vfs.TempPrefix))
}

// A backup that fails at any write, fsync or directory sync into the
// destination, or at any step of its manifest's write, returns the
// error, and leaves the backup that was there whole: it verifies, and a
// restore of it is the workspace as it was at that backup (or, once the
// new manifest is in place, as it is now). The next run finishes it.
func TestBackupFailuresKeepThePreviousBackup(t *testing.T) {
	eio := syscall.EIO
	for _, c := range []struct {
		name  string
		fails func(op vfs.Op, name string) bool
		err   error
	}{
		{"write", func(op vfs.Op, name string) bool { return op == vfs.OpWrite && inDest(name) }, eio},
		{"short write on a full disk", func(op vfs.Op, name string) bool { return op == vfs.OpWrite && inDest(name) }, &vfs.ShortWrite{N: 3, Err: syscall.ENOSPC}},
		{"fsync", func(op vfs.Op, name string) bool { return op == vfs.OpSync && inDest(name) }, eio},
		{"directory sync", func(op vfs.Op, name string) bool { return op == vfs.OpSyncDir && inDest(name) }, eio},
		{"rename", func(op vfs.Op, name string) bool { return op == vfs.OpRename && inDest(name) }, eio},
		{"manifest write", func(op vfs.Op, name string) bool { return op != vfs.OpSyncDir && isManifest(name) }, syscall.ENOSPC},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, first := range []bool{true, false} {
				for k := 1; ; k++ {
					s := newWorkspace(t)
					var snaps []map[string]string
					if !first {
						if _, err := Run(bg, s, dest, Options{}); err != nil {
							t.Fatal(err)
						}
						snaps = append(snaps, snapshot(t, s))
						change(t, s)
					}
					now := snapshot(t, s)
					n := 0
					s.ffs.Hook = func(op vfs.Op, name string) error {
						if c.fails(op, name) {
							if n++; n == k {
								return c.err
							}
						}
						return nil
					}
					_, err := Run(bg, s, dest, Options{})
					s.ffs.Hook = nil
					if err == nil {
						if k == 1 {
							t.Fatalf("no %s to fail", c.name)
						}
						t.Logf("first backup %v: failed at each of its %d", first, k-1)
						break // past the last one
					}
					if !errors.Is(err, c.err) && !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "backup") {
						t.Fatalf("failing %s %d (first backup %v): %v, want the cause and what failed", c.name, k, first, err)
					}
					if _, merr := s.mem.Stat(filepath.Join(destData, ManifestName)); merr == nil {
						checkBackup(t, s.ffs, append(snaps, now)...)
					} else if !first {
						t.Fatalf("failing %s %d: the previous manifest is gone: %v", c.name, k, merr)
					}
					if _, err := Run(bg, s, dest, Options{}); err != nil {
						t.Fatalf("the run after failing %s %d: %v", c.name, k, err)
					}
					checkBackup(t, s.ffs, now)
				}
			}
		})
	}
}

// errCut is what the file system says once the power is cut.
var errCut = errors.New("power cut")

// A power cut at any point of a backup (the first into the destination,
// or one into an earlier backup) leaves a manifest that names no file
// missing, short or changed: the earlier backup's, which restores as the
// workspace was then, or the new one. A first backup cut before its
// manifest leaves no manifest, and the next run finishes it; a cut after
// the run returned keeps the new backup whole. The same for a kill of
// the process (what was written survives whole, synced or not).
func TestBackupPowerCut(t *testing.T) {
	for _, c := range []struct{ first, kill bool }{{true, false}, {false, false}, {true, true}, {false, true}} {
		first := c.first
		for n := 1; ; n++ {
			s := newWorkspace(t)
			var snaps []map[string]string
			if !first {
				if _, err := Run(bg, s, dest, Options{}); err != nil {
					t.Fatal(err)
				}
				snaps = append(snaps, snapshot(t, s))
				change(t, s)
			}
			now := snapshot(t, s)
			rng := rand.New(rand.NewPCG(uint64(n), 7))
			var cut *vfs.MemFS
			ops := 0
			s.ffs.Hook = func(op vfs.Op, name string) error {
				if ops++; ops == n {
					cut = s.mem.Crash(rng, c.kill)
				}
				if cut != nil {
					return errCut
				}
				return nil
			}
			_, err := Run(bg, s, dest, Options{})
			returned := cut == nil
			if returned {
				if err != nil {
					t.Fatal(err)
				}
				cut = s.mem.Crash(rng, c.kill)
			}
			after := s.after(cut)
			if _, err := cut.Stat(filepath.Join(destData, ManifestName)); err == nil {
				got := checkBackup(t, after.ffs, append(snaps, now)...)
				if returned && got != len(snaps) {
					t.Fatalf("a power cut after the backup returned: the restore is of the earlier backup")
				}
			} else if !first || returned {
				t.Fatalf("a cut (kill %v) at operation %d of the backup (returned %v) left no manifest: %v", c.kill, n, returned, err)
			}
			if _, err := Run(bg, after, dest, Options{}); err != nil {
				t.Fatalf("the run after a cut (kill %v) at operation %d: %v", c.kill, n, err)
			}
			checkBackup(t, after.ffs, now)
			if returned {
				t.Logf("first backup %v, kill %v: cut at each of its %d operations", first, c.kill, n-1)
				break
			}
		}
	}
}

// A backup that returned survives a power cut: every directory a copy
// was renamed into was synced before the manifest that names it, so the
// manifest never names a copy the cut took away. Without that sync the
// rollouts' and artifacts' names are not durable (only the data
// directory's, synced with the manifest).
func TestBackupSyncsTheDirectoriesItChangedBeforeItsManifest(t *testing.T) {
	for seed := range uint64(5) {
		s := newWorkspace(t)
		if _, err := Run(bg, s, dest, Options{}); err != nil {
			t.Fatal(err)
		}
		first := snapshot(t, s)
		after := s.after(s.mem.Crash(rand.New(rand.NewPCG(seed, 1)), false))
		checkBackup(t, after.ffs, first)

		change(t, after)
		if _, err := Run(bg, after, dest, Options{}); err != nil {
			t.Fatal(err)
		}
		second := snapshot(t, after)
		again := after.after(after.mem.Crash(rand.New(rand.NewPCG(seed, 2)), false))
		checkBackup(t, again.ffs, second)
	}
}
