package rollout

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/vfs"
	"pgregory.net/rapid"
)

func TestConcurrentAppenders(t *testing.T) {
	for _, pol := range []SyncPolicy{SyncAlways, SyncNever, SyncInterval(time.Millisecond)} {
		t.Run(pol.String(), func(t *testing.T) {
			dir := t.TempDir()
			w, path := newRollout(t, vfs.OS, dir, "t1", Options{Sync: pol})
			const writers, each = 16, 40
			var wg sync.WaitGroup
			var mu sync.Mutex
			acked := map[uint64]string{}
			for g := 0; g < writers; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < each; i++ {
						text := fmt.Sprintf("g%d-%d", g, i)
						res, err := w.Append(bg, []Record{itemRec(t, "u", text)}, AppendOptions{})
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						acked[res.FirstSeq] = text
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			_, got := readAll(t, mustRead(t, path))
			if len(got) != writers*each+1 {
				t.Fatalf("%d records, want %d", len(got), writers*each+1)
			}
			for i, r := range got {
				if r.Seq != uint64(i+1) {
					t.Fatalf("seq %d at %d: gap or reorder", r.Seq, i)
				}
				if i == 0 {
					continue
				}
				var it Item
				if err := r.Decode(&it); err != nil || it.Text != acked[r.Seq] {
					t.Fatalf("seq %d holds %q, acknowledged %q", r.Seq, it.Text, acked[r.Seq])
				}
			}
		})
	}
}

// countingFS counts fsyncs, to show group commit shares them.
type countingFS struct {
	vfs.FaultFS
	syncs atomic.Int64
}

func TestGroupCommitSharesFsyncs(t *testing.T) {
	cfs := &countingFS{}
	cfs.FS = vfs.OS
	cfs.Hook = func(op vfs.Op, name string) error {
		if op == vfs.OpSync {
			cfs.syncs.Add(1)
			time.Sleep(200 * time.Microsecond) // a slow disk, so appends pile up behind an fsync
		}
		return nil
	}
	dir := t.TempDir()
	w, _ := newRollout(t, &cfs.FaultFS, dir, "t1", Options{})
	before := cfs.syncs.Load()
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if _, err := w.Append(bg, []Record{itemRec(t, "u", "x")}, AppendOptions{}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	n := cfs.syncs.Load() - before
	if n >= 640 || n == 0 {
		t.Fatalf("%d fsyncs for 640 concurrent appends: no group commit", n)
	}
	w.Close()
}

func TestOptimisticConcurrency(t *testing.T) {
	dir := t.TempDir()
	w, path := newRollout(t, vfs.OS, dir, "t1", Options{})
	if _, err := w.Append(bg, []Record{itemRec(t, "u", "a")}, AppendOptions{IfLastSeq: 1}); err != nil {
		t.Fatal(err)
	}
	_, err := w.Append(bg, []Record{itemRec(t, "u", "b")}, AppendOptions{IfLastSeq: 1})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("stale expected seq: %v", err)
	}
	end := w.End()
	if _, err := w.Append(bg, []Record{itemRec(t, "u", "c")}, AppendOptions{IfLastSeq: 2}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	_, got := readAll(t, mustRead(t, path))
	if len(got) != 3 || end == 0 {
		t.Fatalf("conflicting append was written: %d records", len(got))
	}
}

func TestSecondWriterInProcess(t *testing.T) {
	dir := t.TempDir()
	w, path := newRollout(t, vfs.OS, dir, "t1", Options{})
	if _, _, err := Open(bg, path, "t1", Options{}); !errors.Is(err, ErrThreadLocked) {
		t.Fatalf("second writer: %v", err)
	}
	if _, err := Create(bg, path, opened("t1"), Options{}); !errors.Is(err, ErrThreadExists) {
		t.Fatalf("create over existing: %v", err)
	}
	w.Close()
	w2, _, err := Open(bg, path, "t1", Options{})
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	w2.Close()
	if _, _, err := Open(bg, path, "other", Options{}); !errors.Is(err, ErrThreadMismatch) {
		t.Fatalf("wrong thread id: %v", err)
	}
	// No temp files left behind.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries", len(ents))
	}
}

// TestHelperHoldLock is run as a second process by TestSecondWriterOtherProcess.
func TestHelperHoldLock(t *testing.T) {
	path := os.Getenv("ROLLOUT_HOLD_LOCK")
	if path == "" {
		return // only meaningful as the child process
	}
	w, _, err := Open(bg, path, "t1", Options{})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin) // hold until the parent closes stdin
	w.Close()
	os.Exit(0)
}

