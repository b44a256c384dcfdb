package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// fixtureWorkspace makes a workspace holding one fixture as thread
// "fixture" of workspace "ws-fixture" (the ids the fixtures were made with).
func fixtureWorkspace(t *testing.T, fixture string) (ws, path string) {
	ws = t.TempDir()
	os.MkdirAll(filepath.Join(ws, ".craft/threads/active"), 0o755)
	os.WriteFile(filepath.Join(ws, ".craft/workspace.json"), []byte(`{"workspace_id":"ws-fixture","format_version":1}`), 0o644)
	data, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(ws, ".craft/threads/active/fixture.rollout")
	os.WriteFile(path, data, 0o644)
	return ws, path
}

// verify, replay and repair over every recovery fixture: exit codes, the
// replay report's offsets against the fixture's expectation, and a clean
// verify after repair.
func TestFixturesThroughTheCLI(t *testing.T) {
	paths, _ := filepath.Glob("../../testdata/corrupt/rec-*.rollout")
	if len(paths) < 10 {
		t.Fatalf("%d fixtures", len(paths))
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".rollout")
		t.Run(name, func(t *testing.T) {
			var want struct {
				Error    string   `json:"error"`
				Skipped  []string `json:"skipped"`
				TornTail bool     `json:"torn_tail"`
			}
			js, _ := os.ReadFile(strings.TrimSuffix(p, ".rollout") + ".json")
			json.Unmarshal(js, &want)
			ws, _ := fixtureWorkspace(t, p)

			out, errs, code := rolloutctl(t, "replay", "-w", ws, "fixture", "--json")
			if want.Error != "" {
				if code != exitIdentity || !strings.Contains(errs, "hint:") {
					t.Fatalf("replay of a refused rollout: exit %d, %s", code, errs)
				}
				// Repair is about bytes, not identity: it refuses a file whose
				// header is unreadable, and leaves a readable one alone.
				out, _, code := rolloutctl(t, "repair", "-w", ws, "fixture", "--json")
				if code == 0 && !strings.Contains(out, `"action": "none"`) {
					t.Fatalf("repair changed a rollout with an identity problem:\n%s", out)
				}
				return
			}
			var rep struct {
				Report struct {
					Skipped []struct {
						Offset int64  `json:"offset"`
						Length int64  `json:"length"`
						SeqGap uint64 `json:"seq_gap"`
						Reason string `json:"reason"`
					} `json:"skipped"`
					RebuiltTurns []string        `json:"rebuilt_turns"`
					Checkpoint   json.RawMessage `json:"checkpoint"`
					TornTail     bool            `json:"torn_tail"`
				} `json:"report"`
				Turns        []any `json:"turns"`
				ModelHistory []any `json:"model_history"`
			}
			if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
				t.Fatalf("replay: exit %d %v\n%s", code, err, errs)
			}
			if len(rep.Report.Skipped) != len(want.Skipped) || rep.Report.TornTail != want.TornTail || rep.Report.Checkpoint == nil {
				t.Fatalf("replay report %+v, want skipped %v torn %v", rep.Report, want.Skipped, want.TornTail)
			}
			damaged := false
			for i, s := range rep.Report.Skipped {
				if s.Reason != want.Skipped[i] {
					t.Fatalf("skipped[%d] = %s, want %s", i, s.Reason, want.Skipped[i])
				}
				if s.Length > 0 {
					damaged = true
					if s.Offset < rollout.FileHeaderSize {
						t.Fatalf("skipped offset %d", s.Offset)
					}
				}
			}
			_, _, code = rolloutctl(t, "verify", "-w", ws, "fixture")
			if (code == 1) != damaged {
				t.Fatalf("verify exit %d, damaged %v", code, damaged)
			}
			if _, errs, code := rolloutctl(t, "repair", "-w", ws, "--all"); code != 0 {
				t.Fatalf("repair: exit %d %s", code, errs)
			}
			if out, _, code := rolloutctl(t, "verify", "-w", ws, "--json"); code != 0 || strings.Contains(out, `"torn_tail": true`) {
				t.Fatalf("verify after repair: exit %d\n%s", code, out)
			}
		})
	}
}

func TestRepairRefusesALockedThread(t *testing.T) {
	ws, path := fixtureWorkspace(t, "../../testdata/corrupt/rec-item-bitflip.rollout")
	w, _, err := rollout.Open(context.Background(), path, "fixture", rollout.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, args := range [][]string{{"repair", "-w", ws, "fixture"}, {"repair", "-w", ws, "--all", "--dry-run"}} {
		if _, errs, code := rolloutctl(t, args...); code != exitLocked || !strings.Contains(errs, "locked") {
			t.Fatalf("%v: exit %d %s", args, code, errs)
		}
	}
	if _, _, code := rolloutctl(t, "repair", "-w", ws); code != exitUsage {
		t.Fatalf("repair with no thread: exit %d", code)
	}
}
