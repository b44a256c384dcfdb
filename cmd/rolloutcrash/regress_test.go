package main

import (
	"context"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
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
	mem := vfs.NewMemFS()
	fail := true
	ffs := &vfs.FaultFS{FS: mem, Hook: func(op vfs.Op, name string) error {
		if fail && op == vfs.OpSyncDir && strings.HasSuffix(name, rollout.ActiveDir) {
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

// The other bug the harness found (read-repair anchoring a row at a frame
// it had not applied) has its test beside the fix:
// TestReadRepairNeverAnchorsAFrameItDidNotApply in the root package.
