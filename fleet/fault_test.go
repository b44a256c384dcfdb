package fleet_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/internal/netproxy"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// viaProxy returns a DSN for the database of dsn that goes through a TCP
// proxy, and the proxy.
func viaProxy(t testing.TB, dsn string) (string, *netproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p, err := netproxy.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	u.Host = p.Addr()
	return u.String(), p
}

// PostgreSQL unreachable: appends fail within the commit timeout with
// ErrUnavailable, none acknowledged; once it is back, retrying them puts
// each in the thread exactly once, whether the lost commit reached the
// database (a slow link: the request arrives after the deadline) or not
// (a partition, a reset).
func TestUnavailableThenRetryExactlyOnce(t *testing.T) {
	for _, fault := range []string{"blackhole", "refuse", "slow"} {
		t.Run(fault, func(t *testing.T) {
			direct := testDSN(t)
			dsn, p := viaProxy(t, direct)
			const timeout = 1 * time.Second
			l := openLog(t, dsn, "h", fleet.Options{CommitTimeout: timeout})
			th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
			if err != nil {
				t.Fatal(err)
			}
			defer th.Close()
			if _, err := th.Append(ctx, []rollout.Record{item(t, "", "before")}, rollout.AppendOptions{}); err != nil {
				t.Fatal(err)
			}
			switch fault {
			case "blackhole":
				p.Partition(netproxy.Blackhole)
			case "refuse":
				p.Partition(netproxy.Refuse)
			case "slow":
				p.SetLatency(timeout + 500*time.Millisecond)
			}
			start := time.Now()
			_, err = th.Append(ctx, []rollout.Record{item(t, "", "lost")}, rollout.AppendOptions{})
			took := time.Since(start)
			if !errors.Is(err, fleet.ErrUnavailable) || !errors.Is(err, rollout.ErrNotDurable) {
				t.Fatalf("append while unreachable: %v", err)
			}
			if took > timeout+time.Second {
				t.Fatalf("append failed after %v, want about %v", took, timeout)
			}
			if fault == "slow" {
				// The late request reaches the database and commits: a
				// frame there that was never acknowledged.
				for deadline := time.Now().Add(5 * time.Second); count(t, direct, `SELECT count(*) FROM rolloutdb.frames`) != 3; time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the slow commit never reached the database")
					}
				}
			}
			p.SetLatency(0)
			p.Heal()
			var res rollout.AppendResult
			for deadline := time.Now().Add(10 * time.Second); ; {
				res, err = th.Append(ctx, []rollout.Record{item(t, "", "lost")}, rollout.AppendOptions{})
				if err == nil || time.Now().After(deadline) {
					break
				}
				if !errors.Is(err, fleet.ErrUnavailable) {
					t.Fatalf("retry: %v", err)
				}
			}
			if err != nil {
				t.Fatalf("retry after heal: %v", err)
			}
			if res.FirstSeq != 3 {
				t.Fatalf("retried append has seq %d, want 3", res.FirstSeq)
			}
			got := strings.Join(texts(t, readAll(t, openLog(t, direct, "reader", fleet.Options{}), "t1")), ",")
			if got != "before,lost" {
				t.Fatalf("thread holds %q, want before,lost", got)
			}
		})
	}
}

// A frame already in the database with the same bytes (what an attempt
// whose answer was lost leaves) is recognised as committed and
// acknowledged once; a different frame at its place is another writer's,
// and the append is fenced.
func TestSameFrameRecognisedDifferentFenced(t *testing.T) {
	dsn := testDSN(t)
	l := openLog(t, dsn, "h", fleet.Options{})
	th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	at := time.Unix(1800000000, 0).UTC()
	plant := func(text string) {
		rec := item(t, "", text)
		rec.Time = at
		p, err := rollout.PrepareFrame([]rollout.Record{rec}, 0, at)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release()
		frame := p.Seal(th.Header().FileID, th.LastSeq()+1, th.End())
		exec(t, dsn, fmt.Sprintf(`INSERT INTO rolloutdb.frames (tid, off, seq, epoch, data)
			SELECT tid, %d, %d, epoch, '\x%x' FROM rolloutdb.threads WHERE id = 't1'`, th.End(), th.LastSeq()+1, frame))
	}
	appendAt := func(text string) (rollout.AppendResult, error) {
		rec := item(t, "", text)
		rec.Time = at
		return th.Append(ctx, []rollout.Record{rec}, rollout.AppendOptions{})
	}
	plant("same")
	if res, err := appendAt("same"); err != nil || res.FirstSeq != 2 {
		t.Fatalf("append of the frame already there: %+v %v", res, err)
	}
	if m := l.Metrics(); m.Frames != 1 || m.Failed != 0 {
		t.Fatalf("metrics %+v", m)
	}
	plant("theirs")
	if _, err := appendAt("mine"); !errors.Is(err, fleet.ErrFenced) {
		t.Fatalf("append over another frame: %v", err)
	}
	if g := strings.Join(texts(t, readAll(t, l, "t1")), ","); g != "same,theirs" {
		t.Fatalf("thread holds %q", g)
	}
}