func TestSecondWriterOtherProcess(t *testing.T) {
	dir := t.TempDir()
	w, path := newRollout(t, vfs.OS, dir, "t1", Options{})
	w.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldLock$")
	cmd.Env = append(os.Environ(), "ROLLOUT_HOLD_LOCK="+path)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "locked" {
		t.Fatalf("child: %q", line)
	}
	_, _, err := Open(bg, path, "t1", Options{})
	if !errors.Is(err, ErrThreadLocked) {
		t.Fatalf("writer beside another process's: %v", err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	w2, _, err := Open(bg, path, "t1", Options{})
	if err != nil {
		t.Fatalf("after the other process exited: %v", err)
	}
	w2.Close()
}

// faultyRollout is a rollout on a vfs.MemFS behind a vfs.FaultFS whose faults a test
// switches on and off.
type faultyRollout struct {
	mem   *vfs.MemFS
	ffs   *vfs.FaultFS
	fault atomic.Value // func(vfs.Op) error
	w     *Writer
	path  string
}

func newFaulty(t *testing.T) *faultyRollout {
	f := &faultyRollout{mem: vfs.NewMemFS()}
	f.fault.Store(func(vfs.Op) error { return nil })
	f.ffs = &vfs.FaultFS{FS: f.mem, Hook: func(op vfs.Op, name string) error { return f.fault.Load().(func(vfs.Op) error)(op) }}
	f.w, f.path = newRollout(t, f.ffs, "/ws/threads/active", "t1", Options{})
	return f
}

func (f *faultyRollout) set(fn func(vfs.Op) error) { f.fault.Store(fn) }

// check reads the file back and asserts it holds exactly the acknowledged
// texts, in order.
func (f *faultyRollout) check(t *testing.T, acked []string) {
	t.Helper()
	file, err := f.mem.Open(f.path)
	if err != nil {
		t.Fatal(err)
	}
	size, _ := file.Size()
	b := make([]byte, size)
	file.ReadAt(b, 0)
	file.Close()
	r, got := readAll(t, b)
	if len(r.Damage()) != 0 || r.TornTail() != nil {
		t.Fatalf("damage after faults: %v %v", r.Damage(), r.TornTail())
	}
	var texts []string
	for _, rec := range got[1:] {
		var it Item
		rec.Decode(&it)
		texts = append(texts, it.Text)
	}
	if strings.Join(texts, ",") != strings.Join(acked, ",") {
		t.Fatalf("file holds %v, acknowledged %v", texts, acked)
	}
	for i, rec := range got {
		if rec.Seq != uint64(i+1) {
			t.Fatalf("seq gap: %v", seqs(got))
		}
	}
}

func TestInjectedFaults(t *testing.T) {
	enospc := &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}
	eio := &os.PathError{Op: "fdatasync", Path: "x", Err: syscall.EIO}
	cases := []struct {
		name    string
		fault   func(vfs.Op) error
		wantErr error
	}{
		{"enospc", func(op vfs.Op) error {
			if op == vfs.OpWrite {
				return enospc
			}
			return nil
		}, syscall.ENOSPC},
		{"short write", func(op vfs.Op) error {
			if op == vfs.OpWrite {
				return &vfs.ShortWrite{N: 30, Err: enospc}
			}
			return nil
		}, syscall.ENOSPC},
		{"failed fsync", func(op vfs.Op) error {
			if op == vfs.OpSync {
				return eio
			}
			return nil
		}, ErrNotDurable},
		{"failed fsync and truncate", func(op vfs.Op) error {
			if op == vfs.OpSync || op == vfs.OpTruncate {
				return eio
			}
			return nil
		}, ErrNotDurable},
		{"short write, then recovery fails", func(op vfs.Op) error {
			switch op {
			case vfs.OpWrite:
				return &vfs.ShortWrite{N: 60, Err: enospc}
			case vfs.OpTruncate:
				return eio
			}
			return nil
		}, syscall.ENOSPC},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFaulty(t)
			var acked []string
			for i := 0; i < 3; i++ {
				if _, err := f.w.Append(bg, []Record{itemRec(t, "u", fmt.Sprint("ok", i))}, AppendOptions{}); err != nil {
					t.Fatal(err)
				}
				acked = append(acked, fmt.Sprint("ok", i))
			}
			f.set(c.fault)
			for i := 0; i < 2; i++ {
				_, err := f.w.Append(bg, []Record{itemRec(t, "u", "failed")}, AppendOptions{})
				if err == nil {
					t.Fatal("append acknowledged under a fault")
				}
				if i == 0 && !errors.Is(err, c.wantErr) {
					t.Fatalf("error %v, want %v", err, c.wantErr)
				}
			}
			f.set(func(vfs.Op) error { return nil })
			for i := 0; i < 2; i++ {
				res, err := f.w.Append(bg, []Record{itemRec(t, "u", fmt.Sprint("after", i))}, AppendOptions{})
				if err != nil {
					t.Fatalf("writer unusable after the fault cleared: %v", err)
				}
				if res.FirstSeq != uint64(len(acked)+2) {
					t.Fatalf("seq %d after fault, want %d", res.FirstSeq, len(acked)+2)
				}
				acked = append(acked, fmt.Sprint("after", i))
			}
			f.check(t, acked)
			if err := f.w.Close(); err != nil {
				t.Fatal(err)
			}
			f.check(t, acked)
		})
	}
}

