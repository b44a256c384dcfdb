package rolloutdb_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/internal/netproxy"
	"github.com/rolloutdb/rolloutdb/internal/pgtest/pgtesting"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// openFleetHost opens a fleet DB at dsn as host name.
func openFleetHost(t testing.TB, dsn, name string, commitTimeout time.Duration) *rolloutdb.DB {
	t.Helper()
	db, err := rolloutdb.Open(ctx, dsn, rolloutdb.Options{Fleet: rolloutdb.FleetOptions{HostName: name, LeaseTTL: fleetLease, CommitTimeout: commitTimeout}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// sql runs one statement on the fleet database at dsn.
func sql(t testing.TB, dsn, q string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, q); err != nil {
		t.Fatal(err)
	}
}

// resume resumes a thread on db.
func resume(t testing.TB, db *rolloutdb.DB, id string) *rolloutdb.Thread {
	t.Helper()
	th, _, err := db.Resume(ctx, id, rolloutdb.ResumeOptions{})
	if err != nil {
		t.Fatalf("resume %s: %v", id, err)
	}
	t.Cleanup(func() { _ = th.Close() })
	return th
}

// expireLease ends a host's lease, as its running out does.
func expireLease(t testing.TB, dsn, host string) {
	t.Helper()
	sql(t, dsn, `UPDATE rolloutdb.hosts SET lease_until = now() - interval '1 second' WHERE host = '`+host+`'`)
}

// A host that lost its thread (its lease ended, another host took the
// thread over) writes neither the frame nor the business writes with it:
// ErrFenced.
func TestBusinessWritesOfAFencedHost(t *testing.T) {
	dsn := pgtesting.Database(t)
	a := openFleetHost(t, dsn, "a", 0)
	th := mustCreateThread(t, a, rolloutdb.ThreadOptions{ID: "boss"})
	expireLease(t, dsn, "a")
	b := openFleetHost(t, dsn, "b", 0)
	th2 := resume(t, b, "boss")
	name := "zombie"
	rec, err := rollout.NewRecord(rollout.KindMetadataUpdated, "", rollout.MetadataUpdated{Name: &name})
	if err != nil {
		t.Fatal(err)
	}
	var w rolloutdb.BusinessWrites
	w.AddGoal("boss", "from a zombie")
	w.OpenEdge("boss", "helper")
	if _, err := th.AppendWith(ctx, []rollout.Record{rec}, rollout.AppendOptions{}, &w); !errors.Is(err, rolloutdb.ErrFenced) {
		t.Fatalf("an append with business writes of a fenced host: %v", err)
	}
	if got := businessString(t, b, "boss", "helper"); got != "" {
		t.Fatalf("a fenced host wrote business state: %q", got)
	}
	if info, err := b.ThreadInfo(ctx, "boss"); err != nil || info.Name == name || th2.LastSeq() != 1 {
		t.Fatalf("a fenced host wrote the frame: %+v %v (last seq %d)", info, err, th2.LastSeq())
	}
	if _, err := th2.AppendWith(ctx, []rollout.Record{rec}, rollout.AppendOptions{}, &w); err != nil {
		t.Fatalf("the new owner's append: %v", err)
	}
	if got := businessString(t, a, "boss", "helper"); got != `goal boss "from a zombie" active; edge boss>helper open; ` {
		t.Fatalf("business state after the new owner's append: %q", got)
	}
}

// On a link slower than the commit timeout, a commit with business writes
// whose ids must be drawn first fails before anything is sent
// (ErrUnavailable) and is retried once the link is back, landing once; one
// with none to draw is sent and goes unanswered: ErrInDoubt, the handle
// refuses the retry, and the next host finds the turn and the writes
// together or neither.
func TestBusinessWritesOnASlowLink(t *testing.T) {
	direct := pgtesting.Database(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	p, err := netproxy.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	u.Host = p.Addr()
	const timeout = 500 * time.Millisecond
	a := openFleetHost(t, u.String(), "a", timeout)
	th := mustCreateThread(t, a, rolloutdb.ThreadOptions{ID: "boss"})
	tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "go"})
	if err != nil {
		t.Fatal(err)
	}

	p.SetLatency(timeout + time.Second)
	var w rolloutdb.BusinessWrites
	goal := w.AddGoal("boss", "once")
	if _, err := tu.Commit(ctx, rolloutdb.Commit{Business: &w}); !errors.Is(err, rolloutdb.ErrUnavailable) || errors.Is(err, rolloutdb.ErrInDoubt) {
		t.Fatalf("a commit whose ids could not be drawn: %v", err)
	}
	p.SetLatency(0)
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err := tu.Commit(ctx, rolloutdb.Commit{Business: &w})
		if err == nil {
			break
		}
		if !errors.Is(err, rolloutdb.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("the retry: %v", err)
		}
	}
	if got := businessString(t, a, "boss"); got != `goal boss "once" active; ` || goal.ID == 0 {
		t.Fatalf("after the retry: %q (goal %+v)", got, goal)
	}

	tu, err = th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "again"})
	if err != nil {
		t.Fatal(err)
	}
	p.SetLatency(timeout + time.Second)
	var w2 rolloutdb.BusinessWrites
	w2.SetGoalStatus(goal.ID, projection.GoalDone)
	w2.OpenEdge("boss", "helper")
	if _, err := tu.Commit(ctx, rolloutdb.Commit{Business: &w2}); !errors.Is(err, rolloutdb.ErrInDoubt) {
		t.Fatalf("a commit that went unanswered: %v", err)
	}
	if _, err := tu.Commit(ctx, rolloutdb.Commit{Business: &w2}); !errors.Is(err, rolloutdb.ErrInDoubt) {
		t.Fatalf("a retry on the handle in doubt: %v", err)
	}
	p.SetLatency(0)
	rolloutdb.CrashForTest(a) // the host gives up, its lease held until it ends
	expireLease(t, direct, "a")
	b := openFleetHost(t, direct, "b", 0)
	th2 := resume(t, b, "boss")
	info, err := b.ThreadInfo(ctx, "boss")
	if err != nil {
		t.Fatal(err)
	}
	both := `goal boss "once" done; edge boss>helper open; `
	neither := `goal boss "once" active; `
	switch got := businessString(t, b, "boss", "helper"); {
	case got == both && info.Turns == 2 && info.OpenTurn == "":
	case got == neither && info.Turns == 2 && info.OpenTurn != "":
	default:
		t.Fatalf("after the commit in doubt: business %q, thread %+v", got, info)
	}
	mustCommitTurn(t, th2, "on", nil)
}
