package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// `archive ROOT` while a live host holds only the root's subagent exits 4
// and leaves the root active: README says a thread a live host holds "is
// refused with exit 4 ... before anything is changed" (delete checks the
// whole tree first).
// From a review: archive exited 4 but archived the root, splitting the tree.
func TestArchiveRefusedForALockedSubagentChangesNothing(t *testing.T) {
	ws := smallDemo(t)
	holdWriter(t, filepath.Join(ws, ".craft/threads/active", smallSub+".rollout"), smallSub)
	_, errs, code := rolloutctl(t, "archive", "-w", ws, smallRoot)
	if code != exitLocked {
		t.Fatalf("archive while the subagent is held: exit %d, want 4\n%s", code, errs)
	}
	if !exists(filepath.Join(ws, ".craft/threads/active", smallRoot+".rollout")) {
		t.Fatalf("archive was refused (exit 4) but the root %s was archived anyway: the tree is split between active and archived", smallRoot)
	}
}

// The same for `restore ROOT` when a live host holds the archived
// subagent's rollout: exit 4, and the root stays archived.
// From a review: restore exited 4 but restored the root.
func TestRestoreRefusedForALockedSubagentChangesNothing(t *testing.T) {
	ws := smallDemo(t)
	if _, errs, code := rolloutctl(t, "archive", "-w", ws, smallRoot); code != 0 {
		t.Fatalf("archive: %s", errs)
	}
	holdWriter(t, filepath.Join(ws, ".craft/threads/archived", smallSub+".rollout"), smallSub)
	_, errs, code := rolloutctl(t, "restore", "-w", ws, smallRoot)
	if code != exitLocked {
		t.Fatalf("restore while the subagent is held: exit %d, want 4\n%s", code, errs)
	}
	if !exists(filepath.Join(ws, ".craft/threads/archived", smallRoot+".rollout")) {
		t.Fatalf("restore was refused (exit 4) but the root %s was restored anyway", smallRoot)
	}
}

// `retention --older-than 1ns --json` with two archived roots, the second
// held by a live host, exits 4; whatever it deleted before the refusal
// (the first root and its subagent) is named on stdout, so a user does not
// believe nothing happened.
// From a review: exit 4, an empty stdout and "locked" on stderr, with the first tree deleted for good.
func TestRefusedRetentionReportsWhatItDeleted(t *testing.T) {
	ws := smallDemo(t)
	// Archived newest last: the root tree is listed (and deleted) first.
	if _, errs, code := rolloutctl(t, "archive", "-w", ws, smallOther); code != 0 {
		t.Fatalf("archive: %s", errs)
	}
	if _, errs, code := rolloutctl(t, "archive", "-w", ws, smallRoot); code != 0 {
		t.Fatalf("archive: %s", errs)
	}
	holdWriter(t, filepath.Join(ws, ".craft/threads/archived", smallOther+".rollout"), smallOther)
	out, errs, code := rolloutctl(t, "retention", "-w", ws, "--older-than", "1ns", "--json")
	if code != exitLocked {
		t.Fatalf("retention with a held thread: exit %d, want 4\n%s", code, errs)
	}
	deleted := !exists(filepath.Join(ws, ".craft/threads/archived", smallRoot+".rollout"))
	if deleted && !strings.Contains(out, smallRoot) {
		t.Fatalf("retention exited 4 (refused) but deleted %s and %s without saying so: stdout %q\nstderr %s", smallRoot, smallSub, out, errs)
	}
}

// archive, restore and delete without --json print "archived: ID",
// "restored: ID" and "deleted: ID".
// From a review: they printed "archivd", "restord", "deletd" (TrimSuffix "e" + "d").
func TestLifecycleMessagesAreSpelledRight(t *testing.T) {
	ws := smallDemo(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"archive", smallOther}, "archived: " + smallOther},
		{[]string{"restore", smallOther}, "restored: " + smallOther},
		{[]string{"delete", "--yes", smallOther}, "deleted: " + smallOther},
	} {
		out, errs, code := rolloutctl(t, append(c.args, "-w", ws)...)
		if code != 0 {
			t.Fatalf("%v: %s", c.args, errs)
		}
		if !strings.Contains(out, c.want) {
			t.Errorf("%v printed %q, want %q", c.args, strings.TrimSpace(out), c.want)
		}
	}
}
