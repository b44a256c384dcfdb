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
func collect(f rolloutdb.Follower, delay <-chan struct{}) *followed {
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
	var fs []rolloutdb.Follower
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
	follow := func(id string) (rolloutdb.Follower, *followed) {
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

// twoHandles opens two DBs on one workspace, as two processes would: the
// first writes, the second follows. Both close when the test ends.
func twoHandles(t *testing.T, opts rolloutdb.Options) (string, *rolloutdb.DB, *rolloutdb.DB) {
	t.Helper()
	dir := t.TempDir()
	var dbs [2]*rolloutdb.DB
	for i := range dbs {
		db, err := rolloutdb.Open(ctx, dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		dbs[i] = db
		opts = rolloutdb.Options{}
	}
	return dir, dbs[0], dbs[1]
}

func setFlag(t *testing.T, th *rolloutdb.Thread, v bool) rollout.AppendResult {
	t.Helper()
	res, err := th.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{Flags: map[string]bool{"f": v}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A follower waiting on a thread this DB writes, whose handle then
// closes, sees what another DB (another process) writes next.
func TestFollowerSeesAnotherWriterAfterThreadClose(t *testing.T) {
	_, db, other := twoHandles(t, rolloutdb.Options{})
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := db.Follow(ctx, "c", rolloutdb.FollowOptions{PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !f.Next() || f.Record().Seq != 1 {
		t.Fatalf("header: seq %d, %v", f.Record().Seq, f.Err())
	}
	got := make(chan uint64, 1)
	go func() {
		if f.Next() {
			got <- f.Record().Seq
		}
		close(got)
	}()
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
	th2, err := other.OpenThread(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	defer th2.Close()
	setFlag(t, th2, true)
	select {
	case s := <-got:
		if s != 2 {
			t.Fatalf("seq %d (%v), want 2", s, f.Err())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("another DB's append not yielded in 30 s")
	}
}

// A follower that starts from the projection's anchor checks the rollout
// still holds it: after a crash lost frames the projection had applied,
// and another writer appended others, it yields from AfterSeq on.
func TestFollowerChecksTheProjectionsAnchor(t *testing.T) {
	dir := t.TempDir()
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{Sync: rollout.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "e"})
	if err != nil {
		t.Fatal(err)
	}
	var res []rollout.AppendResult
	name := strings.Repeat("n", 300)
	for range 4 {
		r, err := th.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{Name: &name})
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, r)
	}
	if err := db.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	path := th.Path()
	th.Close()
	db.Close()
	// A power cut under SyncNever lost the last two frames the projection had.
	if err := os.Truncate(path, res[1].End); err != nil {
		t.Fatal(err)
	}
	db, err = rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	w, _, err := rollout.Open(ctx, path, "e", rollout.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for range 6 {
		r, _ := rollout.NewRecord(rollout.KindMetadataUpdated, "", rollout.MetadataUpdated{})
		rr, err := w.Append(ctx, []rollout.Record{r}, rollout.AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		last = rr.LastSeq
	}
	w.Close()
	from := res[1].LastSeq + 1
	f, err := db.Follow(ctx, "e", rolloutdb.FollowOptions{AfterSeq: from})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for want := from + 1; want <= last; want++ {
		if !f.Next() || f.Record().Seq != want {
			t.Fatalf("seq %d (%v), want %d (damage reported: %v)", f.Record().Seq, f.Err(), want, f.Damage())
		}
	}
	if len(f.Damage()) != 0 {
		t.Fatalf("damage reported: %v", f.Damage())
	}
}

// Followers in this process of a thread another DB writes, when its last
// records and its archive come together: each yields them all and ends
// with FollowArchived, polling hourly (no poll ends them).
func TestEveryFollowerEndsAtTheArchive(t *testing.T) {
	_, wr, db := twoHandles(t, rolloutdb.Options{})
	th, err := wr.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	var cs []*followed
	for range 2 {
		f, err := db.Follow(ctx, "s", rolloutdb.FollowOptions{PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cs = append(cs, collect(f, nil))
	}
	const n = 5
	for i := range n {
		setFlag(t, th, i%2 == 0)
	}
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := wr.Archive(ctx, "s", "done"); err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		c.wait(t, "follower")
		if c.err != nil || c.end != rolloutdb.FollowArchived {
			t.Fatalf("follower %d: ended with %v, %q", i, c.err, c.end)
		}
		c.check(t, "follower", 1, n+2)
	}
}

// Closing a follower after it left Next releases the rollout it had open
// and, with the last follower of another process's thread, the directory
// watch (an inotify instance).
func TestFollowerCloseReleasesItsFileAndWatch(t *testing.T) {
	db, err := rolloutdb.Open(ctx, t.TempDir(), rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	path := th.Path()
	if err := th.Close(); err != nil { // followed as another process's: a tailer, a watch
		t.Fatal(err)
	}
	fds := func(prefix string) int {
		ents, _ := os.ReadDir("/proc/self/fd")
		n := 0
		for _, e := range ents {
			if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, prefix) {
				n++
			}
		}
		return n
	}
	files, watches := fds(path), fds("anon_inode:inotify")
	for range 5 {
		f, err := db.Follow(ctx, "a", rolloutdb.FollowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !f.Next() {
			t.Fatal(f.Err())
		}
		f.Close()
	}
	for deadline := time.Now().Add(30 * time.Second); fds(path) != files || fds("anon_inode:inotify") != watches; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d descriptors of the rollout and %d inotify instances open after the followers closed, %d and %d before",
				fds(path), fds("anon_inode:inotify"), files, watches)
		}
	}
}
