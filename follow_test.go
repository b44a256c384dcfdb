package rolloutdb_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// followed is what one follower saw, collected on its own goroutine.
type followed struct {
	seqs  []uint64
	kinds []rollout.Kind
	err   error
	end   rolloutdb.FollowEnd
	n     atomic.Int64 // records seen so far, for a look while it runs
	done  chan struct{}
}

// collect drains f on a goroutine, after delay (a follower that falls
// behind).
func collect(f *rolloutdb.Follower, delay <-chan struct{}) *followed {
	c := &followed{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		if delay != nil {
			<-delay
		}
		for f.Next() {
			c.seqs = append(c.seqs, f.Record().Seq)
			c.kinds = append(c.kinds, f.Record().Kind)
			c.n.Add(1)
		}
		c.err, c.end = f.Err(), f.End()
	}()
	return c
}

func (c *followed) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: the follower did not end", what)
	}
}

// check: every seq from first to last, once, in order.
func (c *followed) check(t *testing.T, what string, first, last uint64) {
	t.Helper()
	if len(c.seqs) != int(last-first+1) {
		t.Fatalf("%s: %d records, want seqs %d..%d", what, len(c.seqs), first, last)
	}
	for i, s := range c.seqs {
		if s != first+uint64(i) {
			t.Fatalf("%s: record %d has seq %d, want %d", what, i, s, first+uint64(i))
		}
	}
}

