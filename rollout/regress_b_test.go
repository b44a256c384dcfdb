package rollout

import (
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"

	"github.com/rolloutdb/rolloutdb/vfs"
)

// lossyFS models assumption 5 on top of vfs.MemFS: a failed fsync drops the dirty
// pages it was flushing (marks them clean); a later successful fsync does not
// write them. On Linux the writeback error is reported (errseq) to whichever
// fsync on the open file description checks first.
type lossyFS struct {
	*vfs.MemFS
	syncHook  func(n int) error // n counts Syncs of the rollout
	writeHook func(n int) error // n counts writes of the rollout
	mu        sync.Mutex
	syncs     int
	writes    int
}

type lossyFile struct {
	vfs.File
	fs *lossyFS
}

func (l *lossyFS) OpenRW(name string) (vfs.File, error) {
	f, err := l.MemFS.OpenRW(name)
	if err != nil {
		return nil, err
	}
	return &lossyFile{File: f, fs: l}, nil
}

func (f *lossyFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	f.fs.writes++
	n := f.fs.writes
	f.fs.mu.Unlock()
	if f.fs.writeHook != nil {
		if err := f.fs.writeHook(n); err != nil {
			return 0, err
		}
	}
	return f.File.WriteAt(p, off)
}

func (f *lossyFile) Sync() error {
	f.fs.mu.Lock()
	f.fs.syncs++
	n := f.fs.syncs
	f.fs.mu.Unlock()
	var err error
	if f.fs.syncHook != nil {
		err = f.fs.syncHook(n)
	}
	if err != nil {
		return f.fs.LoseSync(f.File, err)
	}
	return f.File.Sync()
}

// Append A leads an fsync; while it runs, Append B's write fails and B's
// recovery (truncate + fsync) runs concurrently on the same file. The
// writeback error that dropped A's frame is reported to B's fsync; A's fsync
// returns success. A is acknowledged, and its record is gone after a crash.
func TestReviewConcurrentRecoverySyncAcksLostFrame(t *testing.T) {
	mem := vfs.NewMemFS()
	w0, path := newRollout(t, mem, "/d", "t1", Options{})
	w0.Close()

	aInSync := make(chan struct{})
	bDone := make(chan struct{})
	lfs := &lossyFS{MemFS: mem}
	lfs.syncHook = func(n int) error {
		switch n {
		case 1: // Open's sync
			return nil
		case 2: // A's group-commit fsync: blocks until B's recovery is over
			close(aInSync)
			<-bDone
			return nil // the error was consumed by B's fsync
		case 3: // B's recovery fsync: sees the writeback error
			return syscall.EIO
		}
		return nil
	}
	lfs.writeHook = func(n int) error {
		if n == 2 { // B's frame
			return syscall.ENOSPC
		}
		return nil
	}
	w, _, err := Open(bg, path, "t1", Options{FS: lfs})
	if err != nil {
		t.Fatal(err)
	}
	var resA AppendResult
	var errA error
	done := make(chan struct{})
	go func() {
		resA, errA = w.Append(bg, []Record{itemRec(t, "a", "record A")}, AppendOptions{})
		close(done)
	}()
	<-aInSync
	// B's append runs while A's fsync is in flight. The writer must not
	// start B's cut (and its fsync) until A's fsync is over, so B waits:
	// run it beside A and let A's fsync finish.
	var errB error
	bRan := make(chan struct{})
	go func() {
		_, errB = w.Append(bg, []Record{itemRec(t, "b", "record B")}, AppendOptions{})
		close(bRan)
	}()
	close(bDone)
	<-done
	<-bRan
	t.Logf("B: %v", errB)
	t.Logf("A: res=%+v err=%v", resA, errA)
	if errC := w.Close(); errC != nil {
		t.Logf("close: %v", errC)
	}
	if errA != nil {
		return
	}
	after := mem.Crash(rand.New(rand.NewPCG(1, 2)), false)
	f, _ := after.Open(path)
	size, _ := f.Size()
	r, err := NewReader(f, size, ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for r.Next() {
		got = append(got, r.Record().Seq)
	}
	t.Logf("after crash: seqs %v zeroTail=%d torn=%v", got, r.ZeroTail(), r.TornTail())
	if r.LastSeq() < resA.LastSeq {
		t.Errorf("acknowledged seq %d lost", resA.LastSeq)
	}
}

// Same race, vfs.FaultFS only (no data-loss model): A's fsync fails after B's
// recovery fsync bumped synced past A's frame; A is acknowledged although
// the only fsync that covered its frame when it was written failed.
func TestReviewFailedLeaderSyncAckedViaRecovery(t *testing.T) {
	mem := vfs.NewMemFS()
	w0, path := newRollout(t, mem, "/d", "t1", Options{})
	w0.Close()
	aInSync := make(chan struct{})
	bDone := make(chan struct{})
	var mu sync.Mutex
	syncs, writes := 0, 0
	ffs := &vfs.FaultFS{FS: mem, Hook: func(op vfs.Op, name string) error {
		mu.Lock()
		defer mu.Unlock()
		switch op {
		case vfs.OpSync:
			syncs++
			if syncs == 2 {
				mu.Unlock()
				close(aInSync)
				<-bDone
				mu.Lock()
				return syscall.EIO
			}
		case vfs.OpWrite:
			writes++
			if writes == 2 {
				return syscall.ENOSPC
			}
		}
		return nil
	}}
	w, _, err := Open(bg, path, "t1", Options{FS: ffs})
	if err != nil {
		t.Fatal(err)
	}
	var errA error
	done := make(chan struct{})
	go func() {
		_, errA = w.Append(bg, []Record{itemRec(t, "a", "record A")}, AppendOptions{})
		close(done)
	}()
	<-aInSync
	var errB error
	bRan := make(chan struct{})
	go func() {
		_, errB = w.Append(bg, []Record{itemRec(t, "b", "record B")}, AppendOptions{})
		close(bRan)
	}()
	close(bDone)
	<-done
	<-bRan
	t.Logf("B: %v\nA: %v", errB, errA)
	if errA == nil {
		t.Errorf("A acknowledged although its group-commit fsync failed (EIO)")
	}
	w.Close()
}
