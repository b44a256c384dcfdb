package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/follow"
	"github.com/rolloutdb/rolloutdb/internal/netproxy"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// noPoll is a poll interval no test waits out: what such a follower
// yields, a notice woke it for.
const noPoll = time.Hour

// tailed is a follower read in a goroutine: its records come on recs,
// which is closed when Next returns false.
type tailed struct {
	f    *fleet.Follower
	recs chan rollout.Record
}

func startFollow(t testing.TB, l *fleet.Log, id string, o follow.Options) *tailed {
	t.Helper()
	f, err := l.Follow(ctx, id, o)
	if err != nil {
		t.Fatal(err)
	}
	tf := &tailed{f: f, recs: make(chan rollout.Record, 4096)}
	go func() {
		defer close(tf.recs)
		for f.Next() {
			tf.recs <- f.Record()
		}
	}()
	t.Cleanup(func() {
		f.Close()
		for range tf.recs {
		}
	})
	return tf
}

// expect reads records first..last, each once and in order, within the
// deadline, and returns their texts (items only).
func (tf *tailed) expect(t testing.TB, first, last uint64, within time.Duration) []string {
	t.Helper()
	deadline := time.After(within)
	var out []string
	for want := first; want <= last; want++ {
		select {
		case rec, ok := <-tf.recs:
			if !ok {
				t.Fatalf("follower ended at seq %d of %d..%d: %v", want, first, last, tf.f.Err())
			}
			if rec.Seq != want {
				t.Fatalf("follower yielded seq %d, want %d", rec.Seq, want)
			}
			out = append(out, texts(t, []rollout.Record{rec})...)
		case <-deadline:
			t.Fatalf("follower: seq %d of %d..%d not yielded within %v", want, first, last, within)
		}
	}
	return out
}

// ended waits for the follower to stop, and fails on a record.
func (tf *tailed) ended(t testing.TB, within time.Duration) {
	t.Helper()
	select {
	case rec, ok := <-tf.recs:
		if ok {
			t.Fatalf("follower yielded seq %d, want it ended", rec.Seq)
		}
	case <-time.After(within):
		t.Fatalf("follower still running after %v", within)
	}
}

