package rolloutdb_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/internal/pgtest/pgtesting"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// fleetBackupWorld is a fleet workspace with a little of everything a
// backup must carry: an archived thread, a subagent with its edge, a
// goal done and one open, a plan, a message read and one unread, and a
// tool output spilled to the fleet's files.
func fleetBackupWorld(t *testing.T) (*rolloutdb.DB, []byte) {
	t.Helper()
	db, err := rolloutdb.Open(ctx, pgtesting.Database(t), rolloutdb.Options{Fleet: rolloutdb.FleetOptions{HostName: "backup-host", LeaseTTL: fleetLease}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	output := []byte(strings.Repeat("tool output\n", 4<<10)) // 48 KiB: spilled
	th := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "boss"})
	mustCommitTurn(t, th, "fix it", []string{"h1"},
		rollout.Item{Type: rollout.ItemToolResult, CallID: "call1", Text: string(output)})
	mustCommitTurn(t, th, "and test it", nil)
	mustClose(t, th)
	mustThreadWithTurns(t, db, rolloutdb.ThreadOptions{ID: "helper",
		Source: rollout.Source{Kind: rollout.SourceSubagent, Parent: "boss", Root: "boss", Depth: 1}}, "look")
	mustThreadWithTurns(t, db, rolloutdb.ThreadOptions{ID: "old"}, "once", "twice")
	if _, err := db.Archive(ctx, "old", "done"); err != nil {
		t.Fatal(err)
	}
	b := db.Business()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.OpenEdge(ctx, "boss", "helper"))
	g, err := b.AddGoal(ctx, "boss", "tests pass")
	must(err)
	must(b.SetGoalStatus(ctx, g.ID, projection.GoalDone))
	_, err = b.AddGoal(ctx, "boss", "ship")
	must(err)
	must(b.SetPlan(ctx, "boss", []projection.PlanStep{{Text: "read", Status: "completed"}, {Text: "write", Status: "pending"}}))
	m, err := b.Send(ctx, "helper", "boss", "found it")
	must(err)
	must(b.MarkRead(ctx, m.ID))
	_, err = b.Send(ctx, "boss", "helper", "thanks")
	must(err)
	return db, output
}

