package rolloutdb_test

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// Items appended concurrently to one turn share an fsync: while one
// appender waits for its fsync, the others write their frames. The first
// fsync of the journal is held until all of them have written; if the
// facade kept appenders out while one waits, they never could, and the
// test fails at the deadline (a deadline for failure only, not a timing).
func TestConcurrentAppendItemsShareAnFsync(t *testing.T) {
	const n = 8
	var writes, syncs atomic.Int64
	var armed atomic.Bool
	all := make(chan struct{})
	var once sync.Once
	fs := &rollout.FaultFS{FS: rollout.NewMemFS(), Hook: func(op rollout.Op, name string) error {
		// The writer's file keeps the name it was created under.
		if !armed.Load() {
			return nil
		}
		switch {
		case op == rollout.OpWrite && strings.Contains(name, "/threads/active/"):
			if writes.Add(1) == n {
				once.Do(func() { close(all) })
			}
		case op == rollout.OpSync && strings.Contains(name, "/"+rollout.JournalDir+"/"):
			syncs.Add(1)
			select {
			case <-all:
			case <-time.After(5 * time.Second):
				return fmt.Errorf("only %d of %d appenders wrote while an fsync was pending", writes.Load(), n)
			}
		}
		return nil
	}}
	db, err := rolloutdb.Open(ctx, "/ws", rolloutdb.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "go"})
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- turn.AppendItem(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: fmt.Sprint("step ", i)})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if s := syncs.Load(); s > 2 {
		t.Fatalf("%d appenders took %d fsyncs", n, s)
	}
}

// Close applies what the projector still holds: it used to mark the
// store closed first, so the last batches failed with ErrClosed (a
// warning, and a state.db left behind its rollouts until a read).
func TestCloseAppliesWhatTheProjectorHolds(t *testing.T) {
	var log strings.Builder
	var mu sync.Mutex
	dir := t.TempDir()
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{Sync: rollout.SyncNever,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &log}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	turn, _ := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "go"})
	for i := 0; i < 200; i++ {
		if err := turn.AppendItem(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: fmt.Sprint("step ", i)}); err != nil {
			t.Fatal(err)
		}
	}
	th.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(log.String(), "could not apply") {
		t.Fatalf("Close dropped the projector's batches:\n%s", log.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
