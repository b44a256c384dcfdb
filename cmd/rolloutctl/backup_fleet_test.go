package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/internal/pgtest/pgtesting"
)

// backup -w postgres://… DEST writes a local workspace that list -w DEST
// reads; a second backup into a directory that is not one is refused
// with the usage code.
func TestBackupFleetWorkspace(t *testing.T) {
	ctx := context.Background()
	dsn := pgtesting.Database(t)
	db, err := rolloutdb.Open(ctx, dsn, rolloutdb.Options{Fleet: rolloutdb.FleetOptions{HostName: "cli-test"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"fleet-one", "fleet-two"} {
		th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "hello " + id})
		if err == nil {
			_, err = tu.Commit(ctx, rolloutdb.Commit{})
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := th.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	dest := filepath.Join(t.TempDir(), "backup")
	out, errs, code := rolloutctl(t, "backup", "-w", dsn, dest)
	if code != 0 || !strings.Contains(out, "backed up 2 threads") {
		t.Fatalf("backup: %d\n%s\n%s", code, out, errs)
	}
	out, errs, code = rolloutctl(t, "list", "-w", dest)
	if code != 0 || !strings.Contains(out, "fleet-one") || !strings.Contains(out, "fleet-two") {
		t.Fatalf("list: %d\n%s\n%s", code, out, errs)
	}
	if _, errs, code := rolloutctl(t, "backup", "-w", dsn, smallDemo(t)); code != exitUsage || !strings.Contains(errs, "not a backup") {
		t.Fatalf("backup into a local workspace: %d\n%s", code, errs)
	}
}
