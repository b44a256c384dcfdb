package main

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// Library bugs the harness found that are fixed, reduced to a few calls.

// TestOpenThreadAfterFailedCreateDirSync: CreateThread fails when
// the directory sync after linking the new rollout fails (EIO). The rollout
// is linked but its name is not durable. The host retries: CreateThread
// says ErrThreadExists ("open the existing thread instead"), OpenThread
// succeeds, and appends are acknowledged. rollout.Open syncs the file but
// not the directory, so nothing ever made the name durable: a power cut
// took the whole rollout, acknowledged records included. (Found by the
// fault mode: "created (acknowledged) but its rollout is gone". Fixed in
// fd9a100: rollout.Open syncs the directory too. This is the host's view
// of it.)
func TestOpenThreadAfterFailedCreateDirSync(t *testing.T) {
	ctx := context.Background()
	mem := rollout.NewMemFS()
	fail := true
	ffs := &rollout.FaultFS{FS: mem, Hook: func(op rollout.Op, name string) error {
		if fail && op == rollout.OpSyncDir && strings.HasSuffix(name, rollout.ActiveDir) {
			return syscall.EIO
		}
		return nil
	}}
	db, err := rolloutdb.Open(ctx, "/ws", rolloutdb.Options{FS: ffs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "t1"}); err == nil {
		t.Fatal("CreateThread succeeded though its directory sync failed")
	}
	fail = false // the fault clears
	if _, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "t1"}); !errors.Is(err, rollout.ErrThreadExists) {
		t.Fatalf("CreateThread again: %v, want ErrThreadExists", err)
	}
	th, err := db.OpenThread(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "acknowledged"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := turn.Commit(ctx, rolloutdb.Commit{}); err != nil {
		t.Fatal(err)
	}
	_ = th.Close()
	_ = db.Close()

	cut := mem.Crash(rand.New(rand.NewPCG(1, 2)), false)
	if _, err := cut.Stat("/ws/.craft/" + rollout.ActiveDir + "/t1.rollout"); err != nil {
		t.Fatalf("after a power cut the rollout of t1, with 3 acknowledged records, is gone: %v", err)
	}
}

// TestReadRepairAnchorsTheFrameItApplied: read-repair (projection catchUp)
// applied the frames it read, then re-read the header of the last one to
// record it as the row's anchor. If in between the writer cut that frame
// (its fsync failed: ErrNotDurable, nothing acknowledged) and an
// acknowledged frame of the same seq and length took its place, the row
// held the records of the cut frame under the anchor (CRC) of the new one.
// Every later read found the row anchored and never looked again: state.db
// said, until a rebuild, what the rollout did not. (Found by the fault mode
// as a projection mismatch that survives iterations: "turn ...: ended_at:
// state.db <the failed attempt's time>, rebuild <the acknowledged retry's
// time>". Fixed in ee7097d: the anchor is the header of the frame as it was
// read.)
func TestReadRepairAnchorsTheFrameItApplied(t *testing.T) {
	ctx := context.Background()
	hfs := &hookFS{FS: rollout.NewMemFS()}
	db, err := rolloutdb.Open(ctx, "/ws", rolloutdb.Options{FS: hfs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	meta := func(name string) []rollout.Record {
		rec, _ := rollout.NewRecord(rollout.KindMetadataUpdated, "", rollout.MetadataUpdated{Name: &name})
		return []rollout.Record{rec}
	}
	res, err := th.Append(ctx, meta("zero"), rollout.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ThreadInfo(ctx, "t"); err != nil { // the row is up to date
		t.Fatal(err)
	}
	x := res.End // where the next frame goes

	// The next fsync of the rollout blocks, then fails.
	var failSync, holdRead atomic.Bool
	syncEntered, syncGo := make(chan struct{}), make(chan struct{})
	readEntered, readGo := make(chan struct{}), make(chan struct{})
	hfs.onSync = func(name string) error {
		// (The writer's file keeps the temporary name it was created under.)
		if strings.Contains(name, rollout.ActiveDir) && failSync.CompareAndSwap(true, false) {
			close(syncEntered)
			<-syncGo
			return syscall.EIO
		}
		return nil
	}
	// Read-repair blocks just after its first read of the frame at x.
	hfs.afterRead = func(name string, off int64, n int) {
		if strings.HasSuffix(name, "t.rollout") && off <= x && off+int64(n) > x && holdRead.CompareAndSwap(true, false) {
			close(readEntered)
			<-readGo
		}
	}
	failSync.Store(true)
	appended := make(chan error)
	go func() {
		_, err := th.Append(ctx, meta("first!"), rollout.AppendOptions{})
		appended <- err
	}()
	<-syncEntered // "first!" is written at x; its fsync hangs
	holdRead.Store(true)
	repaired := make(chan error)
	go func() {
		_, err := db.ThreadInfo(ctx, "t") // read-repair reads "first!" and applies it
		repaired <- err
	}()
	<-readEntered
	close(syncGo) // the fsync fails: "first!" is cut, not acknowledged
	err1 := <-appended
	res2, err2 := th.Append(ctx, meta("second"), rollout.AppendOptions{}) // same seq, same length
	close(readGo)
	if !errors.Is(err1, rollout.ErrNotDurable) {
		t.Fatalf("append of first!: %v, want ErrNotDurable", err1)
	}
	if err2 != nil || res2.Offset != x {
		t.Fatalf("append of second: %+v %v", res2, err2)
	}
	if err := <-repaired; err != nil {
		t.Fatal(err)
	}

	info, err := db.ThreadInfo(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "second" {
		t.Fatalf("state.db says the thread is named %q, from a frame that was cut and never acknowledged; the rollout says %q (acknowledged)", info.Name, "second")
	}
}

// hookFS calls onSync before each file sync (an error fails it) and
// afterRead after each read.
type hookFS struct {
	rollout.FS
	onSync    func(name string) error
	afterRead func(name string, off int64, n int)
}

type hookFile struct {
	rollout.File
	fs   *hookFS
	name string
}

func (h *hookFS) wrap(f rollout.File, name string, err error) (rollout.File, error) {
	if err != nil {
		return nil, err
	}
	return &hookFile{File: f, fs: h, name: name}, nil
}

func (h *hookFS) Create(name string) (rollout.File, error) {
	f, err := h.FS.Create(name)
	return h.wrap(f, name, err)
}

func (h *hookFS) Open(name string) (rollout.File, error) {
	f, err := h.FS.Open(name)
	return h.wrap(f, name, err)
}

func (h *hookFS) OpenRW(name string) (rollout.File, error) {
	f, err := h.FS.OpenRW(name)
	return h.wrap(f, name, err)
}

func (f *hookFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	if f.fs.afterRead != nil {
		f.fs.afterRead(f.name, off, n)
	}
	return n, err
}

func (f *hookFile) Sync() error {
	if f.fs.onSync != nil {
		if err := f.fs.onSync(f.name); err != nil {
			return err
		}
	}
	return f.File.Sync()
}
