package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/internal/pgtest/pgtesting"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// appendWith appends one item frame to th with inserts of sides into
// the test's table side in its transaction.
func appendWith(t testing.TB, th *fleet.Thread, text string, sides ...int) (rollout.AppendResult, error) {
	t.Helper()
	p, err := th.Prepare([]rollout.Record{item(t, "", text)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	pend, err := th.WritePreparedWith(ctx, p, rollout.AppendOptions{}, queueSides(sides...))
	if err != nil {
		return rollout.AppendResult{}, err
	}
	return th.Wait(pend)
}

// queueSides queues inserts into side, one statement text for all (a
// statement prepared once on a connection is sent with the batch, never
// before it).
func queueSides(ns ...int) func(ctx context.Context, b *pgx.Batch) error {
	return func(_ context.Context, b *pgx.Batch) error {
		for _, n := range ns {
			b.Queue(`INSERT INTO side VALUES ($1)`, n)
		}
		return nil
	}
}

// sideTable makes the table the tests' other writes go to.
func sideTable(t testing.TB, dsn string) {
	t.Helper()
	exec(t, dsn, `CREATE TABLE side (n int PRIMARY KEY)`)
}

// sides lists the side table's rows.
func sides(t testing.TB, dsn string) string {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT n FROM side ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(ns)
}

// An append with other writes commits both, after the frames submitted
// before it and before those submitted after; one whose writes fail, or
// whose queue refuses, writes neither and leaves the thread as it was; a
// host that lost the thread writes neither and is fenced.
func TestAppendWithCommitsBothOrNeither(t *testing.T) {
	dsn := testDSN(t)
	sideTable(t, dsn)
	l := openLog(t, dsn, "h", fleet.Options{LeaseTTL: time.Hour})
	th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	if res, err := appendWith(t, th, "a", 1); err != nil || res.FirstSeq != 2 {
		t.Fatalf("append with a write: %+v %v", res, err)
	}
	// A write that fails (the row is there) takes the frame and the
	// write before it along.
	_, err = appendWith(t, th, "lost", 2, 1)
	if err == nil || errors.Is(err, fleet.ErrFenced) || errors.Is(err, fleet.ErrUnavailable) || errors.Is(err, fleet.ErrInDoubt) {
		t.Fatalf("append whose write fails: %v", err)
	}
	p, err := th.Prepare([]rollout.Record{item(t, "", "refused")})
	if err != nil {
		t.Fatal(err)
	}
	refusal := errors.New("not this")
	if _, err := th.WritePreparedWith(ctx, p, rollout.AppendOptions{}, func(context.Context, *pgx.Batch) error { return refusal }); !errors.Is(err, refusal) {
		t.Fatalf("a queue that refuses: %v", err)
	}
	p.Release()
	// A frame in flight goes first; one written after waits for it.
	p, err = th.Prepare([]rollout.Record{item(t, "", "b")})
	if err != nil {
		t.Fatal(err)
	}
	before, err := th.WritePrepared(ctx, p, rollout.AppendOptions{})
	p.Release()
	if err != nil {
		t.Fatal(err)
	}
	res, err := appendWith(t, th, "c", 3)
	if err != nil || res.FirstSeq != 4 {
		t.Fatalf("append with a write after one in flight: %+v %v", res, err)
	}
	if _, err := th.Wait(before); err != nil {
		t.Fatal(err)
	}
	if _, err := th.Append(ctx, []rollout.Record{item(t, "", "d")}, rollout.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := appendWith(t, th, "e", 4); err != nil {
		t.Fatal(err)
	}
	p, err = th.Prepare([]rollout.Record{item(t, "", "conflict")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = th.WritePreparedWith(ctx, p, rollout.AppendOptions{IfLastSeq: 2}, queueSides(5))
	p.Release()
	if !errors.Is(err, rollout.ErrConflict) {
		t.Fatalf("append with a write after the wrong seq: %v", err)
	}
	if g, s := strings.Join(texts(t, readAll(t, l, "t1")), ","), sides(t, dsn); g != "a,b,c,d,e" || s != "[1 3 4]" {
		t.Fatalf("thread holds %q, side %s", g, s)
	}

	// Another host takes the thread over: this one writes neither.
	expire(t, dsn, "h")
	other := openLog(t, dsn, "other", fleet.Options{})
	th2, err := other.Open(ctx, "t1", "active")
	if err != nil {
		t.Fatal(err)
	}
	defer th2.Close()
	if _, err := appendWith(t, th, "zombie", 6); !errors.Is(err, fleet.ErrFenced) {
		t.Fatalf("append with a write of a fenced host: %v", err)
	}
	if _, err := appendWith(t, th2, "f", 7); err != nil {
		t.Fatal(err)
	}
	if g, s := strings.Join(texts(t, readAll(t, other, "t1")), ","), sides(t, dsn); g != "a,b,c,d,e,f" || s != "[1 3 4 7]" {
		t.Fatalf("thread holds %q, side %s", g, s)
	}
	if m := l.Metrics(); m.Failed != 2 {
		t.Fatalf("metrics of the first host: %+v", m)
	}
}

// A batch lost on its way, or whose answer was lost after it committed,
// is settled against the database before the append returns: the one
// that committed is acknowledged (both there), the one that did not
// fails with ErrUnavailable (neither there) and its retry lands once.
// The settle moves the epoch on, so a lost batch arriving late is fenced.
func TestAppendWithLostBatchIsSettled(t *testing.T) {
	dsn := testDSN(t)
	sideTable(t, dsn)
	l := openLog(t, dsn, "h", fleet.Options{})
	th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	epoch := th.Epoch()
	fleet.LoseNextBatchForTest(l, true)
	if res, err := appendWith(t, th, "committed", 1); err != nil || res.FirstSeq != 2 {
		t.Fatalf("append whose answer was lost: %+v %v", res, err)
	}
	if th.Epoch() != epoch+1 {
		t.Fatalf("epoch %d after a settle, want %d", th.Epoch(), epoch+1)
	}
	fleet.LoseNextBatchForTest(l, false)
	_, err = appendWith(t, th, "lost", 2)
	if !errors.Is(err, fleet.ErrUnavailable) || errors.Is(err, fleet.ErrInDoubt) {
		t.Fatalf("append whose batch was lost: %v", err)
	}
	if res, err := appendWith(t, th, "lost", 2); err != nil || res.FirstSeq != 3 {
		t.Fatalf("retry: %+v %v", res, err)
	}
	if _, err := th.Append(ctx, []rollout.Record{item(t, "", "after")}, rollout.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if g, s := strings.Join(texts(t, readAll(t, l, "t1")), ","), sides(t, dsn); g != "committed,lost,after" || s != "[1 2]" {
		t.Fatalf("thread holds %q, side %s", g, s)
	}
	if m := l.Metrics(); m.Failed != 1 || m.Retries != 0 {
		t.Fatalf("metrics %+v", m)
	}
}

// A batch whose commit and settle both go unanswered past the commit
// timeout (a link slower than it) is in doubt: ErrInDoubt, and the handle
// appends nothing more. The host then dies (Abandon). The batch reaches
// PostgreSQL after all: before the lease ended it commits whole, after
// it is fenced whole. The next owner finds the frame and the write, or
// neither, and goes on after what it found.
func TestAppendWithInDoubtThenCrash(t *testing.T) {
	for _, late := range []string{"before the lease ends", "after the lease ended"} {
		t.Run(late, func(t *testing.T) {
			direct := testDSN(t)
			sideTable(t, direct)
			dsn, p := viaProxy(t, direct)
			const timeout = 500 * time.Millisecond
			// One connection: the batch's statements are prepared on it by
			// the first append, so the second is sent whole, in one write.
			l := openLog(t, dsn, "h", fleet.Options{CommitTimeout: timeout, LeaseTTL: time.Hour, MaxConns: 1})
			id := strings.ReplaceAll("late "+late, " ", "-")
			th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: id})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := appendWith(t, th, "acked", 1); err != nil {
				t.Fatal(err)
			}
			p.SetLatency(timeout + time.Second)
			if _, err := appendWith(t, th, "in doubt", 2); !errors.Is(err, fleet.ErrInDoubt) || errors.Is(err, fleet.ErrUnavailable) {
				t.Fatalf("append whose commit went unanswered: %v", err)
			}
			if _, err := th.Append(ctx, []rollout.Record{item(t, "", "after doubt")}, rollout.AppendOptions{}); !errors.Is(err, fleet.ErrInDoubt) {
				t.Fatalf("an append to a handle in doubt: %v", err)
			}
			want := "acked|[1]"
			if late == "after the lease ended" {
				expire(t, direct, "h")
			} else {
				want = "acked,in doubt|[1 2]"
				waitFor(t, "the late batch", func() bool { return sides(t, direct) == "[1 2]" })
			}
			l.Abandon()
			// Every backend of the host has read what it was sent, the
			// late batch included, once none is left.
			waitFor(t, "the host's connections", func() bool {
				return count(t, direct, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`) == 0
			})
			if late == "after the lease ended" {
				// It did reach PostgreSQL, and was fenced.
				log, err := pgtesting.Shared(t).ReadLog()
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(log, "fleet: fenced: thread "+id) {
					t.Fatal("the late batch never reached PostgreSQL")
				}
			}
			expire(t, direct, "h")
			next := openLog(t, direct, "next", fleet.Options{})
			th2, err := next.Open(ctx, id, "active")
			if err != nil {
				t.Fatal(err)
			}
			defer th2.Close()
			if got := strings.Join(texts(t, readAll(t, next, id)), ",") + "|" + sides(t, direct); got != want {
				t.Fatalf("after the crash: %q, want %q", got, want)
			}
			if _, err := appendWith(t, th2, "on", 3); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// An older layout (2, before rolloutdb.fence) is migrated at Open, and
// its threads take appends with other writes.
func TestLayoutTwoIsMigrated(t *testing.T) {
	dsn := testDSN(t)
	sideTable(t, dsn)
	l := openLog(t, dsn, "h", fleet.Options{})
	th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	exec(t, dsn, `DROP FUNCTION rolloutdb.fence(boolean, text); UPDATE rolloutdb.schema_version SET version = 2`)
	l = openLog(t, dsn, "h", fleet.Options{})
	if v := count(t, dsn, `SELECT version FROM rolloutdb.schema_version`); v != fleet.SchemaVersion {
		t.Fatalf("layout %d after open, want %d", v, fleet.SchemaVersion)
	}
	th, err = l.Open(ctx, "t1", "active")
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	if _, err := appendWith(t, th, "a", 1); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkAppendWith is the acknowledgement of one 1 KiB record, on
// 1 and 8 threads of one host, appended alone (in the commit rounds) and
// with one insert in its transaction (a batch of its own each).
func BenchmarkAppendWith(b *testing.B) {
	for _, threads := range []int{1, 8} {
		for _, with := range []bool{false, true} {
			name := fmt.Sprintf("threads-%d/append", threads)
			if with {
				name = fmt.Sprintf("threads-%d/with-write", threads)
			}
			b.Run(name, func(b *testing.B) {
				dsn := testDSN(b)
				exec(b, dsn, `CREATE TABLE side (n bigserial PRIMARY KEY, thread text)`)
				l := openLog(b, dsn, "bench", fleet.Options{})
				var apps []appender
				for i := range threads {
					th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: fmt.Sprint("t", i)})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = th.Close() })
					apps = append(apps, func(rec rollout.Record) error {
						if !with {
							_, err := th.Append(ctx, []rollout.Record{rec}, rollout.AppendOptions{})
							return err
						}
						p, err := th.Prepare([]rollout.Record{rec})
						if err != nil {
							return err
						}
						defer p.Release()
						pend, err := th.WritePreparedWith(ctx, p, rollout.AppendOptions{}, func(_ context.Context, bt *pgx.Batch) error {
							bt.Queue(`INSERT INTO side (thread) VALUES ($1)`, th.Path())
							return nil
						})
						if err != nil {
							return err
						}
						_, err = th.Wait(pend)
						return err
					})
				}
				runAcks(b, apps)
			})
		}
	}
}
