package rolloutdb_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

var errCrash = errors.New("crash")

// TestLifecycleCrashAtEachStep: a power cut at each write, rename, sync or
// remove of archive, restore and delete leaves every thread of the tree
// either as it was or as the operation makes it, and loadable; running the
// operation again finishes it.
func TestLifecycleCrashAtEachStep(t *testing.T) {
	ops := []struct {
		name  string
		setup func(*rolloutdb.DB) error // brings the tree to the state the op starts from
		run   func(*rolloutdb.DB) error
		after map[string]string // where each thread is once the op is done
	}{
		{"archive", nil,
			func(db *rolloutdb.DB) error { _, err := db.Archive(ctx, "r", "done"); return err },
			map[string]string{"r": "archived", "c": "archived", "g": "archived", "d": "archived"}},
		{"restore",
			func(db *rolloutdb.DB) error { _, err := db.Archive(ctx, "r", "done"); return err },
			func(db *rolloutdb.DB) error { _, err := db.Restore(ctx, "r"); return err },
			map[string]string{"r": "active", "c": "active", "g": "active", "d": "archived"}},
		{"compress",
			func(db *rolloutdb.DB) error { _, err := db.Archive(ctx, "r", "done"); return err },
			func(db *rolloutdb.DB) error {
				_, err := db.CompressArchived(ctx, rolloutdb.CompressOptions{})
				return err
			},
			map[string]string{"r": "cold", "c": "cold", "g": "cold", "d": "cold"}},
		{"restore from cold",
			func(db *rolloutdb.DB) error {
				if _, err := db.Archive(ctx, "r", "done"); err != nil {
					return err
				}
				_, err := db.CompressArchived(ctx, rolloutdb.CompressOptions{})
				return err
			},
			func(db *rolloutdb.DB) error { _, err := db.Restore(ctx, "r"); return err },
			map[string]string{"r": "active", "c": "active", "g": "active", "d": "cold"}},
		{"delete", nil,
			func(db *rolloutdb.DB) error { _, err := db.Delete(ctx, "r"); return err },
			map[string]string{"r": "", "c": "", "g": "", "d": ""}},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			for k := 1; ; k++ {
				crashed, done := crashAt(t, k, op.setup, op.run, op.after)
				if !crashed {
					if !done {
						t.Fatal("no crash and not done")
					}
					if k < 5 {
						t.Fatalf("the operation made only %d writes: the test reaches nothing", k-1)
					}
					return
				}
			}
		})
	}
}

// crashAt runs op and cuts the power at its k-th mutating file operation.
// It reports whether the cut happened (false: op finished first).
func crashAt(t *testing.T, k int, setup, op func(*rolloutdb.DB) error, after map[string]string) (crashed, done bool) {
	t.Helper()
	dir := t.TempDir()
	mem := vfs.NewMemFS()
	// Only the operation's own writes are counted (the projector, on its
	// goroutine, only opens and reads).
	var armed atomic.Bool
	var n atomic.Int64
	ffs := &vfs.FaultFS{FS: mem, Hook: func(o vfs.Op, name string) error {
		if !armed.Load() || o == vfs.OpOpen {
			return nil
		}
		if n.Add(1) == int64(k) {
			return errCrash
		}
		return nil
	}}
	opts := rolloutdb.Options{FS: ffs, StatePath: filepath.Join(dir, "state.db")}
	db, err := rolloutdb.Open(ctx, "/ws", opts)
	if err != nil {
		t.Fatal(err)
	}
	tree(t, db)
	if setup != nil {
		if err := setup(db); err != nil {
			t.Fatal(err)
		}
	}
	before := where(t, mem)
	armed.Store(true)
	err = op(db)
	armed.Store(false)
	if err == nil {
		db.Close()
		return false, true
	}
	if !errors.Is(err, errCrash) {
		t.Fatalf("crash at %d: unexpected error %v", k, err)
	}
	db.Close()
	// The power cut: what was not synced may or may not survive. Open
	// finishes an interrupted move (a rollout under two names).
	cut := mem.Crash(randFor(uint64(k)), false)
	db, err = rolloutdb.Open(ctx, "/ws", rolloutdb.Options{FS: cut, StatePath: filepath.Join(dir, "state.db")})
	if err != nil {
		t.Fatalf("crash at step %d: reopen: %v", k, err)
	}
	got := where(t, cut)
	for id, loc := range got {
		// Compressed or not, archived is archived.
		norm := func(s string) string { return strings.Replace(s, "cold", "archived", 1) }
		if norm(loc) != norm(before[id]) && norm(loc) != norm(after[id]) {
			t.Fatalf("crash at step %d: %s is %q, neither %q before nor %q after", k, id, loc, before[id], after[id])
		}
		if loc == "" {
			continue
		}
		if err := loads(cut, id, loc); err != nil {
			t.Fatalf("crash at step %d: %s does not load: %v", k, id, err)
		}
		want := loc
		if loc == "cold" {
			want = "archived"
		}
		if info, err := db.ThreadInfo(ctx, id); err != nil || info.Status != want {
			t.Fatalf("crash at step %d: %s listed as %+v (%v), is %s", k, id, info.Status, err, loc)
		}
	}
	// Reopened, the operation runs again to its end.
	defer db.Close()
	if err := op(db); err != nil && !errors.Is(err, rolloutdb.ErrNotArchived) && !errors.Is(err, rolloutdb.ErrThreadArchived) && !errors.Is(err, projection.ErrNotFound) {
		t.Fatalf("crash at step %d: running it again: %v", k, err)
	}
	if fin := where(t, cut); fmt.Sprint(fin) != fmt.Sprint(after) {
		t.Fatalf("crash at step %d: after running again %v, want %v", k, fin, after)
	}
	return true, false
}

// where says where each thread's rollout is: "active", "archived",
// "cold" (archived, compressed) or "" (none). Two places at once fails the
// test.
func where(t *testing.T, fs vfs.FS) map[string]string {
	t.Helper()
	out := map[string]string{"r": "", "c": "", "g": "", "d": ""}
	for _, loc := range []string{"active", "archived", "cold"} {
		for id := range out {
			if _, err := fs.Stat(coldOr(loc, id)); err == nil {
				if out[id] != "" {
					t.Fatalf("%s is in two places", id)
				}
				out[id] = loc
			}
		}
	}
	return out
}

func coldOr(loc, id string) string {
	if loc == "cold" {
		return filepath.Join("/ws/.craft/threads/archived", id+".rollout.zst")
	}
	return filepath.Join("/ws/.craft/threads", loc, id+".rollout")
}

// loads resumes a thread's rollout wherever it is.
func loads(fs vfs.FS, id, loc string) error {
	if loc != "cold" {
		_, err := recovery.ResumeFile(ctx, fs, coldOr(loc, id), recovery.Options{ThreadID: id})
		return err
	}
	src, size, err := rollout.OpenCold(fs, coldOr(loc, id))
	if err != nil {
		return err
	}
	_, err = recovery.Resume(ctx, src, size, recovery.Options{ThreadID: id})
	return err
}