func appendTexts(t testing.TB, th *fleet.Thread, texts ...string) {
	t.Helper()
	for _, s := range texts {
		if _, err := th.Append(ctx, []rollout.Record{item(t, "", s)}, rollout.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func numbered(prefix string, from, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s%d", prefix, from+i))
	}
	return out
}

// Host A appends; a follower on host B yields every record once, in seq
// order, woken by A's notices (B never polls), whether it starts from the
// first record, in the middle, or at the end; frames of several records
// and frames of several threads in one commit round alike.
func TestFollowAcrossHosts(t *testing.T) {
	dsn := testDSN(t)
	a := openLog(t, dsn, "a", fleet.Options{})
	b := openLog(t, dsn, "b", fleet.Options{PollInterval: noPoll})
	th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	other, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t2"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	appendTexts(t, th, numbered("m", 0, 10)...) // seq 2..11
	fromStart := startFollow(t, b, "t1", follow.Options{})
	middle := startFollow(t, b, "t1", follow.Options{AfterSeq: 6})
	atEnd := startFollow(t, b, "t1", follow.Options{AfterSeq: 11})
	if got := fromStart.expect(t, 1, 11, 10*time.Second); strings.Join(got, ",") != strings.Join(numbered("m", 0, 10), ",") {
		t.Fatalf("from the start: %q", got)
	}
	if got := middle.expect(t, 7, 11, 10*time.Second); strings.Join(got, ",") != "m5,m6,m7,m8,m9" {
		t.Fatalf("from seq 6: %q", got)
	}

	// Concurrent appends to two threads (shared rounds), and frames of
	// three records.
	var wg sync.WaitGroup
	wg.Go(func() { appendTexts(t, other, numbered("o", 0, 100)...) })
	for i := range 50 {
		recs := []rollout.Record{item(t, "", fmt.Sprint("x", i)), item(t, "", fmt.Sprint("y", i)), item(t, "", fmt.Sprint("z", i))}
		if _, err := th.Append(ctx, recs, rollout.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	var want []string
	for i := range 50 {
		want = append(want, fmt.Sprint("x", i), fmt.Sprint("y", i), fmt.Sprint("z", i))
	}
	for _, tf := range []*tailed{fromStart, middle, atEnd} {
		if got := tf.expect(t, 12, 161, 10*time.Second); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("batched frames: %d texts", len(got))
		}
	}
	o := startFollow(t, b, "t2", follow.Options{AfterSeq: 1})
	if got := o.expect(t, 2, 101, 10*time.Second); strings.Join(got, ",") != strings.Join(numbered("o", 0, 100), ",") {
		t.Fatalf("the other thread: %d texts", len(got))
	}
	if m := b.FollowMetrics(); m.Received == 0 || m.Listens != 1 {
		t.Fatalf("B's follow metrics %+v", m)
	}
	if m, c := a.FollowMetrics(), a.Metrics(); m.Notices == 0 || m.Notices > c.Rounds+2 {
		t.Fatalf("A sent %d notices for %d rounds and 2 creates", m.Notices, c.Rounds)
	}
	if _, err := b.Follow(ctx, "nope", follow.Options{}); !vfs.IsNotExist(err) {
		t.Fatalf("follow of a missing thread: %v", err)
	}
}

// Without notices, followers still yield everything, at their polls: a
// host that sends none (NoNotify), and a listening connection that went
// silent (a partition of it alone) or was killed.
func TestFollowWithoutNotices(t *testing.T) {
	t.Run("no-notify", func(t *testing.T) {
		dsn := testDSN(t)
		a := openLog(t, dsn, "a", fleet.Options{NoNotify: true})
		b := openLog(t, dsn, "b", fleet.Options{PollInterval: 20 * time.Millisecond})
		th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
		if err != nil {
			t.Fatal(err)
		}
		defer th.Close()
		tf := startFollow(t, b, "t1", follow.Options{})
		appendTexts(t, th, numbered("m", 0, 30)...)
		tf.expect(t, 1, 31, 10*time.Second)
		if m := b.FollowMetrics(); m.Received != 0 {
			t.Fatalf("B received %d notices from a host that sends none", m.Received)
		}
	})
	t.Run("listen-partitioned", func(t *testing.T) {
		dsn := testDSN(t)
		listen, p := viaProxy(t, dsn)
		a := openLog(t, dsn, "a", fleet.Options{})
		b := openLog(t, dsn, "b", fleet.WithTestDSNs(fleet.Options{PollInterval: 50 * time.Millisecond, CommitTimeout: 500 * time.Millisecond}, "", listen))
		th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
		if err != nil {
			t.Fatal(err)
		}
		defer th.Close()
		tf := startFollow(t, b, "t1", follow.Options{})
		tf.expect(t, 1, 1, 10*time.Second)
		waitFor(t, "B listens", func() bool { return b.FollowMetrics().Listens == 1 })
		p.Partition(netproxy.Blackhole)
		received := b.FollowMetrics().Received
		appendTexts(t, th, numbered("m", 0, 20)...)
		tf.expect(t, 2, 21, 10*time.Second)
		if m := b.FollowMetrics(); m.Received != received {
			t.Fatalf("notices came through the partition: %+v", m)
		}
		// The listener finds its connection silent, and gives it up;
		// healed, it makes a new one, and notices wake the follower again.
		waitFor(t, "the silent listener given up", func() bool { return b.FollowMetrics().ListensLost >= 1 })
		p.Heal()
		waitFor(t, "B listens again", func() bool { return b.FollowMetrics().Listens >= 2 })
		received = b.FollowMetrics().Received
		appendTexts(t, th, "after")
		tf.expect(t, 22, 22, 10*time.Second)
		waitFor(t, "a notice after the heal", func() bool { return b.FollowMetrics().Received > received })
	})
	t.Run("listen-killed", func(t *testing.T) {
		dsn := testDSN(t)
		a := openLog(t, dsn, "a", fleet.Options{})
		b := openLog(t, dsn, "b", fleet.Options{PollInterval: noPoll})
		th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
		if err != nil {
			t.Fatal(err)
		}
		defer th.Close()
		tf := startFollow(t, b, "t1", follow.Options{})
		tf.expect(t, 1, 1, 10*time.Second)
		waitFor(t, "B listens", func() bool { return listeners(t, dsn) == 1 })
		for round := range 3 {
			exec(t, dsn, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'rolloutdb-listen%'`)
			appendTexts(t, th, fmt.Sprint("r", round))
			// Made again, it wakes every follower: the record is yielded
			// though its notice came while nobody listened.
			tf.expect(t, uint64(round+2), uint64(round+2), 10*time.Second)
		}
		if m := b.FollowMetrics(); m.Listens < 2 {
			t.Fatalf("B's metrics %+v: the listener was not made again", m)
		}
	})
}

// listeners counts the connections to dsn's database that LISTEN.
func listeners(t testing.TB, dsn string) int64 {
	return count(t, dsn, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'`)
}

// 64 followers on one Log, of one thread and of eight, share one
// listening connection and the pool, and those of a thread at one place
// share their reads: each yields every record.
func TestFollowersShareOneListen(t *testing.T) {
	dsn := testDSN(t)
	a := openLog(t, dsn, "a", fleet.Options{})
	b := openLog(t, dsn, "b", fleet.Options{PollInterval: noPoll, MaxConns: 4})
	var threads []*fleet.Thread
	for i := range 8 {
		th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: fmt.Sprint("t", i)})
		if err != nil {
			t.Fatal(err)
		}
		defer th.Close()
		threads = append(threads, th)
	}
	var tfs []*tailed
	for i := range 64 {
		id := "t0" // half of them on one thread
		if i%2 == 1 {
			id = fmt.Sprint("t", i%8)
		}
		tfs = append(tfs, startFollow(t, b, id, follow.Options{AfterSeq: 1}))
	}
	waitFor(t, "one listener", func() bool { return listeners(t, dsn) == 1 })
	var wg sync.WaitGroup
	for _, th := range threads {
		wg.Go(func() { appendTexts(t, th, numbered("m", 0, 20)...) })
	}
	wg.Wait()
	for _, tf := range tfs {
		tf.expect(t, 2, 21, 20*time.Second)
	}
	// A read each would be 64 a notice (each follower reads once it
	// starts, once LISTEN is in place, and for each notice of its
	// thread); shared, it is about one a notice and thread.
	if m := b.FollowMetrics(); m.Reads > 2*64+m.Received*64/2 {
		t.Fatalf("%d reads of frames for 64 followers and %d notices", m.Reads, m.Received)
	}
	if n := listeners(t, dsn); n != 1 {
		t.Fatalf("%d listening connections, want 1", n)
	}
	if n := count(t, dsn, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'rolloutdb-listen%'`); n != 1 {
		t.Fatalf("%d listener connections, want 1", n)
	}
	// The pool's 4, the listener, a's pool, its notifier and this count's.
	if n := count(t, dsn, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()`); n > 4+1+8+1+1 {
		t.Fatalf("%d connections to the database", n)
	}
	for _, tf := range tfs {
		tf.f.Close()
	}
	waitFor(t, "no listener once the followers closed", func() bool { return listeners(t, dsn) == 0 })
}

// A follower ends once its thread is archived, after every record, with
// End Archived and no error; a thread followed once archived yields it
// all and ends so; a deleted thread ends its follower with
// ErrThreadDeleted, and one made again under the same id is another.
func TestFollowEndsOnArchiveAndDelete(t *testing.T) {
	dsn := testDSN(t)
	a := openLog(t, dsn, "a", fleet.Options{})
	b := openLog(t, dsn, "b", fleet.Options{PollInterval: noPoll})
	th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	tf := startFollow(t, b, "t1", follow.Options{})
	appendTexts(t, th, "one", "two")
	if err := a.Move(ctx, "t1", "active", "archived", th); err != nil {
		t.Fatal(err)
	}
	tf.expect(t, 1, 3, 10*time.Second)
	tf.ended(t, 10*time.Second)
	if tf.f.Err() != nil || tf.f.End() != follow.Archived {
		t.Fatalf("archived: err %v, end %q", tf.f.Err(), tf.f.End())
	}
	late := startFollow(t, b, "t1", follow.Options{AfterSeq: 1})
	late.expect(t, 2, 3, 10*time.Second)
	late.ended(t, 10*time.Second)
	if late.f.End() != follow.Archived {
		t.Fatalf("followed once archived: end %q, err %v", late.f.End(), late.f.Err())
	}

	if err := a.Move(ctx, "t1", "archived", "active", th); err != nil {
		t.Fatal(err)
	}
	tf = startFollow(t, b, "t1", follow.Options{AfterSeq: 3})
	appendTexts(t, th, "three")
	tf.expect(t, 4, 4, 10*time.Second)
	th.Close()
	if err := a.Delete(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	tf.ended(t, 10*time.Second)
	if !errors.Is(tf.f.Err(), follow.ErrThreadDeleted) {
		t.Fatalf("deleted: %v", tf.f.Err())
	}

	th, err = a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	tf = startFollow(t, b, "t1", follow.Options{AfterSeq: 1})
	th.Close()
	if err := a.Delete(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"}); err != nil {
		t.Fatal(err)
	}
	tf.ended(t, 10*time.Second)
	if !errors.Is(tf.f.Err(), follow.ErrThreadDeleted) {
		t.Fatalf("deleted and made again: %v", tf.f.Err())
	}
}

// A commit whose answer was lost commits late; a follower yields its
// record (it is in the database); its writer, never told, gives up on
// it, and cuts it back before its next append, which takes its place.
// The follower ends with a *CutError that says up to which seq its
// records stand, and a follower from there yields the record that took
// the place.
func TestFollowerReportsCut(t *testing.T) {
	direct := testDSN(t)
	dsn, p := viaProxy(t, direct)
	const timeout = time.Second
	a := openLog(t, dsn, "a", fleet.Options{CommitTimeout: timeout})
	b := openLog(t, direct, "b", fleet.Options{PollInterval: 20 * time.Millisecond})
	th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	appendTexts(t, th, "before")
	tf := startFollow(t, b, "t1", follow.Options{})
	tf.expect(t, 1, 2, 10*time.Second)

	p.SetLatency(timeout + 500*time.Millisecond)
	if _, err := th.Append(ctx, []rollout.Record{item(t, "", "lost")}, rollout.AppendOptions{}); !errors.Is(err, fleet.ErrUnavailable) {
		t.Fatalf("append over the slow link: %v", err)
	}
	// The late commit lands; the follower finds it at a poll.
	if got := tf.expect(t, 3, 3, 10*time.Second); got[0] != "lost" {
		t.Fatalf("yielded %q", got)
	}
	p.SetLatency(0)
	for deadline := time.Now().Add(10 * time.Second); ; {
		res, err := th.Append(ctx, []rollout.Record{item(t, "", "retried")}, rollout.AppendOptions{})
		if err == nil {
			if res.FirstSeq != 3 {
				t.Fatalf("retried append at seq %d", res.FirstSeq)
			}
			break
		}
		if !errors.Is(err, fleet.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("retry: %v", err)
		}
	}
	tf.ended(t, 10*time.Second)
	var ce *fleet.CutError
	if !errors.As(tf.f.Err(), &ce) || !errors.Is(tf.f.Err(), follow.ErrRolloutReplaced) {
		t.Fatalf("follower ended with %v", tf.f.Err())
	}
	if ce.Kept != 2 || ce.Yielded != 3 || ce.Thread != "t1" {
		t.Fatalf("cut %+v, want kept 2, yielded 3", ce)
	}
	again := startFollow(t, b, "t1", follow.Options{AfterSeq: ce.Kept})
	if got := again.expect(t, 3, 3, 10*time.Second); got[0] != "retried" {
		t.Fatalf("after the cut: %q", got)
	}
	appendTexts(t, th, "next")
	again.expect(t, 4, 4, 10*time.Second)
}

// The notifier coalesces: while a notice is in flight (over a slow link
// here), the rounds committed meanwhile go in the next one, so appends
// never wait for notices, and a follower elsewhere still yields every
// record, woken by notices alone. A notifier that cannot reach the
// database fails no append.
func TestNoticesCoalesceAndNeverFailAppends(t *testing.T) {
	dsn := testDSN(t)
	notify, p := viaProxy(t, dsn)
	a := openLog(t, dsn, "a", fleet.WithTestDSNs(fleet.Options{}, notify, ""))
	b := openLog(t, dsn, "b", fleet.Options{PollInterval: noPoll})
	th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	tf := startFollow(t, b, "t1", follow.Options{})
	tf.expect(t, 1, 1, 10*time.Second)
	waitFor(t, "B listens", func() bool { return b.FollowMetrics().Listens == 1 })

	p.SetLatency(100 * time.Millisecond) // a notice takes 200 ms or more
	rounds, sent := a.Metrics().Rounds, a.FollowMetrics().Notices
	appendTexts(t, th, numbered("m", 0, 50)...)
	tf.expect(t, 2, 51, 20*time.Second)
	rounds, sent = a.Metrics().Rounds-rounds, a.FollowMetrics().Notices-sent
	if rounds < 50 || sent*2 > rounds {
		t.Fatalf("%d notices for %d rounds", sent, rounds)
	}
	p.SetLatency(0)

	p.Partition(netproxy.Refuse)
	appendTexts(t, th, numbered("r", 0, 10)...)
	waitFor(t, "a failed notice", func() bool { return a.FollowMetrics().NoticeFailures > 0 })
	p.Heal()
	// What failed is sent again, coalesced: the follower is woken.
	tf.expect(t, 52, 61, 20*time.Second)
}

// Close of the Log ends its followers with an error matching
// rollout.ErrClosed, and Follow after Close fails so.
func TestFollowEndsOnClose(t *testing.T) {
	dsn := testDSN(t)
	a := openLog(t, dsn, "a", fleet.Options{})
	b, err := fleet.Open(ctx, dsn, fleet.Options{Host: "b", PollInterval: noPoll})
	if err != nil {
		t.Fatal(err)
	}
	th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	tf := startFollow(t, b, "t1", follow.Options{})
	tf.expect(t, 1, 1, 10*time.Second)
	cctx, cancel := context.WithCancel(ctx)
	byCtx, err := b.Follow(cctx, "t1", follow.Options{AfterSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer byCtx.Close()
	cancel()
	if byCtx.Next() || !errors.Is(byCtx.Err(), context.Canceled) {
		t.Fatalf("follower whose ctx is done: %v", byCtx.Err())
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	tf.ended(t, 10*time.Second)
	if !errors.Is(tf.f.Err(), rollout.ErrClosed) {
		t.Fatalf("follower of a closed Log: %v", tf.f.Err())
	}
	if _, err := b.Follow(ctx, "t1", follow.Options{}); err == nil {
		t.Fatal("Follow on a closed Log")
	}
}
