package main

// Review tests: each one failed, when it was written, for a bug a user or
// a script would hit; they stay as regression tests. The comment on each
// says what the user saw (the bug) and what they should see.

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// reviewDemo is a small demo workspace: 3 user threads (the last archived
// and compressed) and a subagent of the first.
func reviewDemo(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	if _, errs, code := rolloutctl(t, "demo", "-w", ws, "--threads", "3", "--turns", "4", "--seed", "9"); code != 0 {
		t.Fatalf("demo: %s", errs)
	}
	return ws
}

const (
	rvRoot  = "demo-9-00-fix-nil-map"
	rvSub   = rvRoot + "-sub"
	rvOther = "demo-9-01-add-retry"
	rvCold  = "demo-9-02-speed-up-tests" // archived and compressed by the demo
)

// holdWriter holds a thread's writer lock in this process, as a live host
// would (it conflicts like another process).
func holdWriter(t *testing.T, path, id string) {
	t.Helper()
	w, _, err := rollout.Open(context.Background(), path, id, rollout.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ctlWithin runs rolloutctl as a subprocess and kills it after d.
func ctlWithin(t *testing.T, d time.Duration, args ...string) (result, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), envMain+"=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		return result{out.String(), errb.String(), -1}, false
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run rolloutctl %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}, true
}

// SEVERITY HIGH. `archive ROOT` while a live host holds only the root's
// subagent: the user sees exit 4 ("locked by another writer") but the root
// was archived anyway, leaving the tree split (root archived, the
// subagent the host is running still active). README: a thread a live
// host holds "is refused with exit 4 ... before anything is changed"
// (delete checks the whole tree first; archive does not).
func TestReviewArchiveRefusedForLockedSubagentChangesNothing(t *testing.T) {
	ws := reviewDemo(t)
	holdWriter(t, filepath.Join(ws, ".craft/threads/active", rvSub+".rollout"), rvSub)
	_, errs, code := rolloutctl(t, "archive", "-w", ws, rvRoot)
	if code != exitLocked {
		t.Fatalf("archive while the subagent is held: exit %d, want 4\n%s", code, errs)
	}
	if !exists(filepath.Join(ws, ".craft/threads/active", rvRoot+".rollout")) {
		t.Fatalf("archive was refused (exit 4) but the root %s was archived anyway: the tree is split between active and archived", rvRoot)
	}
}

// SEVERITY HIGH. The same for `restore ROOT` when a live host holds the
// archived subagent's rollout: exit 4, yet the root was restored.
func TestReviewRestoreRefusedForLockedSubagentChangesNothing(t *testing.T) {
	ws := reviewDemo(t)
	if _, errs, code := rolloutctl(t, "archive", "-w", ws, rvRoot); code != 0 {
		t.Fatalf("archive: %s", errs)
	}
	holdWriter(t, filepath.Join(ws, ".craft/threads/archived", rvSub+".rollout"), rvSub)
	_, errs, code := rolloutctl(t, "restore", "-w", ws, rvRoot)
	if code != exitLocked {
		t.Fatalf("restore while the subagent is held: exit %d, want 4\n%s", code, errs)
	}
	if !exists(filepath.Join(ws, ".craft/threads/archived", rvRoot+".rollout")) {
		t.Fatalf("restore was refused (exit 4) but the root %s was restored anyway", rvRoot)
	}
}

// SEVERITY MEDIUM-HIGH. `retention --older-than 1ns --json` with two
// archived roots, the second held by a live host: the user sees exit 4,
// an empty stdout, and "locked" on stderr, so they believe nothing
// happened, but the first root and its subagent were deleted for good.
// They should either get a refusal before anything is deleted, or a report
// (stdout JSON) naming every thread that was deleted.
func TestReviewRetentionRefusedStillReportsWhatItDeleted(t *testing.T) {
	ws := reviewDemo(t)
	// Archived newest last: the root tree is listed (and deleted) first.
	if _, errs, code := rolloutctl(t, "archive", "-w", ws, rvOther); code != 0 {
		t.Fatalf("archive: %s", errs)
	}
	if _, errs, code := rolloutctl(t, "archive", "-w", ws, rvRoot); code != 0 {
		t.Fatalf("archive: %s", errs)
	}
	holdWriter(t, filepath.Join(ws, ".craft/threads/archived", rvOther+".rollout"), rvOther)
	out, errs, code := rolloutctl(t, "retention", "-w", ws, "--older-than", "1ns", "--json")
	if code != exitLocked {
		t.Fatalf("retention with a held thread: exit %d, want 4\n%s", code, errs)
	}
	deleted := !exists(filepath.Join(ws, ".craft/threads/archived", rvRoot+".rollout"))
	if deleted && !strings.Contains(out, rvRoot) {
		t.Fatalf("retention exited 4 (refused) but deleted %s and %s without saying so: stdout %q\nstderr %s", rvRoot, rvSub, out, errs)
	}
}

