package journal

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// The tests of this file came from a review of the journal's split from
// the writer: each failed before its fix.

func textRec(t testing.TB, text string) rollout.Record {
	rec, err := rollout.NewRecord(rollout.KindItemAppended, "t", rollout.Item{ID: text, Type: rollout.ItemAgentMessage, Text: text})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// A writer closed after a rollout fsync acknowledged a frame the journal
// had not committed yet still releases it: the journal's segments go.
func TestCloseBeforeTheCommitReleasesTheJournal(t *testing.T) {
	r := newJRig(t, 64<<10)
	w := r.create("a")
	p, err := w.Write(bg, []rollout.Record{textRec(t, "in flight")}, rollout.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.g.SyncAll()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Wait(p); err != nil {
		t.Fatal(err)
	}
	w2 := r.create("b")
	for k := 0; k < 1500; k++ {
		if err := r.appendText(w2, strings.Repeat("x", 200)); err != nil {
			t.Fatal(err)
		}
	}
	r.g.SyncAll()
	if err := r.j.release(); err != nil { // (the maintainer does it too, a moment later)
		t.Fatal(err)
	}
	if n := r.j.Metrics().SealedUnsynced; n > 0 {
		t.Errorf("%d sealed segments kept although every rollout is synced", n)
	}
	_ = w2.Close()
	r.g.Close()
	if err := r.j.Close(); err != nil {
		t.Errorf("journal Close: %v", err)
	}
}

// lossyFS fails the rollouts' fsyncs while armed, as Linux does: the pages
// being flushed are dropped and marked clean (MemFS.LoseSync).
type lossyFS struct {
	*vfs.MemFS
	armed atomic.Bool
}

type lossyFile struct {
	vfs.File
	fs   *lossyFS
	name string
}

func (l *lossyFS) wrap(f vfs.File, name string, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &lossyFile{File: f, fs: l, name: name}, nil
}

func (l *lossyFS) Create(name string) (vfs.File, error) {
	f, err := l.MemFS.Create(name)
	return l.wrap(f, name, err)
}

func (l *lossyFS) OpenRW(name string) (vfs.File, error) {
	f, err := l.MemFS.OpenRW(name)
	return l.wrap(f, name, err)
}

func (f *lossyFile) Sync() error {
	if f.fs.armed.Load() && !strings.Contains(f.name, "/"+Dir+"/") {
		return f.fs.LoseSync(f.File, syscall.EIO)
	}
	return f.File.Sync()
}

// A failed rollout fsync leaves an acknowledged frame clean in the page
// cache: the write-back rewrites it all the same, so that the next fsync
// writes it and a power cut keeps it.
func TestWriteBackRewritesAFrameAFailedFsyncDropped(t *testing.T) {
	mem := vfs.NewMemFS()
	lfs := &lossyFS{MemFS: mem}
	if err := mem.MkdirAll(filepath.Join(jroot, rollout.ActiveDir)); err != nil {
		t.Fatal(err)
	}
	j, err := Open(bg, jroot, Options{FS: mem, SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	g := rollout.NewLogGroup(j)
	path, _ := rollout.ActivePath(jroot, "a")
	w, err := rollout.Create(bg, path, opened("a"), rollout.Options{FS: lfs, Log: g})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(bg, []rollout.Record{textRec(t, "before")}, rollout.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	lfs.armed.Store(true)
	g.SyncAll()
	lfs.armed.Store(false)
	if _, err := w.Append(bg, []rollout.Record{textRec(t, "after")}, rollout.AppendOptions{}); err != nil {
		t.Fatalf("append once the cause is gone: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	g.Close()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	crashed := mem.Crash(rand.New(rand.NewPCG(1, 1)), false)
	if texts := readTexts(t, crashed, path); strings.Join(texts, ",") != "before,after" {
		t.Fatalf("after a power cut the rollout holds %q; both were acknowledged", texts)
	}
}

// A write-back waits for the commit in flight: a frame the journal makes
// durable after the write-back read it is not acknowledged by the
// rollout's fsync that followed without it.
func TestWriteBackWaitsForTheCommitInFlight(t *testing.T) {
	r := newJRig(t, 1<<20)
	w := r.create("a")
	if err := r.appendText(w, "before"); err != nil {
		t.Fatal(err)
	}
	r.g.SyncAll()
	path, _ := rollout.ActivePath(jroot, "a")
	synced := int64(len(readFileFS(t, r.mem, path)))
	p, err := w.Write(bg, []rollout.Record{textRec(t, "A")}, rollout.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	r.ffs.Hook = func(op vfs.Op, name string) error {
		if op == vfs.OpSync && !strings.Contains(name, "/"+Dir+"/") && fail.Load() {
			return syscall.EIO
		}
		return nil
	}
	fail.Store(true)
	r.g.SyncAll()
	fail.Store(false)
	dropUnsynced(t, r, w, synced)
	r.g.SyncAll() // the write-back, while A's commit has not run
	if _, err := w.Wait(p); err != nil {
		t.Fatalf("A: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r.g.Close()
	if err := r.j.Close(); err != nil {
		t.Fatal(err)
	}
	crashed := r.mem.Crash(rand.New(rand.NewPCG(1, 1)), false)
	if texts := readTexts(t, crashed, path); strings.Join(texts, ",") != "before,A" {
		t.Fatalf("after a power cut the rollout holds %q; A was acknowledged", texts)
	}
}

// A frame the rollout's fsync acknowledged before the journal abandoned
// its commit: the next append, once the journal works again, succeeds.
func TestAnAbandonCoveredByARolloutSyncDoesNotFailTheNextAppend(t *testing.T) {
	r := newJRig(t, 1<<20)
	w := r.create("a")
	p, err := w.Write(bg, []rollout.Record{textRec(t, "A")}, rollout.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.g.SyncAll()
	var fail atomic.Bool
	fail.Store(true)
	r.ffs.Hook = func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.Contains(name, "/"+Dir+"/") && fail.Swap(false) {
			return syscall.EIO
		}
		return nil
	}
	if _, err := w.Wait(p); err != nil {
		t.Fatalf("A: %v", err)
	}
	if err := r.appendText(w, "B"); err != nil {
		t.Errorf("B, appended after the journal recovered: %v", err)
	}
	_ = w.Close()
}

// After the journal abandoned a frame, a Sync that returns nil does not
// cut a large frame written after it.
func TestAStaleTicketDoesNotCutALaterLargeFrame(t *testing.T) {
	r := newJRig(t, 256<<10)
	w := r.create("a")
	var fail atomic.Bool
	r.ffs.Hook = func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.Contains(name, "/"+Dir+"/") && fail.Swap(false) {
			return syscall.EIO
		}
		return nil
	}
	fail.Store(true)
	if err := r.appendText(w, "failed"); err == nil {
		t.Fatal("append over a failed journal sync succeeded")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 200<<10)
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	p, err := w.Write(bg, []rollout.Record{textRec(t, string(b))}, rollout.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(bg); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if _, err := w.Wait(p); err != nil {
		t.Errorf("large frame, written before a Sync that returned nil: %v", err)
	}
	_ = w.Close()
}

// An entry whose commit failed is zeroed before its append returns: a
// process killed right after (the page cache survives) leaves nothing for
// the replay to bring back.
func TestAnAbandonedEntryIsNotReplayedAfterAKill(t *testing.T) {
	r := newJRig(t, 1<<20)
	w := r.create("a")
	if err := r.appendText(w, "before"); err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	r.ffs.Hook = func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.Contains(name, "/"+Dir+"/") && fail.Swap(false) {
			return syscall.EIO
		}
		return nil
	}
	fail.Store(true)
	if err := r.appendText(w, "failed"); err == nil {
		t.Fatal("append over a failed journal sync succeeded")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r.check(r.mem.Crash(rand.New(rand.NewPCG(1, 1)), true)) // killed, the journal not closed
}
