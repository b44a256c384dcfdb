package vfs

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// A failed Sync drops the pages it was flushing (LoseSync): a later good
// Sync does not write them, so a power cut leaves zeros there. Pages
// written again after the failure are dirty again, and the good Sync
// writes them (Linux re-dirties a rewritten page); a truncate takes what
// lay past it with it.
func TestLoseSyncDropsOnlyWhatIsNotWrittenAgain(t *testing.T) {
	m := NewMemFS()
	if err := m.MkdirAll("/d"); err != nil {
		t.Fatal(err)
	}
	f, err := m.Create("/d/f")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("aaaaaaaaaa"), 0); err != nil {
		t.Fatal(err)
	}
	eio := errors.New("EIO")
	if err := m.LoseSync(f, eio); err != eio {
		t.Fatalf("LoseSync: %v", err)
	}
	if _, err := f.WriteAt([]byte("bbb"), 2); err != nil { // rewritten: dirty again
		t.Fatal(err)
	}
	if err := f.Truncate(8); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("cc"), 8); err != nil { // past the truncate: new data
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	after := m.Crash(rand.New(rand.NewPCG(1, 1)), false)
	got, err := ReadFile(after, "/d/f", 100)
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte("\x00\x00bbb\x00\x00\x00cc"); !bytes.Equal(got, want) {
		t.Fatalf("after the power cut: %q, want %q", got, want)
	}
}

// A directory renamed keeps its files (and their durable entries), and
// its new name survives a power cut only once its parent is synced: before
// that, the cut puts it back under its old name, with a directory renamed
// inside it back inside it.
func TestMemFSRenamesADirectory(t *testing.T) {
	setup := func(t *testing.T) *MemFS {
		m := NewMemFS()
		for _, d := range []string{"/p/.tmp/a/sub", "/p/other"} {
			if err := m.MkdirAll(d); err != nil {
				t.Fatal(err)
			}
		}
		if err := WriteFileAtomic(m, "/p/.tmp/a/sub/f", []byte("data")); err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := setup(t)
	if err := m.Rename("/p/.tmp", "/p/other"); !IsExist(err) {
		t.Fatalf("rename over a directory: %v, want fs.ErrExist", err)
	}
	if err := m.Rename("/p/.tmp", "/p/.tmp/a/in"); err == nil {
		t.Fatal("renamed a directory into itself")
	}
	if err := m.Rename("/p/.tmp/a/sub", "/p/.tmp/a/sub2"); err != nil { // inside, not synced either
		t.Fatal(err)
	}
	if err := m.Rename("/p/.tmp", "/p/target"); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(m, "/p/target/a/sub2/f", 10); err != nil || string(b) != "data" {
		t.Fatalf("after the rename: %q %v", b, err)
	}
	if _, err := m.Lstat("/p/.tmp"); !IsNotExist(err) {
		t.Fatalf("the old name after the rename: %v", err)
	}
	after := m.Crash(rand.New(rand.NewPCG(1, 1)), false)
	if b, err := ReadFile(after, "/p/.tmp/a/sub/f", 10); err != nil || string(b) != "data" {
		t.Fatalf("a power cut before the parent's sync: the old names hold %q %v", b, err)
	}
	if _, err := after.Lstat("/p/target"); !IsNotExist(err) {
		t.Fatalf("a power cut before the parent's sync kept the new name: %v", err)
	}

	m = setup(t)
	if err := m.Rename("/p/.tmp", "/p/target"); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("/p"); err != nil {
		t.Fatal(err)
	}
	after = m.Crash(rand.New(rand.NewPCG(1, 1)), false)
	if b, err := ReadFile(after, "/p/target/a/sub/f", 10); err != nil || string(b) != "data" {
		t.Fatalf("a power cut after the parent's sync: %q %v", b, err)
	}
}

// Remove takes an empty directory and refuses one that holds anything;
// RemoveAll takes a tree.
func TestMemFSRemovesDirectories(t *testing.T) {
	m := NewMemFS()
	if err := m.MkdirAll("/d/e/f"); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(m, "/d/e/x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove("/d/e"); err == nil {
		t.Fatal("removed a directory that holds a file and a directory")
	}
	if err := m.Remove("/d/e/f"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lstat("/d/e/f"); !IsNotExist(err) {
		t.Fatalf("the removed directory: %v", err)
	}
	if err := RemoveAll(m, "/d"); err != nil {
		t.Fatal(err)
	}
	if names, err := m.ReadDir("/"); err != nil || len(names) != 0 {
		t.Fatalf("after RemoveAll: %v %v", names, err)
	}
	if err := RemoveAll(m, "/d"); err != nil {
		t.Fatalf("RemoveAll of what is not there: %v", err)
	}
}