// A commit attempt given up for lost that reaches PostgreSQL after the
// thread's next append resolved it (a request held in the network) inserts
// nothing: the resolve incremented the epoch under the row lock every
// insert holds until it commits. Found as a rare "fenced" in the blackhole
// case above: the held insert landed after the delete.
func TestLateCommitAfterResolveInsertsNothing(t *testing.T) {
	dsn := testDSN(t)
	l := openLog(t, dsn, "h", fleet.Options{})
	th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	if _, err := th.Append(ctx, []rollout.Record{item(t, "", "acked")}, rollout.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	off, old := th.End(), th.Epoch()
	fleet.DoubtForTest(th)
	// The next append resolves the doubt first.
	if _, err := th.Append(ctx, []rollout.Record{item(t, "", "retried")}, rollout.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if th.Epoch() != old+1 {
		t.Fatalf("epoch %d after a resolve, want %d", th.Epoch(), old+1)
	}
	// The lost attempt lands now, at the place the retried frame holds,
	// and at the place after it.
	for _, at := range []int64{off, th.End()} {
		if ok, err := fleet.LateInsertForTest(th, at, old, []byte("a late frame")); err != nil || ok {
			t.Fatalf("a late insert of the old epoch at %d: inserted %v, %v", at, ok, err)
		}
	}
	if g := strings.Join(texts(t, readAll(t, l, "t1")), ","); g != "acked,retried" {
		t.Fatalf("thread holds %q", g)
	}
	if _, err := th.Append(ctx, []rollout.Record{item(t, "", "after")}, rollout.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A frame committed but not yet waited for is acknowledged: a resolve
// after a later frame's lost commit keeps it. (An appender that writes
// its next frame before it waits for the last, as the facade's appenders
// do, had that frame deleted by the resolve and then acknowledged.)
func TestResolveKeepsACommittedFrameNotYetWaitedFor(t *testing.T) {
	direct := testDSN(t)
	dsn, p := viaProxy(t, direct)
	l := openLog(t, dsn, "h", fleet.Options{CommitTimeout: time.Second})
	th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	write := func(text string) rollout.Pending {
		t.Helper()
		prep, err := th.Prepare([]rollout.Record{item(t, "", text)})
		if err != nil {
			t.Fatal(err)
		}
		defer prep.Release()
		pend, err := th.WritePrepared(ctx, prep, rollout.AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pend
	}
	first := write("committed, not waited for")
	// Sync returns once the frame committed, and acknowledges nothing.
	if err := th.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	p.Partition(netproxy.Blackhole)
	if _, err := th.Wait(write("lost")); !errors.Is(err, fleet.ErrUnavailable) {
		t.Fatalf("append while partitioned: %v", err)
	}
	p.Heal()
	var third rollout.Pending
	for deadline := time.Now().Add(10 * time.Second); ; {
		prep, err := th.Prepare([]rollout.Record{item(t, "", "after")})
		if err != nil {
			t.Fatal(err)
		}
		third, err = th.WritePrepared(ctx, prep, rollout.AppendOptions{})
		prep.Release()
		if err == nil {
			break
		}
		if !errors.Is(err, fleet.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("append after heal: %v", err)
		}
	}
	if _, err := th.Wait(third); err != nil {
		t.Fatal(err)
	}
	if _, err := th.Wait(first); err != nil {
		t.Fatal(err)
	}
	if g := strings.Join(texts(t, readAll(t, openLog(t, direct, "reader", fleet.Options{}), "t1")), ","); g != "committed, not waited for,after" {
		t.Fatalf("thread holds %q", g)
	}
}

// An appender that retries the moment its append failed finds the thread
// to resolve: its retry never lands after the frame that failed.
func TestImmediateRetryAfterAFailedRound(t *testing.T) {
	direct := testDSN(t)
	dsn, p := viaProxy(t, direct)
	l := openLog(t, dsn, "h", fleet.Options{CommitTimeout: 500 * time.Millisecond})
	th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	p.Partition(netproxy.Refuse)
	n, failures := 0, 0
	for deadline := time.Now().Add(10 * time.Second); n < 5 && time.Now().Before(deadline); {
		if _, err := th.Append(ctx, []rollout.Record{item(t, "", fmt.Sprint(n))}, rollout.AppendOptions{}); err == nil {
			n++
		} else if !errors.Is(err, fleet.ErrUnavailable) && !errors.Is(err, rollout.ErrNotDurable) {
			t.Fatalf("append %d: %v", n, err)
		} else if failures++; failures == 3 {
			p.Heal() // after three retries that failed at once
		}
	}
	if failures < 3 {
		t.Fatalf("%d appends failed while partitioned, want 3", failures)
	}
	if g := strings.Join(texts(t, readAll(t, openLog(t, direct, "reader", fleet.Options{}), "t1")), ","); g != "0,1,2,3,4" {
		t.Fatalf("thread holds %q", g)
	}
}

// A Close that cannot release its thread (PostgreSQL unreachable) leaves
// it this host's; this host opens it again once the database is back,
// rather than being refused by itself until it restarts. Another host is
// refused, naming this one.
func TestThreadLeftOwnedByItsOwnHostIsTakenAgain(t *testing.T) {
	direct := testDSN(t)
	dsn, p := viaProxy(t, direct)
	l := openLog(t, dsn, "self", fleet.Options{CommitTimeout: 500 * time.Millisecond})
	th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Open(ctx, "t1", "active"); !errors.Is(err, rollout.ErrThreadLocked) {
		t.Fatalf("a second handle in one Log: %v", err)
	}
	p.Partition(netproxy.Refuse)
	if err := th.Close(); !errors.Is(err, fleet.ErrUnavailable) {
		t.Fatalf("close while unreachable: %v", err)
	}
	p.Heal()
	other := openLog(t, direct, "other", fleet.Options{})
	var oe *fleet.OwnerError
	if _, err := other.Open(ctx, "t1", "active"); !errors.As(err, &oe) || oe.Host != "self" {
		t.Fatalf("another host: %v", err)
	}
	var again *fleet.Thread
	for deadline := time.Now().Add(10 * time.Second); ; {
		again, err = l.Open(ctx, "t1", "active")
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("this host opening its own thread again: %v", err)
	}
	if _, err := again.Append(ctx, []rollout.Record{item(t, "", "on")}, rollout.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	again.Close()
}
