package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// importReport is the part of import --json the tests read.
type importReport struct {
	Threads []struct {
		ID       string         `json:"id"`
		Source   string         `json:"source_path"`
		AlsoRead []string       `json:"also_read"`
		Turns    int            `json:"turns"`
		Existing int            `json:"existing"`
		Damaged  []any          `json:"damaged"`
		Unknown  []any          `json:"unknown"`
		Ignored  map[string]int `json:"ignored"`
	} `json:"threads"`
	Refused []struct {
		Path   string `json:"path"`
		Reason string `json:"reason"`
	} `json:"refused"`
	Failed []struct {
		Path   string `json:"path"`
		Reason string `json:"reason"`
	} `json:"failed"`
}

func runImport(t *testing.T, ws string, args ...string) (importReport, int) {
	t.Helper()
	stdout, errs, code := rolloutctl(t, append([]string{"import", "-w", ws, "--json"}, args...)...)
	var out importReport
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("import %v: exit %d, %v:\n%s\n%s", args, code, err, stdout, errs)
	}
	return out, code
}

// A session in two files is one thread. Where one file is a prefix of the
// other, the longer is imported and the other is listed as also read;
// where they diverge, the one with fewer turns is refused, naming both
// files; a file gone another way than a thread imported before is
// refused too. The report lists each thread once.
func TestImportSessionInTwoFiles(t *testing.T) {
	const tf = "../../testdata/import/codex-two-files/"
	ws := t.TempDir()
	out, code := runImport(t, ws, "--from", "codex", tf+"agree")
	if code != 0 || len(out.Threads) != 1 || out.Threads[0].Turns != 3 || len(out.Threads[0].AlsoRead) != 1 ||
		!strings.Contains(out.Threads[0].AlsoRead[0], "older-copy") || len(out.Refused) != 0 {
		t.Fatalf("agree: exit %d %+v", code, out)
	}
	if out, code = runImport(t, ws, "--from", "codex", tf+"agree"); code != 0 || len(out.Threads) != 1 || out.Threads[0].Turns != 0 || out.Threads[0].Existing != 3 {
		t.Fatalf("agree again: exit %d %+v", code, out)
	}
	// The other file of the session, named: it diverges from the thread.
	other := tf + "diverge/other/rollout-2026-12-02T10-00-00-019ad100.jsonl"
	if out, code = runImport(t, ws, "--from", "codex", other); code != exitFailed || len(out.Threads) != 0 || len(out.Refused) != 1 ||
		!strings.Contains(out.Refused[0].Reason, other) || !strings.Contains(out.Refused[0].Reason, "agree/rollout-2026-12-02T10-00-00-019ad100.jsonl") {
		t.Fatalf("a file gone another way than the thread: exit %d %+v", code, out)
	}

	ws = t.TempDir()
	out, code = runImport(t, ws, "--from", "codex", tf+"diverge")
	if code != 0 || len(out.Threads) != 1 || out.Threads[0].Turns != 3 || len(out.Refused) != 1 ||
		!strings.Contains(out.Refused[0].Reason, filepath.Join("diverge", "other")) || !strings.Contains(out.Refused[0].Reason, tf+"diverge/rollout-") {
		t.Fatalf("diverge: exit %d %+v", code, out)
	}

	ws = t.TempDir()
	out, code = runImport(t, ws, "--from", "claude-code", "../../testdata/import/claude-code-two-files")
	if code != 0 || len(out.Threads) != 1 || out.Threads[0].Turns != 2 || len(out.Threads[0].AlsoRead) != 1 {
		t.Fatalf("claude code, a copy: exit %d %+v", code, out)
	}
}

// Sessions of current versions import with nothing damaged (exit 0),
// their ignored lines counted; a Codex turn's settings show in show
// --records and in export.
func TestImportCurrentShapes(t *testing.T) {
	ws := t.TempDir()
	out, code := runImport(t, ws, "--from", "codex", "../../testdata/import/codex-shapes")
	if code != 0 || len(out.Threads) != 2 || len(out.Refused)+len(out.Failed) != 0 {
		t.Fatalf("codex: exit %d %+v", code, out)
	}
	for _, th := range out.Threads {
		if len(th.Damaged) != 0 || len(th.Unknown) != 0 {
			t.Fatalf("codex %s: %+v", th.ID, th)
		}
	}
	id := "cx-019ad000-1a2b-7c3d-8e4f-5a6b7c8d9e0f"
	if th := out.Threads[1]; th.ID != id || th.Ignored["event_msg/exec_command_end"] != 1 {
		t.Fatalf("the current session (walked second): %+v", th)
	}
	show, errs, code := rolloutctl(t, "show", "-w", ws, "--records", id)
	if code != 0 || !strings.Contains(show, "model gpt-5.1-codex, approval_policy on-request, collaboration_mode default, cwd /home/dev/cli, effort high") ||
		!strings.Contains(show, "sandbox_policy workspace-write") {
		t.Fatalf("show: exit %d %s\n%s", code, errs, show)
	}
	exp, errs, code := rolloutctl(t, "export", "-w", ws, "--format", "json", id)
	var doc struct {
		Turns []struct {
			Model    string            `json:"model"`
			Metadata map[string]string `json:"metadata"`
			Status   string            `json:"status"`
		} `json:"turns"`
	}
	if code != 0 || json.Unmarshal([]byte(exp), &doc) != nil || len(doc.Turns) != 2 || doc.Turns[1].Model != "gpt-5.1-codex-mini" ||
		doc.Turns[1].Metadata["approval_policy"] != "never" || doc.Turns[1].Status != "aborted" {
		t.Fatalf("export: exit %d %s\n%s", code, errs, exp)
	}
	if md, _, code := rolloutctl(t, "export", "-w", ws, id); code != 0 || !strings.Contains(md, "settings: model gpt-5.1-codex") {
		t.Fatalf("export markdown: exit %d\n%s", code, md)
	}

	out, code = runImport(t, ws, "--from", "claude-code", "../../testdata/import/claude-code-shapes")
	if code != 0 || len(out.Threads) != 1 || len(out.Threads[0].Damaged) != 0 || out.Threads[0].Ignored["progress"] != 1 {
		t.Fatalf("claude code: exit %d %+v", code, out)
	}
	list, _, _ := rolloutctl(t, "list", "-w", ws, "--json")
	if !strings.Contains(list, `"name": "Flaky upload test"`) && !strings.Contains(list, `"name":"Flaky upload test"`) {
		t.Fatalf("the session's name is not listed:\n%s", list)
	}
}
