package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// fixtureWorkspace makes a workspace holding one fixture as thread
// "fixture" of workspace "ws-fixture" (the ids the fixtures were made with).
func fixtureWorkspace(t *testing.T, fixture string) (ws, path string) {
	return fixtureWorkspaceAs(t, fixture, "ws-fixture", "fixture")
}

// fixtureWorkspaceAs holds the fixture as thread id of workspace wsID (the
// format fixtures were written for thread "t1" of workspace "ws-1").
func fixtureWorkspaceAs(t *testing.T, fixture, wsID, id string) (ws, path string) {
	ws = t.TempDir()
	os.MkdirAll(filepath.Join(ws, ".craft/threads/active"), 0o755)
	os.WriteFile(filepath.Join(ws, ".craft/workspace.json"), []byte(`{"workspace_id":"`+wsID+`","format_version":1}`), 0o644)
	data, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(ws, ".craft/threads/active", id+".rollout")
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

// verify over every format fixture, run as a subprocess: the damage and
// torn tail it reports are the fixture's expectation to the byte, and the
// exit code is 1 exactly when there is damage or the file is unreadable.
// repair then leaves each readable one sound.
func TestFormatFixturesThroughVerifyAndRepair(t *testing.T) {
	paths, _ := filepath.Glob("../../testdata/corrupt/fmt-*.rollout")
	if len(paths) < 8 {
		t.Fatalf("%d fixtures", len(paths))
	}
	type region struct {
		Offset   int64  `json:"offset"`
		Length   int64  `json:"length"`
		Reason   string `json:"reason"`
		FirstSeq uint64 `json:"first_seq"`
		LastSeq  uint64 `json:"last_seq"`
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".rollout")
		t.Run(name, func(t *testing.T) {
			var want struct {
				Damage   []region `json:"damage"`
				TornTail *region  `json:"torn_tail"`
				Error    string   `json:"error"`
				Seqs     []uint64 `json:"seqs"`
			}
			js, _ := os.ReadFile(strings.TrimSuffix(p, ".rollout") + ".json")
			if err := json.Unmarshal(js, &want); err != nil {
				t.Fatal(err)
			}
			ws, _ := fixtureWorkspaceAs(t, p, "ws-1", "t1")
			r := ctl(t, "verify", "-w", ws, "--json")
			var got struct {
				Threads []struct {
					ID       string   `json:"id"`
					TornTail bool     `json:"torn_tail"`
					Torn     *region  `json:"torn"`
					Damage   []region `json:"damage"`
					Error    string   `json:"error"`
				} `json:"threads"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got.Threads) != 1 {
				t.Fatalf("verify: exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
			}
			v := got.Threads[0]
			if want.Error != "" {
				if r.code != 1 || !strings.Contains(v.Error, "header") {
					t.Fatalf("unreadable file: exit %d, %+v", r.code, v)
				}
				return
			}
			if fmt.Sprint(v.Damage) != fmt.Sprint(nonNilRegions(want.Damage)) {
				t.Fatalf("damage %+v, want %+v", v.Damage, want.Damage)
			}
			if v.TornTail != (want.TornTail != nil) || (want.TornTail != nil && *v.Torn != *want.TornTail) {
				t.Fatalf("torn tail %v %+v, want %+v", v.TornTail, v.Torn, want.TornTail)
			}
			wantCode := 0
			switch {
			case len(want.Damage) > 0:
				wantCode = 1
			case len(want.Seqs) == 0:
				wantCode = 3 // no thread header: resume refuses it, so does verify
			}
			if r.code != wantCode {
				t.Fatalf("verify exit %d, want %d\n%s", r.code, wantCode, r.stdout)
			}
			if len(want.Seqs) == 0 {
				// No thread header survives: nothing to continue, and repair
				// says so rather than invent one.
				if r := ctl(t, "repair", "-w", ws, "t1"); r.code != 1 || !strings.Contains(r.stderr, "hint:") {
					t.Fatalf("repair of a rollout with no records: exit %d %s", r.code, r.stderr)
				}
				return
			}
			if r := ctl(t, "repair", "-w", ws, "t1"); r.code != 0 {
				t.Fatalf("repair: exit %d %s", r.code, r.stderr)
			}
			if r := ctl(t, "verify", "-w", ws, "--json"); r.code != 0 || strings.Contains(r.stdout, `"torn_tail": true`) {
				t.Fatalf("verify after repair: exit %d\n%s", r.code, r.stdout)
			}
		})
	}
}

func nonNilRegions[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