// SEVERITY HIGH. state.db missing (a documented, supported state) plus one
// entry threads/active/<id>.rollout that cannot be read (here a
// directory): every state.db command (list, search, gc, archive, ...)
// hangs forever with no output: projection.Open's rebuild fails, and its
// cleanup waits for a projector goroutine that was never started. The
// user should get an error (or the unreadable thread skipped), promptly.
// The same hang follows any failed/interrupted rebuild (`rebuild` leaves
// it pending) with such a file present.
func TestReviewUnreadableRolloutWithMissingStateDBDoesNotHang(t *testing.T) {
	ws := reviewDemo(t)
	if err := os.Mkdir(filepath.Join(ws, ".craft/threads/active/dirthread.rollout"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"state.db", "state.db-wal", "state.db-shm"} {
		os.Remove(filepath.Join(ws, ".craft", n))
	}
	r, done := ctlWithin(t, 15*time.Second, "list", "-w", ws, "--json")
	if !done {
		t.Fatalf("list hung (killed after 15s) on a workspace whose state.db is missing and which holds a directory named dirthread.rollout\nstderr: %s", r.stderr)
	}
	// And the rest of the workspace is listed, the unreadable one with its
	// problem.
	if !strings.Contains(r.stdout, rvRoot) || !strings.Contains(r.stdout, `"identity_error": "rollout unreadable`) || r.code != 0 {
		t.Fatalf("list beside an unreadable rollout: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// SEVERITY MEDIUM-HIGH. A compressed archived rollout that is a
// decompression bomb: a 15 KB .zst of zeros claiming 128 MiB. `verify`
// and `stats` decompress all of it into memory before noticing it is not
// a rollout (its first bytes are not the file magic): ~0.5 GB allocated
// for 15 KB. A 386 KB bomb (1.9 GiB, under the 2 GiB MaxColdSize) made
// verify, stats, show and `list --all` each take ~40 s and 4.2 GB RSS,
// enough to get the CLI OOM-killed. It should be refused without being
// expanded (check the magic first, stream it, or cap the ratio).
func TestReviewColdBombIsNotExpanded(t *testing.T) {
	ws := reviewDemo(t)
	const n = 128 << 20
	var buf bytes.Buffer
	enc, _ := zstd.NewWriter(&buf)
	enc.ResetContentSize(&buf, n)
	zero := make([]byte, 1<<20)
	for i := 0; i < n>>20; i++ {
		enc.Write(zero)
	}
	enc.Close()
	if err := os.WriteFile(filepath.Join(ws, ".craft/threads/archived", rvCold+".rollout.zst"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"verify", "--json"}, {"stats", "--json", "--verify"}} {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		_, errs, code := rolloutctl(t, append(args, "-w", ws)...)
		runtime.ReadMemStats(&m1)
		alloc := (m1.TotalAlloc - m0.TotalAlloc) >> 20
		if code > 1 {
			t.Fatalf("%v: exit %d %s", args, code, errs)
		}
		if alloc > 64 {
			t.Errorf("%v over a %d-byte .zst bomb allocated %d MiB: it was expanded before being refused", args, buf.Len(), alloc)
		}
	}
}

// SEVERITY MEDIUM. threads/active/<id>.rollout is a symlink to a rollout
// outside the workspace (another workspace's, or planted in a cloned
// repository: .craft/threads is not git-ignored). `repair` truncates the
// file outside the workspace, and `archive` appends an "archived" record
// to it. The issue: paths that leave the workspace, symlinks included, get
// a clear error; nothing outside .craft/ is written.
func TestReviewSymlinkedRolloutIsNotWrittenOutsideTheWorkspace(t *testing.T) {
	for _, args := range [][]string{{"repair", "fixture"}, {"archive", "fixture"}} {
		t.Run(args[0], func(t *testing.T) {
			ws, path := fixtureWorkspace(t, "../../testdata/corrupt/rec-torn-tail-mid-payload.rollout")
			outside := filepath.Join(t.TempDir(), "victim.rollout")
			orig, _ := os.ReadFile(path)
			if err := os.WriteFile(outside, orig, 0o644); err != nil {
				t.Fatal(err)
			}
			os.Remove(path)
			if err := os.Symlink(outside, path); err != nil {
				t.Fatal(err)
			}
			_, errs, code := rolloutctl(t, append(args, "-w", ws)...)
			now, _ := os.ReadFile(outside)
			if !bytes.Equal(now, orig) {
				t.Fatalf("%v (exit %d %s) changed a file outside the workspace through a symlink: %d bytes -> %d", args, code, errs, len(orig), len(now))
			}
		})
	}
}

// SEVERITY MEDIUM. `fork` of a thread whose rollout resume refuses (a
// second header naming another thread): exit 1. replay and export exit 3
// for the same file; the README: 3 is "identity conflict or refused
// resume". fork does not map recovery.ErrIdentity (run() only maps
// rollout.ErrThreadMismatch).
func TestReviewForkOfARefusedRolloutExits3(t *testing.T) {
	ws, _ := fixtureWorkspace(t, "../../testdata/corrupt/rec-second-header-other-thread.rollout")
	if _, _, code := rolloutctl(t, "replay", "-w", ws, "fixture"); code != exitIdentity {
		t.Fatalf("replay: exit %d, want 3 (fixture changed?)", code)
	}
	if _, errs, code := rolloutctl(t, "fork", "-w", ws, "fixture"); code != exitIdentity {
		t.Fatalf("fork of a rollout resume refuses: exit %d, want 3\n%s", code, errs)
	}
}

// SEVERITY MEDIUM-LOW. The hint printed when replay refuses a rollout
// says "inspect it with rolloutctl verify and show", and verify then
// reports the same file "ok" and exits 0: a rollout that holds a second
// header of another thread (a copy over another thread's file) gets a
// clean bill, so `verify` in a health check never catches a thread that
// cannot be resumed. verify should report it (an error/identity entry and
// a non-zero exit).
func TestReviewVerifyFlagsARolloutResumeRefuses(t *testing.T) {
	ws, _ := fixtureWorkspace(t, "../../testdata/corrupt/rec-second-header-other-thread.rollout")
	_, errs, code := rolloutctl(t, "replay", "-w", ws, "fixture")
	if code != exitIdentity || !strings.Contains(errs, "verify") {
		t.Fatalf("replay: exit %d %s", code, errs)
	}
	out, _, code := rolloutctl(t, "verify", "-w", ws, "fixture")
	if code == 0 {
		t.Fatalf("verify says the rollout replay refuses is fine (exit 0):\n%s", out)
	}
}

// SEVERITY LOW-MEDIUM (scripts branch on exit codes). Bad arguments exit 2
// ("usage error: bad arguments") for read commands (`show ../x` exits 2,
// asserted by TestUsageErrors), but the same bad input exits 1 ("operation
// failed") elsewhere, and some out-of-range values are silently replaced.
func TestReviewBadArgumentsAreUsageErrors(t *testing.T) {
	ws := reviewDemo(t)
	for _, args := range [][]string{
		{"archive", "../x"},              // was exit 1
		{"restore", "/etc/passwd"},       // was exit 1
		{"delete", "--yes", "../x"},      // was exit 1
		{"fork", "../x"},                 // was exit 1
		{"fork", rvOther, "--id", "BAD"}, // was exit 1
		{"fork", rvOther, "--at-turn", "-3"},
		{"fork", rvOther, "--at-turn", "999"},
		{"list", "--cursor", "garbage"}, // was exit 1
		{"list", "--limit", "-5"},       // was exit 0: silently a page of 50
		{"list", "--limit", "5000"},     // was exit 0: silently a page of 1000 ("at most 1000")
		{"search", "--limit", "-1", "handler"},
	} {
		if _, _, code := rolloutctl(t, append(args, "-w", ws)...); code != exitUsage {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// SEVERITY LOW-MEDIUM. README: the demo "refuses a workspace that already
// has threads". It only looks at threads/active: in a workspace whose
// threads are all archived, `demo` goes ahead, adds its threads, and its
// CompressArchived call compresses the user's own archived rollouts too
// (it should touch only what it made).
func TestReviewDemoRefusesAWorkspaceWithOnlyArchivedThreads(t *testing.T) {
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

// SEVERITY LOW. `stats --json` with one archived compressed rollout that
// is truncated: the thread is in threads.total and damage.unreadable, but
// in neither threads.active nor threads.archived (total 4 = 3 active + 0
// archived), and archived_compressed drops to 0.
func TestReviewStatsCountsAnUnreadableArchivedThread(t *testing.T) {
	ws := reviewDemo(t)
	p := filepath.Join(ws, ".craft/threads/archived", rvCold+".rollout.zst")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, b[:len(b)/2], 0o644)
	out, errs, code := rolloutctl(t, "stats", "-w", ws, "--json", "--verify")
	var st statsJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 {
		t.Fatalf("stats: %d %v %s", code, err, errs)
	}
	if len(st.Damage.Unreadable) != 1 {
		t.Fatalf("unreadable: %v", st.Damage.Unreadable)
	}
	if th := st.Threads; th.Total != th.Active+th.Archived || th.ArchivedCold != 1 {
		t.Fatalf("stats threads %+v: total != active + archived, or the compressed archive not counted", th)
	}
}

// SEVERITY LOW (cosmetic). archive/restore/delete without --json print
// "archivd: ...", "restord: ...", "deletd: ..." (TrimSuffix "e" + "d").
func TestReviewLifecycleMessagesAreSpelledRight(t *testing.T) {
	ws := reviewDemo(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"archive", rvOther}, "archived: " + rvOther},
		{[]string{"restore", rvOther}, "restored: " + rvOther},
		{[]string{"delete", "--yes", rvOther}, "deleted: " + rvOther},
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

// SEVERITY LOW. JSON arrays printed as null: `show --json` of a thread
// with no checkpoint has "checkpoint_offsets": null, and `export --format
// json` has "report": {"skipped": null, "rebuilt_turns": null,
// "passed_over": null} (replay --json prints [] for the same report). A
// jq script doing `.checkpoint_offsets[]` or `.report.skipped[]` fails.
func TestReviewJSONArraysAreNeverNull(t *testing.T) {
	ws := reviewDemo(t) // the subagent has 1 turn: no checkpoint, no damage
	out, _, code := rolloutctl(t, "show", "-w", ws, rvSub, "--json")
	if code != 0 || strings.Contains(out, `"checkpoint_offsets": null`) {
		t.Errorf("show --json: exit %d, checkpoint_offsets is null", code)
	}
	out, _, code = rolloutctl(t, "export", "-w", ws, rvSub, "--format", "json")
	var doc struct {
		Report map[string]json.RawMessage `json:"report"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 {
		t.Fatalf("export: %d %v", code, err)
	}
	for _, k := range []string{"skipped", "rebuilt_turns", "passed_over"} {
		if string(doc.Report[k]) == "null" {
			t.Errorf("export --format json: report.%s is null (replay --json prints [])", k)
		}
	}
}

// SEVERITY LOW. `export --format markdown`: an agent message cut off
// inside a code block (a reply truncated at max tokens: "```go" and no
// closing fence) is written as is, so the fence it opens swallows the
// rest of the transcript: every later "## Turn N" heading, user message
// and tool call renders as code. Tool output is fenced safely (fenced());
// message text should not be able to leave a fence open either.
func TestReviewExportMarkdownMessageCannotSwallowLaterTurns(t *testing.T) {
	ws := t.TempDir()
	ctx := context.Background()
	db, err := rolloutdb.Open(ctx, ws, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "md"})
	if err != nil {
		t.Fatal(err)
	}
	for i, answer := range []string{"Here is the fix:\n\n```go\nfunc load() {\n\tm := map[string]int{}", "Done."} {
		turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "question " + string(rune('1'+i))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := turn.Commit(ctx, rolloutdb.Commit{Items: []rollout.Item{{Type: rollout.ItemAgentMessage, Text: answer}}}); err != nil {
			t.Fatal(err)
		}
	}
	th.Close()
	db.Close()
	out, errs, code := rolloutctl(t, "export", "-w", ws, "md", "--format", "markdown")
	if code != 0 {
		t.Fatalf("export: %s", errs)
	}
	// CommonMark fences: a line of >= 3 backticks opens; one of at least
	// as many backticks and nothing else closes.
	open := 0
	for _, line := range strings.Split(out, "\n") {
		l := strings.TrimSpace(line)
		n := len(l) - len(strings.TrimLeft(l, "`"))
		switch {
		case open == 0 && n >= 3:
			open = n
		case open > 0 && n >= open && strings.Trim(l, "`") == "":
			open = 0
		case open > 0 && strings.HasPrefix(line, "## Turn 2"):
			t.Fatalf("turn 2's heading is inside a code block opened by turn 1's message:\n%s", out)
		}
	}
}