// Concurrent appenders while fsyncs fail at random: every acknowledged
// record is in the file, nothing unacknowledged is, and the seqs have no
// gaps.
func TestConcurrentAppendsWithFailingSyncs(t *testing.T) {
	f := newFaulty(t)
	var n atomic.Int64
	f.set(func(op vfs.Op) error {
		if op == vfs.OpSync && n.Add(1)%5 == 0 {
			return syscall.EIO
		}
		return nil
	})
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	var failures atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				text := fmt.Sprintf("g%d-%d", g, i)
				if _, err := f.w.Append(bg, []Record{itemRec(t, "u", text)}, AppendOptions{}); err != nil {
					failures.Add(1)
					continue
				}
				mu.Lock()
				acked[text] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	f.set(func(vfs.Op) error { return nil })
	if err := f.w.Close(); err != nil {
		t.Fatal(err)
	}
	file, _ := f.mem.Open(f.path)
	size, _ := file.Size()
	b := make([]byte, size)
	file.ReadAt(b, 0)
	r, got := readAll(t, b)
	if len(r.Damage()) != 0 || r.TornTail() != nil || failures.Load() == 0 {
		t.Fatalf("damage %v torn %v failures %d", r.Damage(), r.TornTail(), failures.Load())
	}
	seen := map[string]bool{}
	for i, rec := range got {
		if rec.Seq != uint64(i+1) {
			t.Fatalf("seq gap at %d", i)
		}
		if i == 0 {
			continue
		}
		var it Item
		rec.Decode(&it)
		if !acked[it.Text] {
			t.Fatalf("unacknowledged record %q in the file", it.Text)
		}
		seen[it.Text] = true
	}
	for text := range acked {
		if !seen[text] {
			t.Fatalf("acknowledged record %q lost", text)
		}
	}
}

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
// recovery (truncate + fsync) runs on the same file. The writeback error
// that dropped A's frame is reported to B's fsync, and A's fsync returns
// success: if A is acknowledged, its record survives a crash.
// From a review: A was acknowledged, and its record was gone after a crash.
func TestWritebackErrorSeenByAConcurrentRecoveryLosesNoAck(t *testing.T) {
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

// The same race on vfs.FaultFS alone (no data-loss model): A's fsync fails
// after B's recovery fsync moved synced past A's frame. A is not
// acknowledged: the only fsync that covered its frame when it was written
// failed.
// From a review: A was acknowledged through B's recovery.
func TestFailedLeaderFsyncIsNotAckedThroughAConcurrentRecovery(t *testing.T) {
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

func TestTooLargeAndClosed(t *testing.T) {
	dir := t.TempDir()
	w, _ := newRollout(t, vfs.OS, dir, "t1", Options{CompressAbove: -1})
	big := Record{Kind: KindItemAppended, Body: make([]byte, MaxFrameSize)}
	if _, err := w.Append(bg, []Record{big}, AppendOptions{}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized record: %v", err)
	}
	if _, err := w.Append(bg, nil, AppendOptions{}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("empty append: %v", err)
	}
	if _, err := w.Append(bg, []Record{{Kind: ""}}, AppendOptions{}); err == nil {
		t.Fatal("record without a kind accepted")
	}
	if w.LastSeq() != 1 {
		t.Fatalf("failed appends consumed seqs: %d", w.LastSeq())
	}
	w.Close()
	if _, err := w.Append(bg, []Record{itemRec(t, "u", "x")}, AppendOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
}

// Property: whatever a crash keeps, every acknowledged record survives
// intact, nothing appears that was not written, the rollout opens, and it
// accepts new appends that read back.
func TestCrashKeepsAcknowledged(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		mem := vfs.NewMemFS()
		dir := "/ws/threads/active"
		mem.MkdirAll(dir)
		path := filepath.Join(dir, "t1.rollout")
		policy := rapid.SampledFrom([]SyncPolicy{SyncAlways, SyncNever}).Draw(rt, "policy")
		w, err := Create(bg, path, opened("t1"), Options{FS: mem, Sync: policy, CompressAbove: rapid.SampledFrom([]int{-1, 64}).Draw(rt, "compress")})
		if err != nil {
			rt.Fatal(err)
		}
		writers := rapid.IntRange(1, 4).Draw(rt, "writers")
		crashAfter := rapid.IntRange(0, 40).Draw(rt, "crashAfter")
		seed := rapid.Uint64().Draw(rt, "seed")

		var mu sync.Mutex
		written := map[string]bool{} // every text ever handed to Append
		acked := map[string]uint64{}
		var count atomic.Int64
		crashed := make(chan *vfs.MemFS, 1)
		var once sync.Once
		crash := func() {
			once.Do(func() { crashed <- mem.Crash(rand.New(rand.NewPCG(seed, 1)), false) })
		}
		var wg sync.WaitGroup
		for g := 0; g < writers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					batch := 1 + i%3
					var recs []Record
					var texts []string
					for j := 0; j < batch; j++ {
						text := fmt.Sprintf("g%d-%d-%d", g, i, j)
						texts = append(texts, text)
						recs = append(recs, itemRec(t, "u", text))
					}
					mu.Lock()
					for _, s := range texts {
						written[s] = true
					}
					mu.Unlock()
					res, err := w.Append(bg, recs, AppendOptions{})
					if err != nil {
						return // crashed
					}
					mu.Lock()
					for j, s := range texts {
						acked[s] = res.FirstSeq + uint64(j)
					}
					mu.Unlock()
					if count.Add(1) >= int64(crashAfter) {
						crash()
					}
				}
			}()
		}
		if crashAfter == 0 {
			crash()
		}
		after := <-crashed
		wg.Wait()

		w2, _, err := Open(bg, path, "t1", Options{FS: after})
		if err != nil {
			rt.Fatalf("rollout unreadable after crash: %v", err)
		}
		res, err := w2.Append(bg, []Record{itemRec(t, "u", "post-crash")}, AppendOptions{})
		if err != nil {
			rt.Fatalf("append after crash: %v", err)
		}
		if err := w2.Close(); err != nil {
			rt.Fatal(err)
		}
		f, _ := after.Open(path)
		size, _ := f.Size()
		b := make([]byte, size)
		f.ReadAt(b, 0)
		_, got := readAll(t, b)
		found := map[string]uint64{}
		for _, rec := range got[1:] {
			var it Item
			if err := rec.Decode(&it); err != nil {
				rt.Fatalf("record %d does not decode: %v", rec.Seq, err)
			}
			if it.Text != "post-crash" && !written[it.Text] {
				rt.Fatalf("record %q was never written", it.Text)
			}
			found[it.Text] = rec.Seq
		}
		if policy == SyncAlways {
			for text, seq := range acked {
				if found[text] != seq {
					rt.Fatalf("acknowledged %q (seq %d) lost: found at %d", text, seq, found[text])
				}
			}
		}
		if found["post-crash"] != res.FirstSeq || got[len(got)-1].Seq != res.FirstSeq {
			rt.Fatalf("post-crash append not last")
		}
	})
}

