package main

import (
	"testing"
)

// `fork` of a thread whose rollout resume refuses (a second header naming
// another thread) exits 3, as replay and export do for the same file: the
// README's 3 is "identity conflict or refused resume".
// From a review: fork exited 1 (run() mapped only rollout.ErrThreadMismatch, not recovery.ErrIdentity).
func TestForkOfARolloutResumeRefusesExits3(t *testing.T) {
	ws, _ := fixtureWorkspace(t, "../../testdata/corrupt/rec-second-header-other-thread.rollout")
	if _, _, code := rolloutctl(t, "replay", "-w", ws, "fixture"); code != exitIdentity {
		t.Fatalf("replay: exit %d, want 3 (fixture changed?)", code)
	}
	if _, errs, code := rolloutctl(t, "fork", "-w", ws, "fixture"); code != exitIdentity {
		t.Fatalf("fork of a rollout resume refuses: exit %d, want 3\n%s", code, errs)
	}
}
