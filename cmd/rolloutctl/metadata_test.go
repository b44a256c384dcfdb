package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/importer"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// rollback and set write through the thread's lock, list filters by what
// set wrote, and both survive a rebuild of state.db (they are records).
func TestRollbackAndSet(t *testing.T) {
	ws := t.TempDir()
	if _, errs, code := rolloutctl(t, "demo", "-w", ws, "--threads", "2", "--turns", "6", "--seed", "5"); code != 0 {
		t.Fatalf("demo: %s", errs)
	}
	show := func(args ...string) projection.ThreadInfo {
		t.Helper()
		out, errs, code := rolloutctl(t, append(args, "-w", ws, "--json")...)
		var info projection.ThreadInfo
		if err := json.Unmarshal([]byte(out), &info); err != nil || code != 0 {
			t.Fatalf("%v: exit %d, %v: %s %s", args, code, err, out, errs)
		}
		return info
	}
	list := func(args ...string) []string {
		t.Helper()
		out, errs, code := rolloutctl(t, append([]string{"list", "-w", ws, "--json"}, args...)...)
		var page projection.Page
		if err := json.Unmarshal([]byte(out), &page); err != nil || code != 0 {
			t.Fatalf("list %v: exit %d, %v: %s", args, code, err, errs)
		}
		var ids []string
		for _, th := range page.Threads {
			ids = append(ids, th.ID)
		}
		return ids
	}
	ids := list()
	id := ids[0]
	before := show("set", id, "--name", "triage")
	if before.Name != "triage" {
		t.Fatalf("set --name: %+v", before)
	}
	info := show("set", id, "--label", "+bug", "--label", "+p1", "--flag", "pinned=true", "--status", "review")
	if !slices.Equal(info.Labels, []string{"bug", "p1"}) || !info.Flags["pinned"] || info.State != "review" || info.Name != "triage" {
		t.Fatalf("set: %+v", info)
	}
	info = show("set", id, "--label", "-bug")
	if !slices.Equal(info.Labels, []string{"p1"}) {
		t.Fatalf("set --label -bug: %+v", info.Labels)
	}
	if got := list("--label", "p1"); !slices.Equal(got, []string{id}) {
		t.Fatalf("list --label p1: %v", got)
	}
	if got := list("--state", "review"); !slices.Equal(got, []string{id}) {
		t.Fatalf("list --state review: %v", got)
	}
	if got := list("--label", "bug"); len(got) != 0 {
		t.Fatalf("list --label bug after removing it: %v", got)
	}

	info = show("rollback", id, "--turns", "2")
	if info.Turns != before.Turns-2 {
		t.Fatalf("rollback --turns 2: %d turns, had %d", info.Turns, before.Turns)
	}
	// Past the first turn, or nothing to set: usage errors, nothing written.
	if _, errs, code := rolloutctl(t, "rollback", "-w", ws, id, "--turns", "99"); code != exitUsage {
		t.Fatalf("rollback past the first turn: exit %d %s", code, errs)
	}
	for _, args := range [][]string{{"set", id}, {"set", id, "--label", "bug"}, {"set", id, "--flag", "pinned"}, {"rollback", id}} {
		if _, errs, code := rolloutctl(t, append(args, "-w", ws)...); code != exitUsage {
			t.Fatalf("%v: exit %d %s", args, code, errs)
		}
	}

	// A live host holds the thread: exit 4.
	w, _, err := rollout.Open(context.Background(), filepath.Join(ws, ".craft/threads/active", id+".rollout"), id, rollout.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"rollback", id, "--turns", "1"}, {"set", id, "--name", "x"}} {
		if _, errs, code := rolloutctl(t, append(args, "-w", ws)...); code != exitLocked {
			t.Fatalf("%v while a host holds it: exit %d %s", args, code, errs)
		}
	}
	w.Close()

	// They are records: a state.db made anew from the rollouts says the same.
	if _, errs, code := rolloutctl(t, "rebuild", "-w", ws); code != 0 {
		t.Fatalf("rebuild: %s", errs)
	}
	after := show("set", id, "--flag", "pinned=false")
	if after.Turns != info.Turns || after.Name != "triage" || !slices.Equal(after.Labels, []string{"p1"}) || after.State != "review" || after.Flags["pinned"] {
		t.Fatalf("after a rebuild: %+v, was %+v", after, info)
	}
}

