package rolloutdb

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/backup"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// lastSeqOf reads a backed-up rollout whole: its last seq, and whether it
// is clean (no damage, no torn tail).
func lastSeqOf(t *testing.T, path string) uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	r, err := rollout.NewReader(f, st.Size(), rollout.ReaderOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
	}
	if r.Err() != nil || len(r.Damage()) > 0 || r.TornTail() != nil {
		t.Fatalf("%s: err %v, damage %v, torn %v", path, r.Err(), r.Damage(), r.TornTail())
	}
	return r.LastSeq()
}

// A backup taken while another process appends holds every record that
// process acknowledged before the backup started, nothing torn; it opens
// as a workspace under another path; a second backup copies only what
// changed, and follows the thread into threads/archived.
func TestBackupWhileAnotherProcessAppends(t *testing.T) {
	dir, dest := t.TempDir(), filepath.Join(t.TempDir(), "backup")
	db, err := Open(ictx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ictx, ThreadOptions{ID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Business().AddGoal(ictx, "x", "keep this"); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ictx)
	defer cancel()
	cmd := exec.CommandContext(cctx, os.Args[0], "-test.run=^TestHelperFollowWriter$")
	cmd.Env = append(os.Environ(), "ROLLOUTDB_FOLLOW_WRITER="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var acked uint64
	for acked < 200 && sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
			acked, _ = strconv.ParseUint(s, 10, 64)
		}
	}
	before := acked // acknowledged before the backup started
	rep, err := db.Backup(ictx, dest, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Incremental || rep.Threads != 1 || rep.BytesCopied != rep.BytesTotal {
		t.Fatalf("first backup: %+v", rep)
	}
	if got := lastSeqOf(t, filepath.Join(dest, ".craft/threads/active/x.rollout")); got < before {
		t.Fatalf("the backup holds seqs to %d; %d were acknowledged before it started", got, before)
	}
	archived := false
	for sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
			acked, _ = strconv.ParseUint(s, 10, 64)
		}
		archived = archived || sc.Text() == "archived"
	}
	if err := cmd.Wait(); err != nil || !archived {
		t.Fatalf("writer: %v, archived %v", err, archived)
	}
	if bad, err := VerifyBackup(dest, ""); err != nil || len(bad) > 0 {
		t.Fatalf("verify: %v %v", bad, err)
	}

	var first BackupManifest
	if b, err := os.ReadFile(filepath.Join(dest, ".craft", BackupManifestName)); err != nil || json.Unmarshal(b, &first) != nil || len(first.Rollouts) != 1 {
		t.Fatalf("first manifest: %v %+v", err, first)
	}
	rep2, err := db.Backup(ictx, dest, BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Only the new bytes of the rollout (archived since: moved in the
	// backup too, and continued), and state.db again.
	if !rep2.Incremental || rep2.BytesTotal-rep2.BytesCopied != first.Rollouts[0].Size {
		t.Fatalf("second backup: %+v; the first had copied %d bytes of the rollout", rep2, first.Rollouts[0].Size)
	}
	if got := lastSeqOf(t, filepath.Join(dest, ".craft/threads/archived/x.rollout")); got != acked+1 {
		t.Fatalf("after the second backup: seqs to %d, want %d (all acknowledged, and the archive)", got, acked+1)
	}
	if _, err := os.Stat(filepath.Join(dest, ".craft/threads/active/x.rollout")); !os.IsNotExist(err) {
		t.Fatalf("the active copy stayed beside the archived one: %v", err)
	}
	// It is a workspace, under another absolute path too.
	moved := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Rename(dest, moved); err != nil {
		t.Fatal(err)
	}
	bdb, err := Open(ictx, moved, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	info, err := bdb.ThreadInfo(ictx, "x")
	if err != nil || info.Status != projection.LocationArchived || info.ProjectedSeq != acked+1 {
		t.Fatalf("restored thread: %+v, %v", info, err)
	}
	goals, err := bdb.Business().Goals(ictx, "x")
	if err != nil || len(goals) != 1 {
		t.Fatalf("business state in the backup: %+v, %v", goals, err)
	}
}

// An interrupted backup is finished by the next run; a destination that
// is not a backup of this workspace is refused.
func TestBackupInterruptedAndRefused(t *testing.T) {
	dir, dest := t.TempDir(), filepath.Join(t.TempDir(), "backup")
	db, err := Open(ictx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	oneTurnThreads(t, db, "q ", "a", "b", "c")
	stop := errors.New("interrupted")
	n := 0
	_, err = db.Backup(ictx, dest, BackupOptions{Progress: func(string) error {
		if n++; n == 3 {
			return stop
		}
		return nil
	}})
	if !errors.Is(err, stop) {
		t.Fatalf("interrupted backup: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dest, ".craft", BackupManifestName)); !os.IsNotExist(err) {
		t.Fatalf("an interrupted backup wrote its manifest: %v", err)
	}
	if _, err := db.Backup(ictx, dest, BackupOptions{}); err != nil {
		t.Fatalf("the run after the interrupted one: %v", err)
	}
	if bad, err := VerifyBackup(dest, ""); err != nil || len(bad) > 0 {
		t.Fatalf("verify: %v %v", bad, err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if got := lastSeqOf(t, filepath.Join(dest, ".craft/threads/active", id+".rollout")); got != 4 {
			t.Fatalf("%s: backed up to seq %d, want 4", id, got)
		}
	}
	// A change to a copy is found by verify.
	if err := os.WriteFile(filepath.Join(dest, ".craft/threads/active/a.rollout"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if bad, err := VerifyBackup(dest, ""); err != nil || len(bad) != 1 {
		t.Fatalf("verify after a change: %v %v", bad, err)
	}

	// Refused: a directory holding something else, the workspace itself,
	// a backup of another workspace.
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	odb, err := Open(ictx, t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer odb.Close()
	for _, d := range []string{other, dir, filepath.Join(dir, "sub")} {
		if _, err := db.Backup(ictx, d, BackupOptions{}); !errors.Is(err, ErrNotABackup) {
			t.Fatalf("backup into %s: %v, want ErrNotABackup", d, err)
		}
	}
	if _, err := odb.Backup(ictx, dest, BackupOptions{}); !errors.Is(err, ErrNotABackup) {
		t.Fatalf("another workspace's backup into this one's: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(other, "notes.txt")); string(b) != "mine" {
		t.Fatal("a refused backup changed the destination")
	}
}

// From a review of the backup: a source rewritten by repair, a damaged
// copy, a destination that is the workspace through a symbolic link, a
// manifest naming a path outside the backup.
func TestBackupReviewCases(t *testing.T) {
	dir, dest := t.TempDir(), filepath.Join(t.TempDir(), "backup")
	db, err := Open(ictx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ictx, ThreadOptions{ID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		turn, err := th.StartTurn(ictx, TurnOptions{Input: "q"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := turn.Commit(ictx, Commit{}); err != nil {
			t.Fatal(err)
		}
	}
	path := th.Path()
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Backup(ictx, dest, BackupOptions{}); err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dest, ".craft/threads/active/r.rollout")
	want := lastSeqOf(t, path)

	// A damaged copy is made again, not continued and approved.
	b, _ := os.ReadFile(copyPath)
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(copyPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Backup(ictx, dest, BackupOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := lastSeqOf(t, copyPath); got != want {
		t.Fatalf("the damaged copy: seqs to %d after the next backup, want %d", got, want)
	}
	if bad, err := VerifyBackup(dest, ""); err != nil || len(bad) > 0 {
		t.Fatalf("verify: %v %v", bad, err)
	}

	// A source that repair rewrote (damage in the middle: records_lost in
	// its place, a new file) is copied whole again, not continued.
	src, _ := os.ReadFile(path)
	h, err := rollout.ReadFrameHeader(bytes.NewReader(src), rollout.FileHeaderSize)
	if err != nil {
		t.Fatal(err)
	}
	src[rollout.FileHeaderSize+rollout.FrameHeaderSize+int64(h.Length)+rollout.FrameHeaderSize+3] ^= 0xff
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := recovery.Repair(ictx, path, "r", recovery.RepairOptions{}); err != nil {
		t.Fatal(err)
	}
	th, err = db.OpenThread(ictx, "r")
	if err != nil {
		t.Fatal(err)
	}
	turn, err := th.StartTurn(ictx, TurnOptions{Input: "after the repair"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := turn.Commit(ictx, Commit{}); err != nil {
		t.Fatal(err)
	}
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Backup(ictx, dest, BackupOptions{}); err != nil {
		t.Fatal(err)
	}
	cb, _ := os.ReadFile(copyPath)
	sb, _ := os.ReadFile(path)
	if !bytes.Equal(cb, sb) {
		t.Fatalf("after a repair of the source, the copy (%d bytes) is not the source (%d bytes)", len(cb), len(sb))
	}

	// The workspace through a symbolic link, and a manifest that names a
	// path outside the backup: refused, nothing written.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Backup(ictx, link, BackupOptions{}); !errors.Is(err, ErrNotABackup) {
		t.Fatalf("backup into the workspace through a link: %v", err)
	}
	mpath := filepath.Join(dest, ".craft", BackupManifestName)
	mb, _ := os.ReadFile(mpath)
	var m BackupManifest
	if err := json.Unmarshal(mb, &m); err != nil {
		t.Fatal(err)
	}
	m.Rollouts[0].Path = "../../outside.rollout"
	mb, _ = json.Marshal(m)
	if err := os.WriteFile(mpath, mb, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Backup(ictx, dest, BackupOptions{}); !errors.Is(err, ErrNotABackup) {
		t.Fatalf("a manifest naming a path outside the backup: %v", err)
	}
}

// A restore makes a new workspace under another path from a backup, with
// its threads and business state; a target that is not empty, and a
// backup whose files differ from its manifest, are refused and nothing is
// written.
func TestRestoreBackup(t *testing.T) {
	dir, dest := t.TempDir(), filepath.Join(t.TempDir(), "backup")
	db, err := Open(ictx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	oneTurnThreads(t, db, "restore me ", "a", "b")
	if _, err := db.Backup(ictx, dest, BackupOptions{}); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "new", "place")
	rep, err := RestoreBackup(ictx, dest, target, "")
	if err != nil || rep.Threads != 2 || rep.Files == 0 || rep.Target != target {
		t.Fatalf("restore: %+v, %v", rep, err)
	}
	if _, err := os.Stat(filepath.Join(target, ".craft", BackupManifestName)); !os.IsNotExist(err) {
		t.Fatalf("the restore kept the backup's manifest: %v", err)
	}
	rdb, err := Open(ictx, target, Options{})
	if err != nil {
		t.Fatal(err)
	}
	hits, err := rdb.Search(ictx, "restore", projection.SearchOptions{})
	if err != nil || len(hits) != 2 {
		t.Fatalf("search in the restored workspace: %+v, %v", hits, err)
	}
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}

	if _, err := RestoreBackup(ictx, dest, target, ""); !errors.Is(err, ErrRestoreTarget) {
		t.Fatalf("a restore onto a workspace: %v", err)
	}
	if _, err := RestoreBackup(ictx, dest, filepath.Join(dest, ".craft", "inside"), ""); !errors.Is(err, ErrRestoreTarget) {
		t.Fatalf("a restore into the backup itself: %v", err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(filepath.Join(dest, ".craft", "threads"), link); err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreBackup(ictx, dest, filepath.Join(link, "new", "w"), ""); !errors.Is(err, ErrRestoreTarget) {
		t.Fatalf("a restore into the backup through a link: %v", err)
	}
	// A state.db damaged in the backup: refused (its business state would
	// be lost), nothing left behind.
	sdb := filepath.Join(dest, ".craft", "state.db")
	good, _ := os.ReadFile(sdb)
	bad := append([]byte(nil), good...)
	for i := 100; i < len(bad); i += 4096 {
		bad[i] ^= 0xff
	}
	if err := os.WriteFile(sdb, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	damaged := filepath.Join(t.TempDir(), "damaged")
	if _, err := RestoreBackup(ictx, dest, damaged, ""); err == nil {
		t.Fatal("a restore of a backup with a damaged state.db succeeded")
	}
	if _, err := os.Stat(damaged); !os.IsNotExist(err) {
		t.Fatalf("the refused restore left %s: %v", damaged, err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(damaged)); len(ents) != 0 {
		t.Fatalf("the refused restore left %v", ents)
	}
	if err := os.WriteFile(sdb, good, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dest, ".craft/threads/active/a.rollout"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other")
	if _, err := RestoreBackup(ictx, dest, other, ""); err == nil {
		t.Fatal("a restore from a damaged backup succeeded")
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Fatalf("the refused restore left %s: %v", other, err)
	}
	if _, err := RestoreBackup(ictx, t.TempDir(), other, ""); !errors.Is(err, ErrNotABackup) {
		t.Fatalf("a restore from a directory that is not a backup: %v", err)
	}
}

// oneTurnThreads creates threads of one completed turn each, input prefix
// and the thread id.
func oneTurnThreads(t *testing.T, db *DB, prefix string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		th, err := db.CreateThread(ictx, ThreadOptions{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		turn, err := th.StartTurn(ictx, TurnOptions{Input: prefix + id})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := turn.Commit(ictx, Commit{}); err != nil {
			t.Fatal(err)
		}
		if err := th.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A DB on vfs.MemFS backs up into its own file system: the rollouts and,
// copied in from the real disk where SQLite writes it, state.db with the
// business state (state.db on the real disk, as the crash harness's power
// mode keeps it, or private in memory). The backup verifies, survives a
// power cut, and opens as a workspace with its business state.
func TestBackupOnMemFS(t *testing.T) {
	for _, realState := range []bool{true, false} {
		mem := vfs.NewMemFS()
		o := Options{FS: mem}
		if realState {
			o.StatePath = filepath.Join(t.TempDir(), "state.db")
		}
		db, err := Open(ictx, "/ws", o)
		if err != nil {
			t.Fatal(err)
		}
		oneTurnThreads(t, db, "in memory ", "a", "b")
		if _, err := db.Business().AddGoal(ictx, "a", "keep this"); err != nil {
			t.Fatal(err)
		}
		rep, err := db.Backup(ictx, "/backup", BackupOptions{})
		if err != nil || rep.Threads != 2 {
			t.Fatalf("backup on MemFS (state.db on the real disk %v): %+v %v", realState, rep, err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		after := mem.Crash(rand.New(rand.NewPCG(1, 1)), false)
		if bad, err := backup.Verify("/backup", backup.VerifyOptions{FS: after}); err != nil || len(bad) > 0 {
			t.Fatalf("the backup after a power cut: %v %v", bad, err)
		}
		// Its state.db is SQLite's: out to the real disk to open it.
		b, err := vfs.ReadFile(after, "/backup/.craft/state.db", 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		state := filepath.Join(t.TempDir(), "state.db")
		if err := os.WriteFile(state, b, 0o644); err != nil {
			t.Fatal(err)
		}
		bdb, err := Open(ictx, "/backup", Options{FS: after, StatePath: state})
		if err != nil {
			t.Fatal(err)
		}
		goals, err := bdb.Business().Goals(ictx, "a")
		ids, lerr := bdb.ListThreadIDs(ictx)
		if st := bdb.StateReport(); err != nil || lerr != nil || len(goals) != 1 || goals[0].Text != "keep this" || len(ids) != 2 || st.BusinessStateLost || st.Created {
			t.Fatalf("the backup opened: goals %+v %v, threads %v %v, state %+v", goals, err, ids, lerr, st)
		}
		if err := bdb.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