// Frames written but not synced, a power cut (vfs.MemFS.Crash), then Open and
// one append: nothing acknowledged-durable was lost, so the reopened file
// reads back gapless, with no damage.
// From a review.
func TestOpenAfterACrashLeavesNoSeqGap(t *testing.T) {
	bad, bug1 := 0, 0
	for seed := uint64(0); seed < 500; seed++ {
		mem := vfs.NewMemFS()
		w, path := newRollout(t, mem, "/d", "t1", Options{Sync: SyncNever, CompressAbove: -1})
		for i := 0; i < 4; i++ {
			if _, err := w.Append(bg, []Record{itemRec(t, "a", "some text here to make a payload of a few sectors")}, AppendOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		after := mem.Crash(rand.New(rand.NewPCG(seed, 7)), false)
		w2, rep, err := Open(bg, path, "t1", Options{FS: after})
		if err != nil {
			t.Fatal(err)
		}
		res, err := w2.Append(bg, []Record{itemRec(t, "b", "after")}, AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w2.Close()
		f, _ := after.Open(path)
		size, _ := f.Size()
		r, _ := NewReader(f, size, ReaderOptions{})
		var got []uint64
		for r.Next() {
			got = append(got, r.Record().Seq)
		}
		if rep.TornTail != nil && res.Offset < rep.TornTail.Offset && res.FirstSeq != uint64(len(got)) {
			bug1++
		}
		for i, s := range got {
			if s != uint64(i+1) {
				if bad < 3 {
					t.Logf("seed %d: open damage=%v torn=%v; appended seq %d; reread seqs %v damage %v", seed, rep.Damage, rep.TornTail, res.FirstSeq, got, r.Damage())
				}
				bad++
				break
			}
		}
	}
	t.Logf("%d of 500: Open cut below the reported torn tail and skipped seqs (bug 1)", bug1)
	if bad > 0 {
		t.Errorf("%d of 500 crashes left a seq gap after Open+Append", bad)
	}
}

// Found by the crash harness's fault mode: Create links the new rollout,
// then its directory sync fails (EIO), so Create fails and the name is not
// durable. The host retries: Create says the thread exists, so it opens
// it, and its appends are acknowledged. Open synced the file but not the
// directory, so a power cut then took the whole rollout, acknowledged
// records and all. Open now syncs the directory too.
func TestOpenMakesTheNameOfAFailedCreateDurable(t *testing.T) {
	for seed := uint64(0); seed < 10; seed++ {
		mem := vfs.NewMemFS()
		fail := true
		fs := &vfs.FaultFS{FS: mem, Hook: func(op vfs.Op, name string) error {
			if fail && op == vfs.OpSyncDir {
				return syscall.EIO
			}
			return nil
		}}
		if err := mem.MkdirAll("/ws"); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("/ws", "t1"+RolloutExt)
		if _, err := Create(bg, path, opened("t1"), Options{FS: fs}); err == nil {
			t.Fatal("Create succeeded though its directory sync failed")
		}
		fail = false
		if _, err := Create(bg, path, opened("t1"), Options{FS: fs}); !errors.Is(err, ErrThreadExists) {
			t.Fatalf("Create again: %v, want ErrThreadExists", err)
		}
		w, _, err := Open(bg, path, "t1", Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		res, err := w.Append(bg, []Record{itemRec(t, "u1", "acknowledged")}, AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
		cut := mem.Crash(rand.New(rand.NewPCG(seed, 1)), false)
		f, err := cut.Open(path)
		if err != nil {
			t.Fatalf("seed %d: after a power cut the rollout with an acknowledged append is gone: %v", seed, err)
		}
		size, _ := f.Size()
		b := make([]byte, size)
		f.ReadAt(b, 0)
		f.Close()
		if _, recs := readAll(t, b); len(recs) != 2 || recs[1].Seq != res.LastSeq || !strings.Contains(string(recs[1].Body), "acknowledged") {
			t.Fatalf("seed %d: %d records", seed, len(recs))
		}
	}
}

// Closing right after a failed fsync cuts the unacknowledged frame and
// returns (it once waited forever for a frame that had been abandoned).
func TestCloseAfterFailedSync(t *testing.T) {
	f := newFaulty(t)
	if _, err := f.w.Append(bg, []Record{itemRec(t, "u", "ok")}, AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	f.set(func(op vfs.Op) error {
		if op == vfs.OpSync {
			return syscall.EIO
		}
		return nil
	})
	if _, err := f.w.Append(bg, []Record{itemRec(t, "u", "lost")}, AppendOptions{}); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("append under failing fsync: %v", err)
	}
	f.set(func(vfs.Op) error { return nil })
	if err := f.w.Close(); err != nil {
		t.Fatal(err)
	}
	f.check(t, []string{"ok"})
}

// Under SyncInterval a failed fsync must not rewind the writer: records
// already acknowledged under that policy keep their seqs, and the writer
// refuses everything until the thread is reopened.
// From a review.
func TestSyncIntervalFailureStopsTheWriter(t *testing.T) {
	mem := vfs.NewMemFS()
	w0, path := newRollout(t, mem, "/d", "t1", Options{})
	w0.Close()
	var fail atomic.Bool
	ffs := &vfs.FaultFS{FS: mem, Hook: func(op vfs.Op, name string) error {
		if op == vfs.OpSync && fail.Load() {
			return syscall.EIO
		}
		return nil
	}}
	w, _, err := Open(bg, path, "t1", Options{FS: ffs, Sync: SyncInterval(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i := 0; i < 3; i++ {
		res, err := w.Append(bg, []Record{itemRec(t, "a", "acked")}, AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		last = res.LastSeq
	}
	fail.Store(true)
	if err := w.Sync(bg); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("failed sync: %v", err)
	}
	fail.Store(false)
	if _, err := w.Append(bg, []Record{itemRec(t, "b", "new")}, AppendOptions{}); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("append after a failed interval sync: %v", err)
	}
	if err := w.Close(); err == nil {
		t.Fatal("close after a failed sync reported nothing")
	}
	w, _, err = Open(bg, path, "t1", Options{FS: ffs})
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Append(bg, []Record{itemRec(t, "c", "after reopen")}, AppendOptions{})
	if err != nil || res.FirstSeq != last+1 {
		t.Fatalf("after reopen: seq %d (%v), want %d: a seq was reused or skipped", res.FirstSeq, err, last+1)
	}
	w.Close()
}

// A rollout that is a symbolic link (to a file outside the data
// directory, planted in a cloned repository, say) is never opened through
// the link: neither to write (Open would cut and append to the target)
// nor to read.
func TestSymlinkedRolloutIsRefused(t *testing.T) {
	dir := t.TempDir()
	w, target := newRollout(t, vfs.OS, filepath.Join(dir, "elsewhere"), "t1", Options{})
	w.Close()
	link := filepath.Join(dir, "t1"+RolloutExt)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	before := mustRead(t, target)
	if _, _, err := Open(bg, link, "t1", Options{}); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("Open through a link: %v", err)
	}
	if _, err := vfs.OS.Open(link); err == nil {
		t.Fatal("read through a link")
	}
	if !bytes.Equal(before, mustRead(t, target)) {
		t.Fatal("the link's target changed")
	}
}

// A frame prepared and sealed outside a Writer (a log that keeps frames
// elsewhere, package fleet) is byte for byte the frame the Writer writes
// at the same place, and Created gives the header frame Create wrote.
func TestPrepareFrameSealMatchesWriter(t *testing.T) {
	fsys := vfs.NewMemFS()
	w, path := newRollout(t, fsys, "/d", "t1", Options{CompressAbove: 64})
	res0, rec0, ok := w.Created()
	if !ok || res0.Offset != FileHeaderSize || res0.End != w.End() || rec0.Kind != KindThreadOpened || rec0.Seq != 1 {
		t.Fatalf("Created: %+v %+v %v", res0, rec0, ok)
	}
	for i, text := range []string{"short", strings.Repeat("compressible ", 40)} {
		now := time.Unix(1700000000, 0)
		a, b := itemRec(t, "", text), itemRec(t, "", text)
		b.Body = bytes.Clone(a.Body)
		a.Time, b.Time = now, now
		start, synced := w.End(), w.End()
		res, err := w.Append(bg, []Record{a}, AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := PrepareFrame([]Record{b}, 64, now)
		if err != nil {
			t.Fatal(err)
		}
		frame := p.Seal(w.Header().FileID, res.FirstSeq, synced)
		file, err := vfs.ReadFile(fsys, path, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(frame, file[start:res.End]) || p.DataCRC() != res.DataCRC || p.Size() != int(res.End-start) || p.Records()[0].Seq != res.FirstSeq {
			t.Fatalf("frame %d: sealed frame differs from the written one", i)
		}
		p.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2, _, err := Open(bg, path, "t1", Options{FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if _, _, ok := w2.Created(); ok {
		t.Fatal("an opened writer has a created frame")
	}
}
