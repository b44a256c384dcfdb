package follow

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

var ctx = context.Background()

// newRoot makes a data directory with its thread directories on fsys (a
// temporary directory on the operating system's).
func newRoot(t *testing.T, fsys vfs.FS) string {
	t.Helper()
	root := "/ws/.craft"
	if fsys == vfs.OS || fsys == nil {
		root = filepath.Join(t.TempDir(), ".craft")
		fsys = vfs.OS
	}
	for _, d := range []string{rollout.ActiveDir, rollout.ArchivedDir} {
		if err := fsys.MkdirAll(filepath.Join(root, d)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// newHub returns a Hub of root on fsys, closed when the test ends.
func newHub(t *testing.T, root string, fsys vfs.FS, notify bool) *Hub {
	t.Helper()
	h := New(Config{Root: root, FS: fsys, Notify: notify})
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// create makes thread id's rollout, as its writer (another process's,
// unless a Publisher is given what it appends) would.
func create(t *testing.T, fsys vfs.FS, root, id string, sync rollout.SyncPolicy) *rollout.Writer {
	t.Helper()
	path, _ := rollout.ActivePath(root, id)
	w, err := rollout.Create(ctx, path, rollout.ThreadOpened{ThreadID: id, WorkspaceID: "ws"}, rollout.Options{FS: fsys, Sync: sync})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// appendN appends n one-record frames with w (and hands each to p, if
// set); it returns the last one's result.
func appendN(t *testing.T, w *rollout.Writer, p *Publisher, n int) rollout.AppendResult {
	t.Helper()
	var res rollout.AppendResult
	for range n {
		res = appendOne(t, w, p)
	}
	return res
}

func appendOne(t *testing.T, w *rollout.Writer, p *Publisher) rollout.AppendResult {
	t.Helper()
	rec, err := rollout.NewRecord(rollout.KindMetadataUpdated, "", rollout.MetadataUpdated{})
	if err != nil {
		t.Fatal(err)
	}
	recs := []rollout.Record{rec}
	res, err := w.Append(ctx, recs, rollout.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p != nil {
		p.Publish(Frame{FileID: w.Header().FileID, Offset: res.Offset, End: res.End, DataCRC: res.DataCRC, Records: recs})
	}
	return res
}

// drained is what one follower yielded, read on its own goroutine.
type drained struct {
	f    *Follower
	recs chan rollout.Record
	last atomic.Uint64 // the last seq yielded
}

// drain follows thread id from after on, until the test ends.
func drain(t *testing.T, h *Hub, id string, o Options) *drained {
	t.Helper()
	f, err := h.Follow(ctx, id, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	d := &drained{f: f, recs: make(chan rollout.Record, 1<<16)}
	go func() {
		defer close(d.recs)
		for f.Next() {
			d.last.Store(f.Record().Seq)
			d.recs <- f.Record()
		}
	}()
	return d
}

// expect checks that d yields seqs first..last, in order, each once.
func (d *drained) expect(t *testing.T, what string, first, last uint64) []rollout.Record {
	t.Helper()
	var got []rollout.Record
	for want := first; want <= last; want++ {
		select {
		case rec, ok := <-d.recs:
			if !ok {
				t.Fatalf("%s: ended (%v) before seq %d", what, d.f.Err(), want)
			}
			if rec.Seq != want {
				t.Fatalf("%s: seq %d, want %d", what, rec.Seq, want)
			}
			got = append(got, rec)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: seq %d not yielded in 30 s", what, want)
		}
	}
	return got
}

// end waits for d to end, after the records it yields first, and returns
// them.
func (d *drained) end(t *testing.T, what string) []rollout.Record {
	t.Helper()
	var got []rollout.Record
	deadline := time.After(30 * time.Second)
	for {
		select {
		case rec, ok := <-d.recs:
			if !ok {
				return got
			}
			got = append(got, rec)
		case <-deadline:
			t.Fatalf("%s: did not end in 30 s", what)
		}
	}
}

// eventually waits for cond, failing the test after 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 30 s: %s", what)
		}
	}
}

// openFDs counts this process's open descriptors whose target starts with
// prefix (0 where /proc/self/fd does not exist: the check is Linux's).
func openFDs(prefix string) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// syncCounter is the operating system's file system, counting the syncs
// of the files it opened read-only (a follower's, never a writer's).
type syncCounter struct {
	vfs.FS
	syncs atomic.Int64
}

func (c *syncCounter) Open(name string) (vfs.File, error) {
	f, err := c.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return countedFile{f, &c.syncs}, nil
}

type countedFile struct {
	vfs.File
	n *atomic.Int64
}

func (f countedFile) Sync() error {
	f.n.Add(1)
	return f.File.Sync()
}
