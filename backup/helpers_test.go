package backup

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

var bg = context.Background()

// The workspace and the backup of the tests, on one in-memory file system.
const (
	wsPath   = "/ws"
	wsRoot   = "/ws/.craft"
	dest     = "/backup"
	destData = "/backup/.craft"
)

// testSource is a workspace on a MemFS as a backup sees it: rollouts the
// rollout package wrote, artifacts, workspace.json, and a state.db that
// CopyState writes to the real disk, as SQLite does. The backup goes
// through ffs, whose Hook a test sets.
type testSource struct {
	mem   *vfs.MemFS
	ffs   *vfs.FaultFS
	state []byte
}

func (s *testSource) Workspace() Workspace {
	return Workspace{ID: "ws-1", Path: wsPath, DataDir: ".craft", FS: s.ffs}
}

// DurableEnd is never known: the backup syncs each rollout and copies
// what it holds, as for another process's thread.
func (s *testSource) DurableEnd(thread, rel string) (int64, bool) { return 0, false }

func (s *testSource) HasThread(thread string) bool {
	for _, d := range []string{rollout.ActiveDir, rollout.ArchivedDir} {
		if _, err := s.mem.Lstat(filepath.Join(wsRoot, d, thread+rollout.RolloutExt)); err == nil {
			return true
		}
	}
	return false
}

func (s *testSource) Appends() uint64 { return 0 }

func (s *testSource) CopyState(ctx context.Context, path string) error {
	return os.WriteFile(path, s.state, 0o644)
}

// after is the source on what a power cut left of its file system.
func (s *testSource) after(mem *vfs.MemFS) *testSource {
	return &testSource{mem: mem, ffs: &vfs.FaultFS{FS: mem}, state: s.state}
}

// newWorkspace makes a workspace of three threads (a, b, c), a spilled
// tool output and a terminal log.
func newWorkspace(t *testing.T) *testSource {
	t.Helper()
	mem := vfs.NewMemFS()
	s := &testSource{mem: mem, ffs: &vfs.FaultFS{FS: mem}, state: []byte("state.db, first")}
	for _, d := range []string{rollout.ActiveDir, rollout.ArchivedDir} {
		if err := mem.MkdirAll(filepath.Join(wsRoot, d)); err != nil {
			t.Fatal(err)
		}
	}
	put(t, mem, "workspace.json", `{"workspace_id":"ws-1","format_version":1}`)
	for _, id := range []string{"a", "b", "c"} {
		writeThread(t, mem, id, 3)
	}
	put(t, mem, "tool-results/a/call-1.out", "a spilled tool output\n")
	put(t, mem, "terminals/a/term.log", "building\n")
	return s
}

