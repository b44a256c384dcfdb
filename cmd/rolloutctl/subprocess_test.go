package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/internal/pgtest/pgtesting"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// These tests run rolloutctl as a separate process, as an operator or a
// script does: the test binary re-executes itself as rolloutctl (its
// main), so exit codes, stdout and stderr are the real ones. A second
// re-execution plays a live host holding threads.

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

const (
	envMain = "ROLLOUTCTL_TEST_AS_MAIN"
	envHold = "ROLLOUTCTL_TEST_HOLD" // workspace, then the thread ids to hold
)

func TestMain(m *testing.M) {
	if os.Getenv(envMain) == "1" {
		main()
	}
	if spec := os.Getenv(envHold); spec != "" {
		os.Exit(holdThreads(strings.Fields(spec)))
	}
	// The fleet cases share one throwaway PostgreSQL cluster, started by
	// the first of them and stopped here.
	pgtesting.Main(m)
}

// holdThreads is a live host: it opens the workspace, holds each thread's
// writer (an archived one by its file's lock, which is what Archive,
// Restore and Delete take), says "ready", and holds until stdin closes.
func holdThreads(args []string) int {
	ctx := context.Background()
	db, err := rolloutdb.Open(ctx, args[0], rolloutdb.Options{Host: "test-host"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	for i, id := range args[1:] {
		if th, err := db.OpenThread(ctx, id); err == nil {
			defer th.Close()
			if i == 0 {
				// A background terminal of this host, running.
				if _, err := db.Artifacts().StartTerminal(id, "host-term", "make watch"); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
			}
			continue
		} else if !errors.Is(err, rolloutdb.ErrThreadArchived) {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for _, p := range []func(string, string) (string, error){rollout.ArchivedPath, rollout.ColdPath} {
			path, _ := p(db.DataDir(), id)
			if f, err := vfs.OS.OpenRW(path); err == nil {
				if err := f.Lock(); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
				defer f.Close()
			}
		}
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

type result struct {
	stdout, stderr string
	code           int
}

// ctl runs rolloutctl as a subprocess.
func ctl(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envMain+"=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run rolloutctl %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}
}

// ctlJSON runs a command that must succeed and parses its stdout (one
// JSON document, nothing else) into v.
func ctlJSON(t *testing.T, v any, args ...string) result {
	t.Helper()
	r := ctl(t, args...)
	if r.code != 0 {
		t.Fatalf("rolloutctl %v: exit %d\n%s", args, r.code, r.stderr)
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("rolloutctl %v: stdout is not one JSON document: %v\n%s", args, err, r.stdout)
	}
	var rest json.RawMessage
	if err := dec.Decode(&rest); err != nil || dec.More() {
		t.Fatalf("rolloutctl %v: more than one JSON document on stdout", args)
	}
	return r
}

// The demo workspace the tests share: 4 user threads (the last archived
// and compressed), a subagent; 12 turns each (3 for the subagent).
func demoWorkspace(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	if r := ctl(t, "demo", "-w", ws, "--threads", "4", "--turns", "12", "--seed", "11"); r.code != 0 {
		t.Fatalf("demo: %d %s", r.code, r.stderr)
	}
	return ws
}

const (
	root = "demo-11-00-fix-nil-map"
	sub  = root + "-sub"
	cold = "demo-11-03-explain-auth" // archived and compressed by the demo
)

func TestEveryCommandAsASubprocess(t *testing.T) {
	ws := demoWorkspace(t)

	// list: the documented shape, newest first, archived apart.
	type listPage struct {
		Threads []struct {
			ID        string  `json:"id"`
			Status    string  `json:"status"`
			Name      *string `json:"name"`
			Turns     int     `json:"turns"`
			UpdatedAt string  `json:"updated_at"`
		} `json:"threads"`
		NextCursor *string `json:"next_cursor"`
	}
	var page listPage
	ctlJSON(t, &page, "list", "-w", ws, "--json")
	if len(page.Threads) != 4 || page.NextCursor == nil || *page.NextCursor != "" {
		t.Fatalf("list: %+v", page)
	}
	for _, th := range page.Threads {
		if th.Status != "active" || th.Name == nil || th.Turns != map[bool]int{true: 3, false: 12}[th.ID == sub] || th.UpdatedAt == "" {
			t.Fatalf("list entry %+v", th)
		}
	}
	ctlJSON(t, &page, "list", "-w", ws, "--json", "--archived")
	if len(page.Threads) != 1 || page.Threads[0].ID != cold || page.Threads[0].Status != "archived" {
		t.Fatalf("list --archived: %+v", page)
	}
	ctlJSON(t, &page, "list", "-w", ws, "--json", "--all", "--limit", "3")
	first := page.Threads
	if len(first) != 3 || *page.NextCursor == "" {
		t.Fatalf("list --all --limit 3: %+v", page)
	}
	ctlJSON(t, &page, "list", "-w", ws, "--json", "--all", "--limit", "3", "--cursor", *page.NextCursor)
	if len(page.Threads) != 2 || *page.NextCursor != "" || page.Threads[0].ID == first[2].ID {
		t.Fatalf("second page: %+v", page)
	}
	golden(t, "list-all", ctl(t, "list", "-w", ws, "--json", "--all").stdout, ws)

	// show: header, counts, the subagent edge and its goal.
	var show struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Header struct {
			ThreadID string `json:"thread_id"`
		} `json:"header"`
		Turns       int     `json:"turns"`
		Records     int     `json:"records"`
		Checkpoints []int64 `json:"checkpoint_offsets"`
		Edges       []struct {
			Parent, Child, Status string
		} `json:"edges"`
		Goals []struct {
			Text string `json:"text"`
		} `json:"goals"`
	}
	ctlJSON(t, &show, "show", "-w", ws, sub, "--json")
	if show.Header.ThreadID != sub || show.Turns != 3 || len(show.Edges) != 1 || show.Edges[0].Parent != root || show.Edges[0].Status != "open" || len(show.Goals) != 1 {
		t.Fatalf("show %s: %+v", sub, show)
	}
	ctlJSON(t, &show, "show", "-w", ws, cold, "--json")
	if show.Status != "archived" || show.Turns != 12 || len(show.Checkpoints) == 0 {
		t.Fatalf("show %s (cold): %+v", cold, show)
	}

	// replay: the documented report shape; --full gives every turn's history.
	type replayDoc struct {
		Thread struct {
			ThreadID string `json:"thread_id"`
		} `json:"thread"`
		Turns        []map[string]any  `json:"turns"`
		ModelHistory []json.RawMessage `json:"model_history"`
		Report       struct {
			Skipped      []map[string]any `json:"skipped"`
			RebuiltTurns []string         `json:"rebuilt_turns"`
			Checkpoint   *struct {
				CoveredTurn string `json:"covered_turn"`
			} `json:"checkpoint"`
			TornTail *bool `json:"torn_tail"`
		} `json:"report"`
	}
	var rep, full replayDoc
	ctlJSON(t, &rep, "replay", "-w", ws, root, "--json")
	ctlJSON(t, &full, "replay", "-w", ws, root, "--json", "--full")
	if rep.Thread.ThreadID != root || len(rep.Turns) != 12 || rep.Report.Skipped == nil || rep.Report.RebuiltTurns == nil || rep.Report.TornTail == nil || *rep.Report.TornTail {
		t.Fatalf("replay: %+v", rep)
	}
	if rep.Report.Checkpoint == nil || full.Report.Checkpoint != nil || len(full.ModelHistory) <= len(rep.ModelHistory) {
		t.Fatalf("replay from the checkpoint (%d messages, %+v) vs --full (%d messages, %+v)",
			len(rep.ModelHistory), rep.Report.Checkpoint, len(full.ModelHistory), full.Report.Checkpoint)
	}
	golden(t, "replay-sub", ctl(t, "replay", "-w", ws, sub, "--json").stdout, ws)

	// search
	var hits struct {
		Hits []struct {
			Thread  string `json:"thread"`
			Snippet string `json:"snippet"`
		} `json:"hits"`
	}
	ctlJSON(t, &hits, "search", "-w", ws, "--json", "nil map")
	if len(hits.Hits) == 0 || hits.Hits[0].Thread != root || !strings.Contains(hits.Hits[0].Snippet, "[nil] [map]") {
		t.Fatalf("search: %+v", hits)
	}

	// export, three formats; --artifacts inlines the spilled outputs.
	var doc exportDoc
	ctlJSON(t, &doc, "export", "-w", ws, root, "--format", "json", "--artifacts")
	spilled := 0
	for _, tu := range doc.Turns {
		for _, it := range tu.Items {
			if it.Ref != nil {
				spilled++
				if int64(len(it.Content)) != it.Ref.Size {
					t.Fatalf("inlined artifact of %d bytes, ref says %d", len(it.Content), it.Ref.Size)
				}
			}
		}
	}
	if len(doc.Turns) != 12 || spilled == 0 {
		t.Fatalf("export json: %d turns, %d spilled", len(doc.Turns), spilled)
	}
	r := ctl(t, "export", "-w", ws, root, "--format", "jsonl")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	kinds := map[string]int{}
	for _, l := range lines {
		var v struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("jsonl line %q: %v", l, err)
		}
		kinds[v.Kind]++
	}
	if r.code != 0 || kinds["thread"] != 1 || kinds["turn"] != 12 || kinds["item"] < 16 {
		t.Fatalf("export jsonl: %d %v", r.code, kinds)
	}
	golden(t, "export-sub.md", ctl(t, "export", "-w", ws, sub, "--format", "markdown").stdout, ws)
	if r := ctl(t, "export", "-w", ws, cold, "--format", "markdown"); r.code != 0 || !strings.Contains(r.stdout, "## Turn 8") {
		t.Fatalf("export of a compressed archived thread: %d %s", r.code, r.stderr)
	}
	if r := ctl(t, "export", "-w", ws, root, "--format", "pdf"); r.code != 2 {
		t.Fatalf("export --format pdf: exit %d", r.code)
	}

	// stats
	var st, index statsJSON
	ctlJSON(t, &st, "stats", "-w", ws, "--json", "--verify")
	if st.Source != "rollouts" || st.Threads.Total != 5 || st.Threads.ArchivedCold != 1 || st.Threads.Subagents != 1 || st.Records.Turns != 51 ||
		st.Compression.ColdRatio <= 0 || st.Compression.ColdRatio >= 1 || st.Bytes.ToolResults == 0 || st.Damage.Regions != 0 {
		t.Fatalf("stats --verify: %+v", st)
	}
	golden(t, "stats-counts", mustMarshal(t, map[string]any{"threads": st.Threads, "records": st.Records}), ws)
	// Counted from state.db, the threads and bytes are what reading every
	// rollout finds.
	ctlJSON(t, &index, "stats", "-w", ws, "--json")
	if index.Source != "index" || index.Threads != st.Threads || index.Bytes.Rollouts != st.Bytes.Rollouts ||
		index.Bytes.ArchivedCold != st.Bytes.ArchivedCold || index.Records.Items == 0 || index.Damage.Regions != 0 {
		t.Fatalf("stats from the index: %+v\nfrom the rollouts: %+v", index, st)
	}

	// verify: the documented shape; nothing wrong in a fresh demo.
	var ver struct {
		Threads []struct {
			ID       string           `json:"id"`
			TornTail *bool            `json:"torn_tail"`
			Damage   []map[string]any `json:"damage"`
		} `json:"threads"`
	}
	ctlJSON(t, &ver, "verify", "-w", ws, "--json")
	if len(ver.Threads) != 5 {
		t.Fatalf("verify: %+v", ver)
	}
	for _, v := range ver.Threads {
		if v.TornTail == nil || *v.TornTail || v.Damage == nil || len(v.Damage) != 0 {
			t.Fatalf("verify %s: %+v", v.ID, v)
		}
	}

	// repair: nothing to do on a sound rollout.
	var repairs struct {
		Threads []struct {
			Action string `json:"action"`
		} `json:"threads"`
	}
	ctlJSON(t, &repairs, "repair", "-w", ws, "--all", "--dry-run", "--json")
	if len(repairs.Threads) != 4 { // the compressed one is skipped under --all
		t.Fatalf("repair --all: %+v", repairs)
	}
	for _, rp := range repairs.Threads {
		if rp.Action != "none" {
			t.Fatalf("repair of a sound rollout: %+v", repairs)
		}
	}

	// fork, archive, restore, retention, delete, gc, rebuild.
	var fork struct {
		Thread string `json:"thread"`
		From   string `json:"forked_from"`
		Turns  int    `json:"turns"`
	}
	ctlJSON(t, &fork, "fork", "-w", ws, "demo-11-01-add-retry", "--at-turn", "5", "--id", "forked", "--json")
	if fork.Thread != "forked" || fork.From != "demo-11-01-add-retry" || fork.Turns != 5 {
		t.Fatalf("fork: %+v", fork)
	}
	var life struct {
		Threads []string `json:"threads"`
		Pending []string `json:"pending"`
	}
	ctlJSON(t, &life, "archive", "-w", ws, root, "--json")
	if strings.Join(life.Threads, " ") != root+" "+sub {
		t.Fatalf("archive: %+v", life)
	}
	ctlJSON(t, &life, "restore", "-w", ws, cold, "--json")
	if strings.Join(life.Threads, " ") != cold {
		t.Fatalf("restore: %+v", life)
	}
	ctlJSON(t, &life, "retention", "-w", ws, "--older-than", "1ns", "--dry-run", "--json")
	if strings.Join(life.Threads, " ") != root+" "+sub {
		t.Fatalf("retention --dry-run: %+v", life)
	}
	if r := ctl(t, "delete", "-w", ws, root); r.code != 2 || !strings.Contains(r.stderr, "--yes") {
		t.Fatalf("delete without --yes: %d %s", r.code, r.stderr)
	}
	ctlJSON(t, &life, "delete", "-w", ws, root, "--yes", "--json")
	if strings.Join(life.Threads, " ") != root+" "+sub || len(life.Pending) != 0 {
		t.Fatalf("delete: %+v", life)
	}
	if _, err := os.Stat(filepath.Join(ws, ".craft/tool-results", root)); !os.IsNotExist(err) {
		t.Fatalf("deleted thread's spilled outputs left: %v", err)
	}
	var gc struct {
		Artifacts struct {
			Removed []any `json:"removed"`
		} `json:"artifacts"`
	}
	ctlJSON(t, &gc, "gc", "-w", ws, "--json")
	var rb struct {
		Threads int `json:"threads"`
		Records int `json:"records"`
	}
	os.Remove(filepath.Join(ws, ".craft/state.db"))
	r = ctlJSON(t, &rb, "rebuild", "-w", ws, "--json")
	if rb.Threads != 4 || rb.Records == 0 || !strings.Contains(r.stderr, "missing") {
		t.Fatalf("rebuild after losing state.db: %+v\n%s", rb, r.stderr)
	}
	ctlJSON(t, &page, "list", "-w", ws, "--json", "--all")
	if len(page.Threads) != 4 {
		t.Fatalf("after rebuild: %+v", page)
	}

	// A damaged state.db: kept aside, rebuilt, said on stderr.
	if err := os.WriteFile(filepath.Join(ws, ".craft/state.db"), bytes.Repeat([]byte("not sqlite"), 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	r = ctlJSON(t, &page, "list", "-w", ws, "--json", "--all")
	if len(page.Threads) != 4 || !strings.Contains(r.stderr, "corrupt") {
		t.Fatalf("list over a damaged state.db: %d threads\n%s", len(page.Threads), r.stderr)
	}

	// Errors: the cause and the library's hint, one line each, on stderr.
	r = ctl(t, "replay", "-w", ws, "nosuch")
	if r.code != 1 || r.stdout != "" || !strings.HasPrefix(r.stderr, "error: ") {
		t.Fatalf("replay of an unknown thread: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = ctl(t, "list", "-w", t.TempDir())
	if r.code != 1 || !strings.Contains(r.stderr, "\nhint: ") {
		t.Fatalf("list of a non-workspace: %d %q", r.code, r.stderr)
	}
	if r := ctl(t, "--help"); r.code != 0 || !strings.Contains(r.stdout, "4  thread locked by a live writer") {
		t.Fatalf("--help does not document the exit codes: %s", r.stdout)
	}
}

// While a live host holds threads, every write command refuses them with
// exit 4 and says which lock is held; gc leaves their files alone.
func TestWriteCommandsRefuseALiveHostsThreads(t *testing.T) {
	ws := demoWorkspace(t)
	// The host holds the root, its subagent and the archived thread.
	host := exec.Command(os.Args[0])
	host.Env = append(os.Environ(), envHold+"="+ws+" "+root+" "+sub+" "+cold)
	stdin, err := host.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := host.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var hostErr bytes.Buffer
	host.Stderr = &hostErr
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		host.Wait()
	}()
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("host did not start: %q %s", line, hostErr.String())
	}
	for _, args := range [][]string{
		{"repair", root},
		{"repair", "--all", "--dry-run"},
		{"archive", root},
		{"restore", cold},
		{"delete", "--yes", root},
		{"retention", "--older-than", "1ns"},
	} {
		r := ctl(t, append(args, "-w", ws)...)
		if r.code != exitLocked || !strings.Contains(r.stderr, "locked") || !strings.Contains(r.stderr, ".rollout") {
			t.Errorf("%v while a host holds the thread: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	before := treeSize(filepath.Join(ws, ".craft/tool-results", root))
	if r := ctl(t, "gc", "-w", ws); r.code != 0 || treeSize(filepath.Join(ws, ".craft/tool-results", root)) != before {
		t.Fatalf("gc beside a live host: %d %s", r.code, r.stderr)
	}
	// Reads go on beside the host.
	for _, args := range [][]string{{"list"}, {"show", root}, {"replay", root}, {"verify"}, {"export", root}, {"stats"}} {
		if r := ctl(t, append(args, "-w", ws)...); r.code != 0 {
			t.Errorf("%v beside a live host: exit %d %s", args, r.code, r.stderr)
		}
	}
	// The host's terminal is still running: the commands' opens did not
	// take it for a dead host's.
	var st struct {
		Status string `json:"status"`
	}
	b, _ := os.ReadFile(filepath.Join(ws, ".craft/terminals", root, "host-term.json"))
	if json.Unmarshal(b, &st); st.Status != "running" {
		t.Fatalf("the live host's terminal: %s", b)
	}
}

func mustMarshal(t *testing.T, v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

var (
	reTime = regexp.MustCompile(`\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?`)
	reUUID = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	// Values that depend on the byte size of frames (compressed frames
	// hold times and random ids) or on the clock.
	volatileKeys = regexp.MustCompile(`offset|bytes|size|sha256|elapsed|_ms$|per_sec`)
)

// golden compares output, normalized (times, ids, the workspace path,
// byte offsets), with testdata/golden/<name>; -update rewrites it.
func golden(t *testing.T, name, out, ws string) {
	t.Helper()
	norm := strings.ReplaceAll(out, ws, "<workspace>")
	var v any
	if json.Unmarshal([]byte(norm), &v) == nil {
		v = maskVolatile(v)
		b, _ := json.MarshalIndent(v, "", "  ")
		norm = string(b) + "\n"
	}
	norm = reTime.ReplaceAllString(norm, "<time>")
	norm = reUUID.ReplaceAllString(norm, "<uuid>")
	path := filepath.Join("testdata", "golden", name)
	if *update {
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte(norm), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/rolloutctl -run %s -update to make it)", err, t.Name())
	}
	if string(want) != norm {
		t.Fatalf("%s differs from the golden file (if the change is meant, run with -update and review the diff):\n--- got\n%s", path, norm)
	}
}

func maskVolatile(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if volatileKeys.MatchString(k) {
				if _, isNum := e.(float64); isNum {
					x[k] = "<n>"
					continue
				}
			}
			x[k] = maskVolatile(e)
		}
	case []any:
		for i, e := range x {
			x[i] = maskVolatile(e)
		}
	}
	return v
}