// follow --json prints every record as a JSON line and returns (exit 0)
// when the thread is archived.
func TestFollowPrintsUntilArchived(t *testing.T) {
	ws := t.TempDir()
	if _, errs, code := rolloutctl(t, "demo", "-w", ws, "--threads", "1", "--turns", "3", "--seed", "2"); code != 0 {
		t.Fatalf("demo: %s", errs)
	}
	out, _, _ := rolloutctl(t, "list", "-w", ws, "--json")
	var page projection.Page
	if err := json.Unmarshal([]byte(out), &page); err != nil {
		t.Fatalf("list: %v %s", err, out)
	}
	id := ""
	for _, th := range page.Threads {
		if th.Source.Parent == "" {
			id = th.ID // a root: archive takes its subagents with it
		}
	}
	var stdout, stderr strings.Builder
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"follow", id, "-w", ws, "--json"}, &stdout, &stderr)
	}()
	if _, errs, code := rolloutctl(t, "archive", "-w", ws, id); code != 0 {
		t.Fatalf("archive: %s", errs)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("follow: exit %d: %s", code, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("follow did not return after the archive")
	}
	var seq uint64
	var last followJSON
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		if err := json.Unmarshal([]byte(line), &last); err != nil || last.Seq != seq+1 {
			t.Fatalf("line %q after seq %d: %v", line, seq, err)
		}
		seq = last.Seq
	}
	if last.Kind != "archived" || !strings.Contains(stderr.String(), "archived") {
		t.Fatalf("last record %+v, stderr %q", last, stderr.String())
	}
}

// backup copies a workspace that rolloutctl then reads as one; a second
// run copies only what changed; --verify checks the digests; a directory
// that is not a backup is refused (exit 2).
func TestBackupCommand(t *testing.T) {
	ws, dest := t.TempDir(), filepath.Join(t.TempDir(), "b")
	if _, errs, code := rolloutctl(t, "demo", "-w", ws, "--threads", "2", "--turns", "4", "--seed", "4"); code != 0 {
		t.Fatalf("demo: %s", errs)
	}
	var rep struct {
		Threads     int   `json:"threads"`
		BytesCopied int64 `json:"bytes_copied"`
		BytesTotal  int64 `json:"bytes_total"`
		Incremental bool  `json:"incremental"`
	}
	backup := func() {
		t.Helper()
		out, errs, code := rolloutctl(t, "backup", "-w", ws, dest, "--json")
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
			t.Fatalf("backup: exit %d %v %s %s", code, err, out, errs)
		}
	}
	backup()
	if rep.Threads == 0 || rep.BytesCopied != rep.BytesTotal || rep.Incremental {
		t.Fatalf("first backup: %+v", rep)
	}
	backup()
	if !rep.Incremental || rep.BytesCopied >= rep.BytesTotal {
		t.Fatalf("second backup: %+v", rep)
	}
	if out, errs, code := rolloutctl(t, "backup", "--verify", dest); code != 0 || !strings.Contains(out, "matches") {
		t.Fatalf("verify: exit %d %s %s", code, out, errs)
	}
	if _, errs, code := rolloutctl(t, "verify", "-w", dest); code != 0 {
		t.Fatalf("rolloutctl verify of the backup: exit %d %s", code, errs)
	}
	a, _, _ := rolloutctl(t, "list", "-w", ws, "--all", "--json")
	b, _, _ := rolloutctl(t, "list", "-w", dest, "--all", "--json")
	var pa, pb projection.Page
	if json.Unmarshal([]byte(a), &pa) != nil || json.Unmarshal([]byte(b), &pb) != nil || len(pa.Threads) == 0 || len(pa.Threads) != len(pb.Threads) {
		t.Fatalf("list of the workspace and of its backup:\n%s\n%s", a, b)
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := rolloutctl(t, "backup", "-w", ws, other); code != exitUsage {
		t.Fatalf("backup into a directory that is not a backup: exit %d %s", code, errs)
	}
	// Restore onto a new path: the same threads; onto a non-empty one: refused.
	restored := filepath.Join(t.TempDir(), "restored")
	if out, errs, code := rolloutctl(t, "backup", "restore", dest, restored); code != 0 || !strings.Contains(out, "restored") {
		t.Fatalf("backup restore: exit %d %s %s", code, out, errs)
	}
	c, _, _ := rolloutctl(t, "list", "-w", restored, "--all", "--json")
	var pc projection.Page
	if json.Unmarshal([]byte(c), &pc) != nil || len(pc.Threads) != len(pa.Threads) {
		t.Fatalf("list of the restored workspace:\n%s", c)
	}
	if _, errs, code := rolloutctl(t, "backup", "restore", dest, other); code != exitUsage {
		t.Fatalf("restore onto a directory that is not empty: exit %d %s", code, errs)
	}
}

