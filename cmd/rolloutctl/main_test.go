package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/journal"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

func rolloutctl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestDemoThenVerifyAndShow(t *testing.T) {
	ws := t.TempDir()
	out, errs, code := rolloutctl(t, "demo", "-w", ws, "--threads", "3", "--turns", "12", "--seed", "7")
	if code != 0 {
		t.Fatalf("demo: %d %s", code, errs)
	}
	for _, want := range []string{"demo-7-00-fix-nil-map", "demo-7-00-fix-nil-map-sub", "subagent", "Next, try"} {
		if !strings.Contains(out, want) {
			t.Fatalf("demo output lacks %q:\n%s", want, out)
		}
	}
	// The demo's state.db lists its threads and holds the subagent's edge.
	db, err := rolloutdb.Open(context.Background(), ws, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	page, err := db.List(context.Background(), projection.ListOptions{Scope: projection.ScopeAll})
	edges, eerr := db.Business().Edges(context.Background(), projection.EdgeFilter{Status: projection.EdgeOpen})
	db.Close()
	if err != nil || len(page.Threads) != 4 || eerr != nil || len(edges) != 1 || edges[0].Child != "demo-7-00-fix-nil-map-sub" {
		t.Fatalf("demo state.db: %d threads %v, edges %+v %v", len(page.Threads), err, edges, eerr)
	}
	// Same seed, same content; a second demo into the same workspace is refused.
	if _, errs, code := rolloutctl(t, "demo", "-w", ws); code != 1 || !strings.Contains(errs, "hint:") {
		t.Fatalf("second demo: %d %s", code, errs)
	}

	out, _, code = rolloutctl(t, "verify", "-w", ws, "--json")
	var v struct {
		Threads []struct {
			ID       string `json:"id"`
			TornTail bool   `json:"torn_tail"`
			Records  int    `json:"records"`
			Damage   []struct {
				Offset int64  `json:"offset"`
				Length int64  `json:"length"`
				Reason string `json:"reason"`
			} `json:"damage"`
		} `json:"threads"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 || len(v.Threads) != 4 {
		t.Fatalf("verify: %d %v %s", code, err, out)
	}

	out, _, code = rolloutctl(t, "show", "-w", ws, "demo-7-00-fix-nil-map", "--json", "--records")
	var s struct {
		Turns       int              `json:"turns"`
		Checkpoints []int64          `json:"checkpoint_offsets"`
		Records     int              `json:"records"`
		List        []map[string]any `json:"record_list"`
		Header      struct {
			ThreadID string `json:"thread_id"`
		} `json:"header"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil || code != 0 || s.Turns != 12 || len(s.Checkpoints) != 1 || len(s.List) != s.Records || s.Header.ThreadID != "demo-7-00-fix-nil-map" {
		t.Fatalf("show: %d %v %+v", code, err, s)
	}

	// Damage in the middle of a rollout: verify says where, exit 1.
	path := filepath.Join(ws, ".craft/threads/active/demo-7-01-add-retry.rollout")
	b, _ := os.ReadFile(path)
	b[len(b)/2] ^= 0xff
	os.WriteFile(path, b, 0o644)
	out, _, code = rolloutctl(t, "verify", "-w", ws, "--json", "demo-7-01-add-retry")
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 1 || len(v.Threads) != 1 || len(v.Threads[0].Damage) != 1 {
		t.Fatalf("verify damaged: %d %v %s", code, err, out)
	}
	if d := v.Threads[0].Damage[0]; d.Offset > int64(len(b)/2) || d.Offset+d.Length <= int64(len(b)/2) {
		t.Fatalf("damage %+v does not cover the flipped byte at %d", d, len(b)/2)
	}
	// A torn tail alone is not damage.
	path = filepath.Join(ws, ".craft/threads/active/demo-7-00-fix-nil-map-sub.rollout")
	b, _ = os.ReadFile(path)
	os.WriteFile(path, b[:len(b)-10], 0o644)
	out, _, code = rolloutctl(t, "verify", "-w", ws, "--json", "demo-7-00-fix-nil-map-sub")
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 || !v.Threads[0].TornTail {
		t.Fatalf("verify torn: %d %v %s", code, err, out)
	}
}

func TestUsageErrors(t *testing.T) {
	ws := t.TempDir()
	for _, args := range [][]string{
		{"nosuch"},
		{"verify", "--nosuch"},
		{"show"},
		{"demo", "-w", ws, "--threads", "0"},
		{"show", "-w", ws, "../../etc/passwd"},
	} {
		if _, _, code := rolloutctl(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if _, errs, code := rolloutctl(t, "verify", "-w", ws); code != 1 || !strings.Contains(errs, "not a rolloutdb workspace") {
		t.Errorf("verify on a non-workspace: %d %s", code, errs)
	}
}

// Bad arguments exit 2 ("usage error: bad arguments") for every command,
// as for the read commands (TestUsageErrors), and out-of-range values are
// refused rather than silently replaced; scripts branch on exit codes.
// From a review: the same bad input exited 1 ("operation failed") or 0 outside the read commands.
func TestBadArgumentsAreUsageErrors(t *testing.T) {
	ws := smallDemo(t)
	for _, args := range [][]string{
		{"archive", "../x"},                 // was exit 1
		{"restore", "/etc/passwd"},          // was exit 1
		{"delete", "--yes", "../x"},         // was exit 1
		{"fork", "../x"},                    // was exit 1
		{"fork", smallOther, "--id", "BAD"}, // was exit 1
		{"fork", smallOther, "--at-turn", "-3"},
		{"fork", smallOther, "--at-turn", "999"},
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

func TestStateAndLifecycleCommands(t *testing.T) {
	ws := t.TempDir()
	if _, errs, code := rolloutctl(t, "demo", "-w", ws, "--threads", "3", "--turns", "12", "--seed", "3"); code != 0 {
		t.Fatalf("demo: %s", errs)
	}
	var page struct {
		Threads []struct {
			ID        string `json:"id"`
			Status    string `json:"status"`
			Name      string `json:"name"`
			Turns     int    `json:"turns"`
			UpdatedAt string `json:"updated_at"`
		} `json:"threads"`
		NextCursor *string `json:"next_cursor"`
	}
	list := func(args ...string) {
		t.Helper()
		out, errs, code := rolloutctl(t, append([]string{"list", "-w", ws, "--json"}, args...)...)
		page.Threads = nil
		if err := json.Unmarshal([]byte(out), &page); err != nil || code != 0 || page.NextCursor == nil {
			t.Fatalf("list %v: %d %v %s %s", args, code, err, out, errs)
		}
	}
	list()
	if len(page.Threads) != 3 || page.Threads[0].Turns == 0 || page.Threads[0].UpdatedAt == "" {
		t.Fatalf("active threads: %+v", page.Threads)
	}
	list("--all", "--limit", "2")
	if len(page.Threads) != 2 || *page.NextCursor == "" {
		t.Fatalf("first page of 2: %+v", page)
	}
	out, _, code := rolloutctl(t, "search", "-w", ws, "--json", "handler")
	var hits struct {
		Hits []struct {
			Thread  string `json:"thread"`
			Snippet string `json:"snippet"`
		} `json:"hits"`
	}
	if err := json.Unmarshal([]byte(out), &hits); err != nil || code != 0 || len(hits.Hits) == 0 || !strings.Contains(hits.Hits[0].Snippet, "[handler]") {
		t.Fatalf("search: %d %v %s", code, err, out)
	}
	if _, _, code := rolloutctl(t, "search", "-w", ws, "--raw", "handler AND ("); code != 2 {
		t.Fatalf("bad raw query: exit %d", code)
	}
	root := "demo-3-00-fix-nil-map"
	if _, errs, code := rolloutctl(t, "archive", "-w", ws, root+"-sub"); code != 2 || !strings.Contains(errs, "hint:") {
		t.Fatalf("archive of a subagent alone: %d %s", code, errs)
	}
	if out, errs, code := rolloutctl(t, "archive", "-w", ws, root); code != 0 || !strings.Contains(out, root+"-sub") {
		t.Fatalf("archive: %d %s %s", code, out, errs)
	}
	list("--archived")
	if len(page.Threads) != 3 { // the root, its subagent, and the thread the demo archived
		t.Fatalf("archived: %+v", page.Threads)
	}
	if _, errs, code := rolloutctl(t, "restore", "-w", ws, root); code != 0 {
		t.Fatalf("restore: %s", errs)
	}
	// A second process holds a thread's writer: write commands exit 4.
	w, _, err := rollout.Open(context.Background(), filepath.Join(ws, ".craft/threads/active", root+".rollout"), root, rollout.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"archive", root}, {"delete", "--yes", root}} {
		if _, errs, code := rolloutctl(t, append(args, "-w", ws)...); code != 4 {
			t.Fatalf("%v while locked: exit %d %s", args, code, errs)
		}
	}
	w.Close()
	if _, _, code := rolloutctl(t, "delete", "-w", ws, root); code != 2 {
		t.Fatalf("delete without --yes and no answer: exit %d", code)
	}
	if out, errs, code := rolloutctl(t, "delete", "-w", ws, "--yes", "--json", root); code != 0 || !strings.Contains(out, root+"-sub") {
		t.Fatalf("delete: %d %s %s", code, out, errs)
	}
	list("--all")
	if len(page.Threads) != 2 {
		t.Fatalf("after delete: %+v", page.Threads)
	}
	if out, errs, code := rolloutctl(t, "gc", "-w", ws, "--dry-run", "--json"); code != 0 || !strings.Contains(out, `"artifacts"`) {
		t.Fatalf("gc: %d %s %s", code, out, errs)
	}
	if out, errs, code := rolloutctl(t, "retention", "-w", ws, "--older-than", "1ns", "--dry-run", "--json"); code != 0 || !strings.Contains(out, "demo-3-02") {
		t.Fatalf("retention dry run: %d %s %s", code, out, errs)
	}
	if out, errs, code := rolloutctl(t, "fork", "-w", ws, "--json", "--at-turn", "3", "--id", "forked", "demo-3-01-add-retry"); code != 0 || !strings.Contains(out, `"turns": 3`) {
		t.Fatalf("fork: %d %s %s", code, out, errs)
	}
	if _, _, code := rolloutctl(t, "retention", "-w", ws); code != 2 {
		t.Fatalf("retention without --older-than: %d", code)
	}
	// state.db lost: rebuilt by the next command, and said so.
	os.Remove(filepath.Join(ws, ".craft/state.db"))
	if out, errs, code := rolloutctl(t, "rebuild", "-w", ws, "--json"); code != 0 || !strings.Contains(out, `"threads": 3`) || !strings.Contains(errs, "missing") {
		t.Fatalf("rebuild after loss: %d %s %s", code, out, errs)
	}
}

// verify, show and replay read archived rollouts compressed cold.
func TestCommandsReadColdRollouts(t *testing.T) {
	ws := t.TempDir()
	if _, errs, code := rolloutctl(t, "demo", "-w", ws, "--threads", "3", "--turns", "6", "--seed", "5"); code != 0 {
		t.Fatalf("demo: %s", errs)
	}
	// The demo archived its last thread and compressed it.
	id := "demo-5-02-speed-up-tests"
	if _, err := os.Stat(filepath.Join(ws, ".craft/threads/archived", id+".rollout.zst")); err != nil {
		t.Fatal(err)
	}
	out, errs, code := rolloutctl(t, "verify", "-w", ws, "--json", id)
	if code != 0 || !strings.Contains(out, id) {
		t.Fatalf("verify cold: %d %s %s", code, out, errs)
	}
	if out, errs, code := rolloutctl(t, "replay", "-w", ws, "--json", id); code != 0 || !strings.Contains(out, `"turns"`) {
		t.Fatalf("replay cold: %d %s %s", code, out, errs)
	}
	if out, errs, code := rolloutctl(t, "show", "-w", ws, "--json", id); code != 0 || !strings.Contains(out, id) {
		t.Fatalf("show cold: %d %s %s", code, out, errs)
	}
	if _, errs, code := rolloutctl(t, "repair", "-w", ws, id); code != 1 || !strings.Contains(errs, "restore") {
		t.Fatalf("repair cold: %d %s", code, errs)
	}
}

// A host that crashed leaves its journal behind, and its rollouts may lack
// records it acknowledged through it (a power cut took the unsynced
// pages). Every command that reads rollouts replays the journal first:
// verify finds nothing wrong and every record, and repair cuts nothing.
func TestCommandsReplayACrashedHostsJournal(t *testing.T) {
	ctx := context.Background()
	live, crashed := t.TempDir(), t.TempDir()
	db, err := rolloutdb.Open(ctx, live, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "host"})
	if err != nil {
		t.Fatal(err)
	}
	turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := turn.Add(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: strings.Repeat("step ", i+1)}); err != nil {
			t.Fatal(err)
		}
	}
	// The machine stops now: copy what is on disk (the journal with it;
	// locks do not come along), and lose the rollout's unsynced tail.
	if err := os.CopyFS(crashed, os.DirFS(live)); err != nil {
		t.Fatal(err)
	}
	_ = th.Close()
	_ = db.Close()
	if names, _ := os.ReadDir(filepath.Join(crashed, ".craft", journal.Dir)); len(names) < 2 {
		t.Fatalf("no journal in the copy: %v", names)
	}
	path := filepath.Join(crashed, ".craft", rollout.ActiveDir, "host.rollout")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// Cut in the middle of the appended frames: what remains is a torn tail.
	if err := os.Truncate(path, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	out, errs, code := rolloutctl(t, "verify", "-w", crashed, "--json", "host")
	var v struct {
		Threads []struct {
			TornTail bool  `json:"torn_tail"`
			Records  int   `json:"records"`
			Damage   []any `json:"damage"`
		} `json:"threads"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 || len(v.Threads) != 1 {
		t.Fatalf("verify: %d %v %s %s", code, err, out, errs)
	}
	// thread_opened, turn_started, the user message and 20 items.
	if got := v.Threads[0]; got.TornTail || len(got.Damage) > 0 || got.Records != 23 {
		t.Fatalf("verify after the journal's replay: %+v", got)
	}
	// Left: the recovery lock, and the mark that asks state.db's next
	// open to check every rollout (verify reads no state.db).
	if names, _ := os.ReadDir(filepath.Join(crashed, ".craft", journal.Dir)); len(names) != 2 ||
		names[0].Name() != journal.StaleMark || names[1].Name() != "recovery.lock" {
		t.Fatalf("journal left after its replay: %v", names)
	}
}

// verify --state runs the full check a host's open no longer runs: a
// sound state.db passes, one damaged in its data pages fails with exit 1,
// and the next command keeps it aside and rebuilds it.
func TestVerifyStateFindsDamageOpenDoesNotLookFor(t *testing.T) {
	ws := t.TempDir()
	if _, errs, code := rolloutctl(t, "demo", "-w", ws, "--threads", "30", "--turns", "12", "--seed", "3"); code != 0 {
		t.Fatalf("demo: %d %s", code, errs)
	}
	var v struct {
		State struct {
			OK        bool `json:"ok"`
			Integrity struct {
				StateDB []string `json:"state_db"`
			} `json:"integrity"`
			KeptAs string `json:"kept_as"`
		} `json:"state"`
	}
	out, errs, code := rolloutctl(t, "verify", "-w", ws, "--state", "--json")
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || !v.State.OK || len(v.State.Integrity.StateDB) != 1 || v.State.Integrity.StateDB[0] != "ok" {
		t.Fatalf("verify --state of a sound workspace: %d %v %+v\n%s%s", code, err, v, out, errs)
	}
	path := filepath.Join(ws, ".craft", "state.db")
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 40*4096 {
		t.Fatalf("state.db of %d bytes (%v): too small to damage only its data", len(b), err)
	}
	for i := len(b) / 2; i < len(b); i++ {
		b[i] = byte(i*7 + 3)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code = rolloutctl(t, "verify", "-w", ws, "--state")
	if code != 1 || !strings.Contains(out, "state.db: DAMAGED") || !strings.Contains(errs, "state.db is damaged") {
		t.Fatalf("verify --state of a damaged state.db: %d\n%s%s", code, out, errs)
	}
	// The finding is kept: the next open puts the file aside and rebuilds.
	out, errs, code = rolloutctl(t, "list", "-w", ws, "--json")
	if code != 0 || !strings.Contains(errs, "corrupt") {
		t.Fatalf("list after the damage was found: %d\n%s%s", code, out, errs)
	}
	if m, _ := filepath.Glob(path + ".corrupt-*"); len(m) == 0 {
		t.Fatal("the damaged state.db was not kept aside")
	}
	out, errs, code = rolloutctl(t, "verify", "-w", ws, "--state", "--json")
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || !v.State.OK {
		t.Fatalf("verify --state after the rebuild: %d %v\n%s%s", code, err, out, errs)
	}
}

// state.db missing (a documented, supported state) plus one entry
// threads/active/<id>.rollout that cannot be read (here a directory): a
// state.db command (list) ends promptly, lists the rest of the workspace,
// and the unreadable thread with its problem. The same holds after any
// failed or interrupted rebuild (`rebuild` leaves it pending).
// From a review: every state.db command hung (projection.Open's cleanup waited for a projector never started).
func TestUnreadableRolloutWithMissingStateDBDoesNotHang(t *testing.T) {
	ws := smallDemo(t)
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
	if !strings.Contains(r.stdout, smallRoot) || !strings.Contains(r.stdout, `"identity_error": "rollout unreadable`) || r.code != 0 {
		t.Fatalf("list beside an unreadable rollout: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// threads/active/<id>.rollout is a symlink to a rollout outside the
// workspace (another workspace's, or planted in a cloned repository:
// .craft/threads is not git-ignored): `repair` and `archive` change
// nothing outside .craft/ through it.
// From a review: repair truncated the file outside, and archive appended to it.
func TestSymlinkedRolloutIsNotWrittenOutsideTheWorkspace(t *testing.T) {
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

// JSON arrays are printed as [], never null (a jq script doing
// `.checkpoint_offsets[]` or `.report.skipped[]` fails on null): in
// `show --json` of a thread with no checkpoint, and in the report of
// `export --format json`, as replay --json prints it.
// From a review: checkpoint_offsets and report.skipped, rebuilt_turns and passed_over were null.
func TestJSONArraysAreNeverNull(t *testing.T) {
	ws := smallDemo(t) // the subagent has 1 turn: no checkpoint, no damage
	out, _, code := rolloutctl(t, "show", "-w", ws, smallSub, "--json")
	if code != 0 || strings.Contains(out, `"checkpoint_offsets": null`) {
		t.Errorf("show --json: exit %d, checkpoint_offsets is null", code)
	}
	out, _, code = rolloutctl(t, "export", "-w", ws, smallSub, "--format", "json")
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