// businessOf is a workspace's business state without ids and times,
// which a backup does not keep.
func businessOf(t *testing.T, db *rolloutdb.DB) map[string]any {
	t.Helper()
	b := db.Business()
	out := map[string]any{}
	edges, err := b.Edges(ctx, projection.EdgeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var es []string
	for _, e := range edges {
		es = append(es, e.Parent+">"+e.Child+":"+e.Status)
	}
	out["edges"] = es
	for _, id := range []string{"boss", "helper", "old"} {
		goals, err := b.Goals(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var gs []string
		for _, g := range goals {
			gs = append(gs, g.Text+":"+g.Status)
		}
		plan, err := b.Plan(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		inbox, err := b.Inbox(ctx, id, false)
		if err != nil {
			t.Fatal(err)
		}
		var ms []string
		for _, m := range inbox {
			ms = append(ms, m.From+">"+m.To+":"+m.Body+":"+map[bool]string{true: "read", false: "unread"}[m.ReadAt != nil])
		}
		out[id] = []any{gs, plan, ms}
	}
	return out
}

// turnsOf is every thread's turns as the index has them.
func turnsOf(t *testing.T, db *rolloutdb.DB) map[string][]projection.TurnInfo {
	t.Helper()
	out := map[string][]projection.TurnInfo{}
	for _, id := range listAll(t, db, projection.ListOptions{Scope: projection.ScopeAll}) {
		turns, err := db.Turns(ctx, id, 1, 1000)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = turns
	}
	return out
}

// A fleet workspace's backup is a local workspace with the same id, the
// same threads where they were, turn for turn, the spilled output and the
// business state; every active thread resumes there without an identity
// error. A second backup into it replaces it.
func TestBackupFleetWorkspace(t *testing.T) {
	src, output := fleetBackupWorld(t)
	dest := filepath.Join(t.TempDir(), "backup")
	rep, err := src.Backup(ctx, dest, rolloutdb.BackupOptions{})
	if err != nil {
		t.Fatalf("%+v", err)
	}
	if rep.Threads != 3 || rep.BytesCopied < int64(len(output)) || rep.Dest != dest {
		t.Fatalf("report %+v", rep)
	}
	if ents, _ := os.ReadDir(filepath.Dir(dest)); len(ents) != 1 {
		t.Fatalf("beside the backup: %v", ents)
	}
	for _, p := range []string{"threads/active/boss.rollout", "threads/active/helper.rollout", "threads/archived/old.rollout", "workspace.json"} {
		if _, err := os.Stat(filepath.Join(dest, ".craft", p)); err != nil {
			t.Fatal(err)
		}
	}
	wantTurns, wantBusiness := turnsOf(t, src), businessOf(t, src)

	check := func(t *testing.T) {
		t.Helper()
		cp, err := rolloutdb.Open(ctx, dest, rolloutdb.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer mustClose(t, cp)
		if cp.WorkspaceID() != src.WorkspaceID() {
			t.Fatalf("workspace id %s, want %s", cp.WorkspaceID(), src.WorkspaceID())
		}
		if st := cp.StateReport(); st.Corrupt || st.BusinessStateLost {
			t.Fatalf("state.db of the backup: %+v", st)
		}
		if got := sorted(listAll(t, cp, projection.ListOptions{Scope: projection.ScopeArchived})); !reflect.DeepEqual(got, []string{"old"}) {
			t.Fatalf("archived threads %v", got)
		}
		gotTurns := turnsOf(t, cp)
		if len(gotTurns) != len(wantTurns) {
			t.Fatalf("threads %d, want %d", len(gotTurns), len(wantTurns))
		}
		var ref *rollout.ArtifactRef
		for id, want := range wantTurns {
			got := gotTurns[id]
			if len(got) != len(want) {
				t.Fatalf("%s: %d turns, want %d", id, len(got), len(want))
			}
			for i := range want {
				if got[i].ID != want[i].ID || got[i].Status != want[i].Status || !reflect.DeepEqual(got[i].Items, want[i].Items) {
					t.Fatalf("%s turn %d:\n got %+v\nwant %+v", id, i+1, got[i], want[i])
				}
				for _, it := range got[i].Items {
					if it.Ref != nil {
						ref = it.Ref
					}
				}
			}
		}
		if ref == nil {
			t.Fatal("no spilled tool output in the backup's turns")
		}
		b, err := cp.Artifacts().Read(artifacts.Ref{Path: ref.Path, Size: ref.Size, SHA256: ref.SHA256})
		if err != nil || !bytes.Equal(b, output) {
			t.Fatalf("spilled output %s: %d bytes, %v", ref.Path, len(b), err)
		}
		if got := businessOf(t, cp); !reflect.DeepEqual(got, wantBusiness) {
			t.Fatalf("business state\n got %v\nwant %v", got, wantBusiness)
		}
		for _, id := range []string{"boss", "helper"} {
			st := mustResumeState(t, cp, id)
			if st.Header.WorkspaceID != src.WorkspaceID() || len(st.Turns) != len(wantTurns[id]) {
				t.Fatalf("%s resumed: workspace %s, %d turns", id, st.Header.WorkspaceID, len(st.Turns))
			}
		}
	}
	check(t)

	// Again, after more turns: the earlier backup is replaced whole.
	th := mustOpenThread(t, src, "helper")
	mustCommitTurn(t, th, "more", nil)
	mustClose(t, th)
	wantTurns = turnsOf(t, src)
	if _, err := src.Backup(ctx, dest, rolloutdb.BackupOptions{}); err != nil {
		t.Fatalf("%+v", err)
	}
	check(t)
	if ents, _ := os.ReadDir(filepath.Dir(dest)); len(ents) != 1 {
		t.Fatalf("beside the backup: %v", ents)
	}
}

// A fleet backup into a directory holding anything but an earlier
// backup of the same workspace is refused, and the directory is left as
// it was.
func TestBackupFleetRefusesOtherDest(t *testing.T) {
	src, _ := fleetBackupWorld(t)
	// Each destination alone in its directory, so that nothing is left
	// beside it either.
	fresh := func() string {
		d := filepath.Join(t.TempDir(), "d")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	other := fresh()
	if err := os.WriteFile(filepath.Join(other, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A local workspace, and a fleet backup of another fleet workspace.
	local := fresh()
	ldb, err := rolloutdb.Open(ctx, local, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, ldb)
	otherSrc, err := rolloutdb.Open(ctx, pgtesting.Database(t), rolloutdb.Options{Fleet: rolloutdb.FleetOptions{HostName: "other", LeaseTTL: fleetLease}})
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, otherSrc)
	otherBackup := filepath.Join(t.TempDir(), "b")
	if _, err := otherSrc.Backup(ctx, otherBackup, rolloutdb.BackupOptions{}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dest := range []string{other, local, otherBackup, file} {
		before := treeOf(t, dest)
		if _, err := src.Backup(ctx, dest, rolloutdb.BackupOptions{}); !errors.Is(err, rolloutdb.ErrNotABackup) {
			t.Fatalf("backup into %s: %v, want ErrNotABackup", dest, err)
		}
		if after := treeOf(t, dest); !reflect.DeepEqual(after, before) {
			t.Fatalf("%s changed:\n%v\n%v", dest, before, after)
		}
		if ents, _ := os.ReadDir(filepath.Dir(dest)); len(ents) != 1 {
			t.Fatalf("beside %s: %v", dest, ents)
		}
	}
	// An empty directory is taken.
	empty := fresh()
	if _, err := src.Backup(ctx, empty, rolloutdb.BackupOptions{}); err != nil {
		t.Fatal(err)
	}
}

// treeOf is every file under root with its content.
func treeOf(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		out[path] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
