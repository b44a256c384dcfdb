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
