package vfs

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Every change to a directory's names gives it a new version; anything
// else (a write to a file in it) does not.
func TestDirVersionChangesWithNames(t *testing.T) {
	dirs := map[string]struct {
		fs  FS
		dir string
	}{
		"os":  {OS, t.TempDir()},
		"mem": {NewMemFS(), "/d"},
	}
	for name, c := range dirs {
		t.Run(name, func(t *testing.T) {
			fsys, dir := c.fs, c.dir
			if err := fsys.MkdirAll(dir); err != nil {
				t.Fatal(err)
			}
			version := func() DirVersion {
				t.Helper()
				v, ok, err := VersionOf(fsys, dir)
				if err != nil || !ok {
					t.Fatalf("VersionOf: %v %v", ok, err)
				}
				return v
			}
			last := version()
			step := func(what string, change bool, fn func() error) {
				t.Helper()
				if name == "os" {
					// Two changes within one tick of the kernel's clock share
					// a timestamp (the racy case Settled guards against):
					// start each step from a timestamp in the past.
					old := time.Now().Add(-time.Hour)
					if err := os.Chtimes(dir, old, old); err != nil {
						t.Fatal(err)
					}
					last = version()
				}
				if err := fn(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				v := version()
				if v.Same(last) == change {
					t.Fatalf("%s: version changed %v, want %v", what, !v.Same(last), change)
				}
				if (v.String() == last.String()) != v.Same(last) {
					t.Fatalf("%s: String disagrees with Same", what)
				}
				last = v
			}
			p := filepath.Join(dir, "a")
			var f File
			step("create", true, func() (err error) { f, err = fsys.Create(p); return err })
			if name == "mem" { // a timestamp may not move within a tick on a real disk: only MemFS is exact here
				step("write", false, func() error { _, err := f.WriteAt([]byte("x"), 0); return err })
			}
			_ = f.Close()
			step("link", true, func() error { return fsys.Link(p, p+".2") })
			step("rename", true, func() error { return fsys.Rename(p+".2", p+".3") })
			step("remove", true, func() error { return fsys.Remove(p + ".3") })
			step("mkdir", true, func() error { return fsys.MkdirAll(filepath.Join(dir, "sub")) })
		})
	}
}

// A real directory's version is not settled right after a change, and is
// RacyWindow later (FineRacyWindow on some: TestRacyWindowFollowsTheFileSystem);
// MemFS's always is.
func TestDirVersionSettles(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	v, _, err := VersionOf(OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	if v.Settled(v.changed.Add(time.Millisecond)) {
		t.Fatal("a directory changed a millisecond ago is settled")
	}
	if !v.Settled(time.Now().Add(RacyWindow + time.Second)) {
		t.Fatal("a directory is not settled RacyWindow after its change")
	}
	mv, _, _ := VersionOf(NewMemFS(), "/")
	if !mv.Settled(time.Now()) {
		t.Fatal("MemFS versions are exact: always settled")
	}
}

// What a crash leaves is a new version (entries may have gone back), and
// two file systems never share one.
func TestMemFSDirVersionAcrossCrash(t *testing.T) {
	m := NewMemFS()
	if err := m.MkdirAll("/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create("/d/a"); err != nil {
		t.Fatal(err)
	}
	before, _, _ := VersionOf(m, "/d")
	after, _, err := VersionOf(m.Crash(rand.New(rand.NewPCG(1, 1)), false), "/d")
	if err != nil {
		t.Fatal(err)
	}
	if after.Same(before) {
		t.Fatal("a crash left the directory's version as it was")
	}
	other := NewMemFS()
	_ = other.MkdirAll("/d")
	_, _ = other.Create("/d/a")
	ov, _, _ := VersionOf(other, "/d")
	if ov.Same(before) {
		t.Fatal("two MemFS share a version")
	}
	// FaultFS passes versions through.
	ff := &FaultFS{FS: other}
	fv, ok, err := VersionOf(ff, "/d")
	if err != nil || !ok || !fv.Same(ov) {
		t.Fatalf("FaultFS version %v %v %v", fv, ok, err)
	}
}