// Followers of a thread this DB writes: one from the start, one from the
// middle, one that falls far behind, all while 8 goroutines append; all
// end when the thread is archived, having seen every record once.
func TestFollowInProcess(t *testing.T) {
	db, err := rolloutdb.Open(ctx, t.TempDir(), rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "f"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Commit(ctx, rolloutdb.Commit{}); err != nil {
		t.Fatal(err)
	}
	mid := th.LastSeq()
	var fs []*rolloutdb.Follower
	for _, after := range []uint64{0, mid, 0} {
		f, err := db.Follow(ctx, "f", rolloutdb.FollowOptions{AfterSeq: after})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fs = append(fs, f)
	}
	behind := make(chan struct{})
	all, fromMid, late := collect(fs[0], nil), collect(fs[1], nil), collect(fs[2], behind)

	turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "go"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if _, err := turn.Add(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: fmt.Sprintf("%d.%d", g, i)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if _, err := turn.Commit(ctx, rolloutdb.Commit{}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Archive(ctx, "f", "done"); err != nil {
		t.Fatal(err)
	}
	last := th.LastSeq()
	close(behind)
	for _, c := range []struct {
		name  string
		f     *followed
		first uint64
	}{{"from the start", all, 1}, {"from the middle", fromMid, mid + 1}, {"behind", late, 1}} {
		c.f.wait(t, c.name)
		if c.f.err != nil || c.f.end != rolloutdb.FollowArchived {
			t.Fatalf("%s: ended with %v, %q; want archived", c.name, c.f.err, c.f.end)
		}
		c.f.check(t, c.name, c.first, last)
		if k := c.f.kinds[len(c.f.kinds)-1]; k != rollout.KindArchived {
			t.Fatalf("%s: the last record is %s", c.name, k)
		}
	}
}

// A follower of a deleted thread ends with ErrThreadDeleted; one whose
// rollout a repair rewrote ends with ErrRolloutReplaced; closing the
// follower or the DB stops a Next that waits.
func TestFollowSeesDeleteRepairAndClose(t *testing.T) {
	dir := t.TempDir()
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	newThreadWithTurn(t, db, "gone")
	newThreadWithTurn(t, db, "fixed")
	for _, id := range []string{"gone", "fixed"} {
		th, err := db.OpenThread(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "more"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tu.Commit(ctx, rolloutdb.Commit{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := th.Close(); err != nil {
			t.Fatal(err)
		}
	}
	follow := func(id string) (*rolloutdb.Follower, *followed) {
		f, err := db.Follow(ctx, id, rolloutdb.FollowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f, collect(f, nil)
	}
	// Seen through: every record is yielded before anything happens.
	waitSeen := func(c *followed, n int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
			select {
			case <-c.done:
				t.Fatalf("ended early: %v", c.err)
			default:
			}
			if c.n.Load() >= int64(n) || time.Now().After(deadline) {
				return
			}
		}
	}
	_, gone := follow("gone")
	waitSeen(gone, 13)
	if _, err := db.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	gone.wait(t, "deleted")
	if !errors.Is(gone.err, rolloutdb.ErrThreadDeleted) {
		t.Fatalf("deleted: %v", gone.err)
	}

	_, fixed := follow("fixed")
	waitSeen(fixed, 13)
	// Damage in the middle, repaired: the frames after it move.
	path := dir + "/.craft/threads/active/fixed.rollout"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := rollout.ReadFrameHeader(bytes.NewReader(b), rollout.FileHeaderSize)
	if err != nil {
		t.Fatal(err)
	}
	second := rollout.FileHeaderSize + rollout.FrameHeaderSize + int64(h.Length)
	b[second+rollout.FrameHeaderSize+2] ^= 0xff // the first turn's frame's payload
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := recovery.Repair(ctx, path, "fixed", recovery.RepairOptions{}); err != nil {
		t.Fatal(err)
	}
	fixed.wait(t, "repaired")
	if !errors.Is(fixed.err, rolloutdb.ErrRolloutReplaced) {
		t.Fatalf("repaired: %v", fixed.err)
	}

	newThreadWithTurn(t, db, "idle")
	f, idle := follow("idle")
	waitSeen(idle, 4)
	f.Close()
	idle.wait(t, "closed")
	if idle.err != nil {
		t.Fatalf("closed: %v", idle.err)
	}
	_, idle2 := follow("idle")
	waitSeen(idle2, 4)
	db.Close()
	idle2.wait(t, "DB closed")
	if !errors.Is(idle2.err, rolloutdb.ErrClosed) {
		t.Fatalf("DB closed: %v", idle2.err)
	}
}

// The writer of the cross-process test, run as a child process: it
// appends turns to thread "x", printing each acknowledged commit's last
// seq, then archives the thread.
func TestHelperFollowWriter(t *testing.T) {
	dir := os.Getenv("ROLLOUTDB_FOLLOW_WRITER")
	if dir == "" {
		return // not the child
	}
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	th, err := db.OpenThread(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: fmt.Sprintf("q%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			if _, err := tu.Add(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: fmt.Sprintf("r%d", j)}); err != nil {
				t.Fatal(err)
			}
		}
		res, err := tu.Commit(ctx, rolloutdb.Commit{})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("acked %d\n", res.LastSeq)
	}
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Archive(ctx, "x", "done"); err != nil {
		t.Fatal(err)
	}
	fmt.Println("archived")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// Followers in this process of a thread another process writes: every
// record that process acknowledges arrives once, in order, and nothing
// else; one follower starts mid-thread, one falls more than a read-ahead
// behind; all end when the writer archives the thread.
func TestFollowAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	newThreadWithTurn(t, db, "x") // seqs 1-4, closed
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	all, err := db.Follow(cctx, "x", rolloutdb.FollowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	mid, err := db.Follow(cctx, "x", rolloutdb.FollowOptions{AfterSeq: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer mid.Close()
	late, err := db.Follow(cctx, "x", rolloutdb.FollowOptions{AfterSeq: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	behind := make(chan struct{})
	cAll, cMid, cLate := collect(all, nil), collect(mid, nil), collect(late, behind)

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
	var acked uint64
	archived := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if s, ok := strings.CutPrefix(line, "acked "); ok {
			n, _ := strconv.ParseUint(s, 10, 64)
			acked = n
		}
		archived = archived || line == "archived"
	}
	if err := cmd.Wait(); err != nil || !archived || acked == 0 {
		t.Fatalf("writer: %v, archived %v, last acked %d", err, archived, acked)
	}
	close(behind)
	for _, c := range []struct {
		name  string
		f     *followed
		first uint64
	}{{"from the start", cAll, 1}, {"from seq 3", cMid, 3}, {"behind", cLate, 1}} {
		c.f.wait(t, c.name)
		if c.f.err != nil || c.f.end != rolloutdb.FollowArchived {
			t.Fatalf("%s: ended with %v, %q", c.name, c.f.err, c.f.end)
		}
		// Everything acknowledged, then the archived record, nothing more.
		c.f.check(t, c.name, c.first, acked+1)
		if c.f.kinds[len(c.f.kinds)-1] != rollout.KindArchived {
			t.Fatalf("%s: last record %s", c.name, c.f.kinds[len(c.f.kinds)-1])
		}
	}
}
