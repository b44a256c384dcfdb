package rolloutdb_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rolloutdb/rolloutdb"
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
