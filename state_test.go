package rolloutdb_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/journal"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// A host lists, pages and searches through the facade; what it appended is
// there at once (the projector is flushed before a read), and survives a
// lost state.db, whose loss of business state is reported.
func TestListPageAndSearchThroughFacade(t *testing.T) {
	dir := t.TempDir()
	var log bytes.Buffer
	open := func() *rolloutdb.DB {
		db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{Sync: rollout.SyncNever, Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	db := open()
	for i := range 3 {
		th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: fmt.Sprintf("thread-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		for j := range 4 {
			tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: fmt.Sprintf("question %d of thread %d", j, i)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tu.Add(ctx, rollout.Item{ID: "a", Type: rollout.ItemAgentMessage, Status: rollout.ItemInProgress, Text: "working"}); err != nil {
				t.Fatal(err)
			}
			if _, err := tu.Commit(ctx, rolloutdb.Commit{Items: []rollout.Item{{ID: "a", Type: rollout.ItemAgentMessage, Text: fmt.Sprintf("the wombat answer %d", j)}},
				Usage: rollout.Usage{TotalTokens: 10}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := rolloutdb.StateForTest(db).AddGoal(ctx, "thread-0", "finish"); err != nil {
		t.Fatal(err)
	}
	page, err := db.List(ctx, projection.ListOptions{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Threads) != 2 || page.Threads[0].ID != "thread-2" || page.Threads[0].Turns != 4 || page.Threads[0].Items != 8 || page.NextCursor == "" {
		t.Fatalf("first page: %+v", page)
	}
	turns, err := db.Turns(ctx, "thread-1", 3, 4)
	if err != nil || len(turns) != 2 || turns[0].Items[1].Text != "the wombat answer 2" {
		t.Fatalf("turns 3-4: %+v %v", turns, err)
	}
	hits, err := db.Search(ctx, "wombat", projection.SearchOptions{Limit: 100})
	if err != nil || len(hits) != 12 || !strings.Contains(hits[0].Snippet, "[wombat]") {
		t.Fatalf("search: %+v %v", hits, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopen: state.db is there, nothing rebuilt.
	db = open()
	if rep := db.StateReport(); rep.Created || rep.BusinessStateLost {
		t.Fatalf("second open: %+v", rep)
	}
	if g, _ := rolloutdb.StateForTest(db).Goals(ctx, "thread-0"); len(g) != 1 {
		t.Fatalf("goal lost: %+v", g)
	}
	db.Close()

	// Lost: rebuilt from the rollouts, the loss said out loud.
	for _, s := range []string{"", "-wal", "-shm"} {
		_ = os.Remove(filepath.Join(dir, ".craft", "state.db"+s))
	}
	db = open()
	defer db.Close()
	if rep := db.StateReport(); !rep.Created || !rep.BusinessStateLost || rep.Rebuild == nil || rep.Rebuild.Threads != 3 {
		t.Fatalf("after loss: %+v", rep)
	}
	if !strings.Contains(log.String(), "state.db was missing") {
		t.Fatalf("loss not logged: %s", log.String())
	}
	info, err := db.ThreadInfo(ctx, "thread-1")
	if err != nil || info.Turns != 4 || info.Usage.TotalTokens != 40 {
		t.Fatalf("thread-1 after rebuild: %+v %v", info, err)
	}
}

// With a MemFS workspace, state.db lives in memory and works the same.
func TestStateOnMemFS(t *testing.T) {
	fs := vfs.NewMemFS()
	db, err := rolloutdb.Open(ctx, "/ws", rolloutdb.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	tu, _ := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "hello memfs"})
	if _, err := tu.Commit(ctx, rolloutdb.Commit{}); err != nil {
		t.Fatal(err)
	}
	page, err := db.List(ctx, projection.ListOptions{})
	if err != nil || len(page.Threads) != 1 || page.Threads[0].Turns != 1 || page.Threads[0].Preview != "hello memfs" {
		t.Fatalf("list: %+v %v", page, err)
	}
}

// Found by the crash harness's fault mode (a projection mismatch that
// survived every later read). Read-repair applied the frames it read, then
// read the header of the last one again to record it as the row's anchor.
// If in between the writer cut that frame (its fsync failed: nothing
// acknowledged) and an acknowledged frame of the same seq and length took
// its place, the row held the records of the cut frame under the anchor of
// the new one, and every later read found it anchored: state.db said what
// the rollout did not, until a rebuild. The anchor now comes from the
// frame as it was read.
func TestReadRepairNeverAnchorsAFrameItDidNotApply(t *testing.T) {
	hfs := &hookFS{FS: vfs.NewMemFS()}
	db, err := rolloutdb.Open(ctx, "/ws", rolloutdb.Options{FS: hfs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	meta := func(name string) []rollout.Record {
		rec, _ := rollout.NewRecord(rollout.KindMetadataUpdated, "", rollout.MetadataUpdated{Name: &name})
		return []rollout.Record{rec}
	}
	res, err := th.Append(ctx, meta("zero"), rollout.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ThreadInfo(ctx, "t"); err != nil { // the row is up to date
		t.Fatal(err)
	}
	x := res.End // where the next frame goes

	// The next fsync that would acknowledge a frame (the journal's) blocks,
	// then fails.
	var failSync, holdRead atomic.Bool
	syncEntered, syncGo := make(chan struct{}), make(chan struct{})
	readEntered, readGo := make(chan struct{}), make(chan struct{})
	hfs.onSync = func(name string) error {
		if strings.Contains(name, "/"+journal.Dir+"/") && failSync.CompareAndSwap(true, false) {
			close(syncEntered)
			<-syncGo
			return syscall.EIO
		}
		return nil
	}
	// A read of just the header of the frame at x is the re-read (the
	// reader itself reads ahead): hold it while the frame is replaced.
	hfs.onRead = func(name string, off int64, n int) {
		if strings.HasSuffix(name, "t.rollout") && off == x && n == rollout.FrameHeaderSize && holdRead.CompareAndSwap(true, false) {
			close(readEntered)
			<-readGo
		}
	}
	failSync.Store(true)
	appended := make(chan error)
	go func() {
		_, err := th.Append(ctx, meta("first!"), rollout.AppendOptions{})
		appended <- err
	}()
	<-syncEntered // "first!" is written at x; its fsync hangs
	holdRead.Store(true)
	repaired := make(chan error, 1)
	go func() {
		_, err := db.ThreadInfo(ctx, "t") // read-repair reads "first!"
		repaired <- err
	}()
	replace := func() {
		close(syncGo) // the fsync fails: "first!" is cut, not acknowledged
		if err := <-appended; !errors.Is(err, rollout.ErrNotDurable) {
			t.Fatalf("append of first!: %v, want ErrNotDurable", err)
		}
		res2, err := th.Append(ctx, meta("second"), rollout.AppendOptions{}) // same seq, same length
		if err != nil || res2.Offset != x {
			t.Fatalf("append of second: %+v %v", res2, err)
		}
	}
	select {
	case <-readEntered: // a re-read: replace the frame under it
		replace()
		close(readGo)
		if err := <-repaired; err != nil {
			t.Fatal(err)
		}
	case err := <-repaired: // no re-read: replace the frame after the read
		if err != nil {
			t.Fatal(err)
		}
		holdRead.Store(false)
		replace()
	case <-time.After(30 * time.Second):
		t.Fatal("read-repair neither finished nor re-read the frame")
	}
	info, err := db.ThreadInfo(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "second" {
		t.Fatalf("state.db says the thread is named %q, from a frame that was cut and never acknowledged; the rollout says %q (acknowledged)", info.Name, "second")
	}
}

// hookFS calls onSync before each file sync (an error fails it) and onRead
// before each read.
type hookFS struct {
	vfs.FS
	onSync func(name string) error
	onRead func(name string, off int64, n int)
}

type hookFile struct {
	vfs.File
	fs   *hookFS
	name string
}

func (h *hookFS) wrap(f vfs.File, name string, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &hookFile{File: f, fs: h, name: name}, nil
}

func (h *hookFS) Create(name string) (vfs.File, error) {
	f, err := h.FS.Create(name)
	return h.wrap(f, name, err)
}

func (h *hookFS) Open(name string) (vfs.File, error) {
	f, err := h.FS.Open(name)
	return h.wrap(f, name, err)
}

func (h *hookFS) OpenRW(name string) (vfs.File, error) {
	f, err := h.FS.OpenRW(name)
	return h.wrap(f, name, err)
}

func (f *hookFile) ReadAt(p []byte, off int64) (int, error) {
	if f.fs.onRead != nil {
		f.fs.onRead(f.name, off, len(p))
	}
	return f.File.ReadAt(p, off)
}

func (f *hookFile) Sync() error {
	if f.fs.onSync != nil {
		if err := f.fs.onSync(f.name); err != nil {
			return err
		}
	}
	return f.File.Sync()
}