// change changes the workspace between two backups: a thread appended
// to, one archived, one deleted, one new; a terminal log rewritten, a
// new tool output; state.db.
func change(t *testing.T, s *testSource) {
	t.Helper()
	w, _, err := rollout.Open(bg, filepath.Join(wsRoot, rollout.ActiveDir, "a.rollout"), "a", rollout.Options{FS: s.mem})
	if err != nil {
		t.Fatal(err)
	}
	appendItems(t, w, "a", 2)
	from, to := filepath.Join(wsRoot, rollout.ActiveDir, "b.rollout"), filepath.Join(wsRoot, rollout.ArchivedDir, "b.rollout")
	if err := s.mem.Rename(from, to); err != nil {
		t.Fatal(err)
	}
	if err := s.mem.Remove(filepath.Join(wsRoot, rollout.ActiveDir, "c.rollout")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{rollout.ActiveDir, rollout.ArchivedDir} {
		if err := s.mem.SyncDir(filepath.Join(wsRoot, d)); err != nil {
			t.Fatal(err)
		}
	}
	writeThread(t, s.mem, "d", 1)
	put(t, s.mem, "terminals/a/term.log", "building\nok\n")
	put(t, s.mem, "tool-results/d/call-1.out", "another tool output\n")
	s.state = []byte("state.db, second: longer")
}

// put writes a file of the workspace durably, rel to its data directory.
func put(t *testing.T, fsys vfs.FS, rel, content string) {
	t.Helper()
	path := filepath.Join(wsRoot, filepath.FromSlash(rel))
	for d := filepath.Dir(path); d != wsRoot; d = filepath.Dir(d) {
		if _, err := fsys.Lstat(d); err != nil {
			if err := fsys.MkdirAll(d); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := vfs.WriteFileAtomic(fsys, path, []byte(content)); err != nil {
		t.Fatal(err)
	}
}

// writeThread creates the rollout of thread id with n items after its
// header.
func writeThread(t *testing.T, fsys vfs.FS, id string, n int) {
	t.Helper()
	path := filepath.Join(wsRoot, rollout.ActiveDir, id+rollout.RolloutExt)
	w, err := rollout.Create(bg, path, rollout.ThreadOpened{ThreadID: id, WorkspaceID: "ws-1", Source: rollout.Source{Kind: rollout.SourceUser}}, rollout.Options{FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	appendItems(t, w, id, n)
}

// appendItems appends n items to w, one frame each, and closes it.
func appendItems(t *testing.T, w *rollout.Writer, id string, n int) {
	t.Helper()
	for i := range n {
		r, err := rollout.NewRecord(rollout.KindItemAppended, "turn", rollout.Item{ID: rollout.NewID(), Type: rollout.ItemAgentMessage, Status: rollout.ItemCompleted,
			Text: fmt.Sprintf("%s: item %d %s", id, i, bytes.Repeat([]byte("x"), 40))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Append(bg, []rollout.Record{r}, rollout.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// snapshot is every file of the workspace's data directory (paths
// relative to it) with its content, and state.db as CopyState writes it:
// what a backup taken now holds, and a restore of it.
func snapshot(t *testing.T, s *testSource) map[string]string {
	t.Helper()
	snap := files(t, s.mem, wsRoot)
	snap["state.db"] = string(s.state)
	return snap
}

// files is every file under root, by path relative to it, with its
// content.
func files(t *testing.T, fsys vfs.FS, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := vfs.Walk(fsys, root, func(path string, info vfs.Info) error {
		b, err := vfs.ReadFile(fsys, path, 1<<30)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkCopy is a restore's Check on fsys: every active rollout of the copy
// reads whole, with no damage and no torn tail.
func checkCopy(fsys vfs.FS) Check {
	return func(ctx context.Context, dir, dataDir string, sqliteChanged bool) (int, error) {
		active := filepath.Join(dir, dataDir, rollout.ActiveDir)
		names, err := fsys.ReadDir(active)
		if err != nil {
			return 0, err
		}
		for _, n := range names {
			if err := readRollout(fsys, filepath.Join(active, n)); err != nil {
				return 0, err
			}
		}
		return len(names), nil
	}
}

// readRollout reads a rollout whole and says what is wrong with it.
func readRollout(fsys vfs.FS, path string) error {
	f, err := fsys.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return err
	}
	r, err := rollout.NewReader(f, size, rollout.ReaderOptions{Path: path})
	if err != nil {
		return err
	}
	for r.Next() {
	}
	if r.Err() != nil || len(r.Damage()) > 0 || r.TornTail() != nil {
		return fmt.Errorf("%s: err %v, damage %v, torn %v", path, r.Err(), r.Damage(), r.TornTail())
	}
	return nil
}

// restores counts the restores of checkBackup, for their targets' names.
var restores int

// checkBackup checks the backup in dest on fsys: the manifest there names
// no file that is missing, short or changed (Verify), and a restore of it
// holds exactly one of snaps, the workspace as it was when a backup was
// taken. It returns which.
func checkBackup(t *testing.T, fsys vfs.FS, snaps ...map[string]string) int {
	t.Helper()
	bad, err := Verify(dest, VerifyOptions{FS: fsys})
	if err != nil || len(bad) > 0 {
		t.Fatalf("the backup does not verify: %v %v", bad, err)
	}
	restores++
	target := fmt.Sprintf("/restored/%d", restores)
	if _, err := Restore(bg, dest, target, checkCopy(fsys), RestoreOptions{FS: fsys}); err != nil {
		t.Fatalf("restore of the backup: %v", err)
	}
	got := files(t, fsys, filepath.Join(target, ".craft"))
	for i, snap := range snaps {
		if maps.Equal(got, snap) {
			if err := vfs.RemoveAll(fsys, target); err != nil {
				t.Fatal(err)
			}
			return i
		}
	}
	t.Fatalf("the restore holds %v, which is none of the workspaces backed up %v", keys(got), func() (ks [][]string) {
		for _, s := range snaps {
			ks = append(ks, keys(s))
		}
		return ks
	}())
	return -1
}

func keys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
