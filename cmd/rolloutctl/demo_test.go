package main

import (
	"path/filepath"
	"testing"
)

// The demo "refuses a workspace that already has threads" (README), also
// when all of them are archived, and leaves the user's archived rollouts
// as they are.
// From a review: demo looked only at threads/active and compressed the user's archived rollouts.
func TestDemoRefusesAWorkspaceWithOnlyArchivedThreads(t *testing.T) {
	ws := t.TempDir()
	if _, errs, code := rolloutctl(t, "demo", "-w", ws, "--threads", "2", "--turns", "3", "--seed", "4"); code != 0 {
		t.Fatal(errs)
	}
	for _, id := range []string{"demo-4-00-fix-nil-map", "demo-4-01-add-retry"} {
		if _, errs, code := rolloutctl(t, "archive", "-w", ws, id); code != 0 {
			t.Fatal(errs)
		}
	}
	_, _, code := rolloutctl(t, "demo", "-w", ws, "--threads", "3", "--turns", "3", "--seed", "5")
	mine := filepath.Join(ws, ".craft/threads/archived/demo-4-01-add-retry.rollout")
	if code == 0 || !exists(mine) {
		t.Fatalf("demo into a workspace holding (archived) threads: exit %d; the user's archived rollout left plain: %v", code, exists(mine))
	}
}