// import --from claude-code walks a directory, prints the threads with
// their damaged lines (exit 1), refuses a named file of another format
// (exit 1) and a file of the same session gone another way, and changes
// nothing the second time.
func TestImportCommand(t *testing.T) {
	ws := t.TempDir()
	dir := "../../testdata/import/claude-code"
	var out struct {
		Threads []struct {
			ID       string `json:"id"`
			Parent   string `json:"parent"`
			Turns    int    `json:"turns"`
			Existing int    `json:"existing"`
			Damaged  []struct {
				Line   int    `json:"line"`
				Field  string `json:"field"`
				Reason string `json:"reason"`
			} `json:"damaged"`
			Unknown []struct {
				Type      string `json:"type"`
				Count     int    `json:"count"`
				FirstLine int    `json:"first_line"`
			} `json:"unknown"`
		} `json:"threads"`
		Refused []struct {
			Path string `json:"path"`
		} `json:"refused"`
		Failed []struct {
			Path   string `json:"path"`
			Reason string `json:"reason"`
		} `json:"failed"`
	}
	run := func(args ...string) int {
		t.Helper()
		stdout, errs, code := rolloutctl(t, append([]string{"import", "-w", ws, "--from", "claude-code", "--json"}, args...)...)
		out.Threads, out.Refused, out.Failed = nil, nil, nil
		if err := json.Unmarshal([]byte(stdout), &out); err != nil && code != exitUsage {
			t.Fatalf("import %v: %v %s %s", args, err, stdout, errs)
		}
		return code
	}
	// The session and its two subagents (a sidechain, a subagents/ file);
	// lines 4 (not JSON) and 8 (a missing parent) damaged: exit 1.
	if code := run(filepath.Join(dir, "session.jsonl")); code != exitFailed || len(out.Threads) != 3 || out.Threads[0].Turns != 2 || len(out.Threads[0].Damaged) != 2 ||
		out.Threads[0].Damaged[0].Line != 4 || len(out.Threads[0].Unknown) != 1 || out.Threads[1].Parent != out.Threads[0].ID || out.Threads[2].Parent != out.Threads[0].ID {
		t.Fatalf("import: exit %d %+v", code, out)
	}
	// The directory: session.jsonl again (nothing new), grown.jsonl (the
	// same session's id, other turns: refused as gone another way),
	// not-claude.jsonl (refused, listed, not fatal: found by the walk).
	if code := run(dir); code != exitFailed || len(out.Refused) != 2 || !strings.Contains(out.Refused[1].Path+out.Refused[0].Path, "grown.jsonl") {
		t.Fatalf("import of the directory: exit %d %+v", code, out)
	}
	for _, th := range out.Threads {
		if th.ID == "cc-4f35e220-c435-4cf7-b9b9-f40426042847" && th.Turns > 1 {
			t.Fatalf("the second import wrote %d turns again", th.Turns)
		}
	}
	if code := run(filepath.Join(dir, "not-claude.jsonl")); code != exitFailed {
		t.Fatalf("a named file of another format: exit %d", code)
	}
	if _, errs, code := rolloutctl(t, "import", "-w", ws, "--from", "opencode", dir); code != exitUsage {
		t.Fatalf("--from opencode: exit %d %s", code, errs)
	}
	if code := run("--from", "codex", "../../testdata/import/codex"); code != exitFailed || len(out.Threads) != 2 || out.Threads[0].ID != "cx-019a2d7a-41c4-78b1-b7cc-a45d62a89cd5" || out.Threads[0].Turns != 1 ||
		out.Threads[1].Parent != out.Threads[0].ID {
		t.Fatalf("import --from codex: exit %d %+v", code, out)
	}
	// dotcraft: the subagent named first waits for its parent, and is
	// then imported as its subagent.
	dc := "../../testdata/import/dotcraft/.craft/threads/"
	if code := run("--from", "dotcraft", dc+"active/thread_20260505_sub001.jsonl", dc); code != exitFailed || len(out.Threads) != 3 ||
		out.Threads[0].ID != "dc-thread_20260505_k3v9qa" || out.Threads[2].ID != "dc-thread_20260505_sub001" || out.Threads[2].Parent != "dc-thread_20260505_k3v9qa" {
		t.Fatalf("import --from dotcraft: exit %d %+v", code, out)
	}
	// craft-agents: the walk takes session.jsonl files only.
	if code := run("--from", "craft-agents", "../../testdata/import/craft-agents"); code != exitFailed || len(out.Threads) != 2 || out.Threads[0].ID != "ca-260120-quiet-lake" ||
		out.Threads[0].Turns != 2 || out.Threads[1].Parent != "ca-260120-quiet-lake" || len(out.Refused) != 0 {
		t.Fatalf("import --from craft-agents: exit %d %+v", code, out)
	}
	// A session whose thread is archived here fails; the next file is
	// still read (and, being Claude Code's, refused).
	if _, errs, code := rolloutctl(t, "archive", "-w", ws, "ca-260120-quiet-lake"); code != 0 {
		t.Fatalf("archive: exit %d %s", code, errs)
	}
	if code := run("--from", "craft-agents", "../../testdata/import/craft-agents", "../../testdata/import/claude-code/session.jsonl"); code != exitFailed ||
		len(out.Failed) != 1 || !strings.Contains(out.Failed[0].Reason, "archived") || len(out.Refused) != 1 {
		t.Fatalf("import with an archived thread: exit %d %+v", code, out)
	}
}

// The import fixtures were written (checked out) just now: every turn is
// imported.
func init() { importer.ActiveWindow = 0 }
