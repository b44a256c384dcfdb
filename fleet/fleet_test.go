package fleet_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

func openLog(t testing.TB, dsn, host string, o fleet.Options) *fleet.Log {
	t.Helper()
	o.Host = host
	l, err := fleet.Open(ctx, dsn, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func item(t testing.TB, turn, text string) rollout.Record {
	t.Helper()
	rec, err := rollout.NewRecord(rollout.KindItemAppended, turn, rollout.Item{Type: rollout.ItemAgentMessage, Text: text})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// readAll reads a thread back through a Snapshot, as a rollout.
func readAll(t testing.TB, l *fleet.Log, id string) []rollout.Record {
	t.Helper()
	s, err := l.Read(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := rollout.NewReader(s, s.Size(), rollout.ReaderOptions{Path: l.Path(id)})
	if err != nil {
		t.Fatal(err)
	}
	var out []rollout.Record
	for r.Next() {
		out = append(out, r.Record())
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if d := r.Damage(); len(d) > 0 {
		t.Fatalf("damage reading %s: %v", id, d)
	}
	return out
}

func texts(t testing.TB, recs []rollout.Record) []string {
	t.Helper()
	var out []string
	for _, r := range recs {
		if r.Kind != rollout.KindItemAppended {
			continue
		}
		b, err := r.DecodeBody()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b.(*rollout.Item).Text)
	}
	return out
}

// A thread created and appended on one host reads back, as a rollout,
// on another: the frames are the rollout's, byte for byte.
func TestAppendAndReadBackOnAnotherHost(t *testing.T) {
	dsn := testDSN(t)
	a := openLog(t, dsn, "a", fleet.Options{})
	th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1", WorkspaceID: a.WorkspaceID()})
	if err != nil {
		t.Fatal(err)
	}
	if res, rec, ok := th.Created(); !ok || res.FirstSeq != 1 || rec.Kind != rollout.KindThreadOpened {
		t.Fatalf("Created: %+v %v %v", res, rec.Kind, ok)
	}
	var want []string
	for i := range 50 {
		text := fmt.Sprintf("m%d %s", i, strings.Repeat("x", i*40))
		res, err := th.Append(ctx, []rollout.Record{item(t, "", text)}, rollout.AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.FirstSeq != uint64(i+2) {
			t.Fatalf("append %d: seq %d", i, res.FirstSeq)
		}
		want = append(want, text)
	}
	if _, err := th.Append(ctx, []rollout.Record{item(t, "", "stale")}, rollout.AppendOptions{IfLastSeq: 3}); !errors.Is(err, rollout.ErrConflict) {
		t.Fatalf("IfLastSeq: %v", err)
	}
	end := th.End()
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
	b := openLog(t, dsn, "b", fleet.Options{})
	got := readAll(t, b, "t1")
	if g := texts(t, got); strings.Join(g, "|") != strings.Join(want, "|") {
		t.Fatalf("read back %d items, want %d", len(g), len(want))
	}
	if got[0].Kind != rollout.KindThreadOpened || got[len(got)-1].Seq != 51 {
		t.Fatalf("first %s, last seq %d", got[0].Kind, got[len(got)-1].Seq)
	}
	// b takes it over and goes on where a stopped.
	th2, err := b.Open(ctx, "t1", "active")
	if err != nil {
		t.Fatal(err)
	}
	defer th2.Close()
	if th2.End() != end || th2.LastSeq() != 51 {
		t.Fatalf("reopened at end %d seq %d, want %d 51", th2.End(), th2.LastSeq(), end)
	}
	if res, err := th2.Append(ctx, []rollout.Record{item(t, "", "on b")}, rollout.AppendOptions{}); err != nil || res.FirstSeq != 52 {
		t.Fatalf("append on b: %+v %v", res, err)
	}
	if g := texts(t, readAll(t, a, "t1")); g[len(g)-1] != "on b" {
		t.Fatalf("a reads %q last", g[len(g)-1])
	}
}

// A thread has one writer across the fleet: a second host is refused
// with an error naming the owner, and gets the thread at once when the
// owner closes it.
func TestOneOwnerAndGracefulHandOff(t *testing.T) {
	dsn := testDSN(t)
	a := openLog(t, dsn, "host-a", fleet.Options{})
	b := openLog(t, dsn, "host-b", fleet.Options{})
	th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Open(ctx, "t1", "active")
	var oe *fleet.OwnerError
	if !errors.As(err, &oe) || oe.Host != "host-a" || !errors.Is(err, rollout.ErrThreadLocked) {
		t.Fatalf("second host: %v", err)
	}
	if _, err := b.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"}); !errors.Is(err, rollout.ErrThreadExists) {
		t.Fatalf("create of an existing id: %v", err)
	}
	if _, err := b.Open(ctx, "nope", "active"); !vfs.IsNotExist(err) {
		t.Fatalf("open of a missing thread: %v", err)
	}
	if _, err := b.Open(ctx, "t1", "archived"); !vfs.IsNotExist(err) {
		t.Fatalf("open at the wrong location: %v", err)
	}
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	th2, err := b.Open(ctx, "t1", "active")
	if err != nil {
		t.Fatal(err)
	}
	defer th2.Close()
	if time.Since(start) > time.Second {
		t.Fatalf("hand-off took %v", time.Since(start))
	}
}

// A host whose lease expired, or whose thread another host took over,
// writes nothing: its appends fail with ErrFenced.
func TestZombieIsFenced(t *testing.T) {
	dsn := testDSN(t)
	a := openLog(t, dsn, "zombie", fleet.Options{LeaseTTL: time.Hour})
	b := openLog(t, dsn, "taker", fleet.Options{})
	th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := th.Append(ctx, []rollout.Record{item(t, "", "before")}, rollout.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	// a is paused past its lease: as far as the database knows, it is.
	expire(t, dsn, "zombie")
	th2, err := b.Open(ctx, "t1", "active")
	if err != nil {
		t.Fatal(err)
	}
	defer th2.Close()
	if _, err := th.Append(ctx, []rollout.Record{item(t, "", "zombie")}, rollout.AppendOptions{}); !errors.Is(err, fleet.ErrFenced) {
		t.Fatalf("zombie append: %v", err)
	}
	if _, err := th.Append(ctx, []rollout.Record{item(t, "", "zombie again")}, rollout.AppendOptions{}); !errors.Is(err, fleet.ErrFenced) {
		t.Fatalf("second zombie append: %v", err)
	}
	if _, err := th2.Append(ctx, []rollout.Record{item(t, "", "after")}, rollout.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if g := strings.Join(texts(t, readAll(t, b, "t1")), ","); g != "before,after" {
		t.Fatalf("thread holds %q", g)
	}
	if n := count(t, dsn, `SELECT count(*) FROM rolloutdb.frames f JOIN rolloutdb.threads t USING (tid) WHERE t.id = 't1' AND f.epoch < t.epoch AND f.seq > 2`); n != 0 {
		t.Fatalf("%d frames of the fenced epoch after the takeover", n)
	}
}

// A lease that expired with nobody taking over still fences: the host
// writes nothing until it opens the thread again.
func TestExpiredLeaseFencesWithoutTakeover(t *testing.T) {
	dsn := testDSN(t)
	a := openLog(t, dsn, "paused", fleet.Options{LeaseTTL: time.Hour})
	th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	expire(t, dsn, "paused")
	if _, err := th.Append(ctx, []rollout.Record{item(t, "", "late")}, rollout.AppendOptions{}); !errors.Is(err, fleet.ErrFenced) {
		t.Fatalf("append past the lease: %v", err)
	}
	if g := texts(t, readAll(t, a, "t1")); len(g) != 0 {
		t.Fatalf("thread holds %q", g)
	}
}

// Two hosts racing to take one free thread: exactly one wins, the other
// is told who.
func TestTakeoverRace(t *testing.T) {
	dsn := testDSN(t)
	a := openLog(t, dsn, "creator", fleet.Options{})
	th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	th.Close()
	for round := range 10 {
		var logs []*fleet.Log
		for i := range 4 {
			logs = append(logs, openLog(t, dsn, fmt.Sprintf("r%d-%d", round, i), fleet.Options{}))
		}
		var mu sync.Mutex
		var won []*fleet.Thread
		var wg sync.WaitGroup
		for _, l := range logs {
			wg.Go(func() {
				th, err := l.Open(ctx, "t1", "active")
				if err != nil {
					if !errors.Is(err, rollout.ErrThreadLocked) {
						t.Error(err)
					}
					return
				}
				mu.Lock()
				won = append(won, th)
				mu.Unlock()
			})
		}
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("round %d: %d hosts own the thread", round, len(won))
		}
		if _, err := won[0].Append(ctx, []rollout.Record{item(t, "", fmt.Sprint(round))}, rollout.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		won[0].Close()
	}
	if n := len(texts(t, readAll(t, a, "t1"))); n != 10 {
		t.Fatalf("%d items, want 10", n)
	}
}

// Appends of many threads on one host share commit rounds, and every
// acknowledged frame is there, in order, once.
func TestGroupCommitManyThreads(t *testing.T) {
	dsn := testDSN(t)
	l := openLog(t, dsn, "busy", fleet.Options{})
	const threads, per = 16, 40
	var wg sync.WaitGroup
	for i := range threads {
		id := fmt.Sprintf("t%02d", i)
		th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: id})
		if err != nil {
			t.Fatal(err)
		}
		for w := range 2 {
			wg.Go(func() {
				for j := range per {
					if _, err := th.Append(ctx, []rollout.Record{item(t, "", fmt.Sprintf("%d-%d", w, j))}, rollout.AppendOptions{}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		t.Cleanup(func() { th.Close() })
	}
	wg.Wait()
	for i := range threads {
		recs := readAll(t, l, fmt.Sprintf("t%02d", i))
		if len(recs) != 1+2*per {
			t.Fatalf("thread %d: %d records", i, len(recs))
		}
		for k, r := range recs {
			if r.Seq != uint64(k+1) {
				t.Fatalf("thread %d: record %d has seq %d", i, k, r.Seq)
			}
		}
	}
	m := l.Metrics()
	if m.Frames != threads*2*per || m.Rounds >= m.Frames {
		t.Fatalf("metrics %+v: want %d frames in fewer rounds", m, threads*2*per)
	}
}

// A database of a newer layout is refused, and nothing changes.
func TestNewerSchemaRefused(t *testing.T) {
	dsn := testDSN(t)
	l := openLog(t, dsn, "a", fleet.Options{})
	l.Close()
	exec(t, dsn, `UPDATE rolloutdb.schema_version SET version = 99`)
	if _, err := fleet.Open(ctx, dsn, fleet.Options{Host: "b"}); !errors.Is(err, fleet.ErrNewerSchema) {
		t.Fatalf("open of a newer layout: %v", err)
	}
}

// A wrong DSN and a role without rights get clear errors.
func TestBadDSNAndRights(t *testing.T) {
	if _, err := fleet.Open(ctx, "postgres://postgres@127.0.0.1:1/none?sslmode=disable", fleet.Options{CommitTimeout: 500 * time.Millisecond}); !errors.Is(err, fleet.ErrUnavailable) {
		t.Fatalf("unreachable: %v", err)
	}
	if _, err := fleet.Open(ctx, "postgres://[bad", fleet.Options{}); err == nil || !strings.Contains(err.Error(), "DSN") {
		t.Fatalf("malformed DSN: %v", err)
	}
	dsn := testDSN(t)
	exec(t, dsn, `CREATE ROLE weak LOGIN; REVOKE CREATE ON SCHEMA public FROM PUBLIC`)
	weak := strings.Replace(dsn, "postgres@", "weak@", 1)
	if _, err := fleet.Open(ctx, weak, fleet.Options{}); !errors.Is(err, fleet.ErrPermission) {
		t.Fatalf("role without rights: %v", err)
	}
	exec(t, dsn, `DROP ROLE weak`)
}

// A frame over the size limit is refused before anything is written.
func TestOversizedFrame(t *testing.T) {
	l := openLog(t, testDSN(t), "a", fleet.Options{})
	th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	big := item(t, "", strings.Repeat("y", rollout.MaxFrameSize+1))
	if _, err := th.Append(ctx, []rollout.Record{big}, rollout.AppendOptions{}); !errors.Is(err, rollout.ErrTooLarge) {
		t.Fatalf("oversized: %v", err)
	}
	if _, err := th.Append(ctx, []rollout.Record{item(t, "", "fine")}, rollout.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
}

func expire(t testing.TB, dsn, host string) {
	t.Helper()
	exec(t, dsn, `UPDATE rolloutdb.hosts SET lease_until = now() - interval '1 second' WHERE host = '`+host+`'`)
}

func exec(t testing.TB, dsn, sql string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
}

func count(t testing.TB, dsn, sql string) int64 {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Archive, restore, delete and a whole-thread write go through the same
// ownership: a thread a live host owns is refused, one it holds moves
// with its handle.
func TestLifecycleRespectsOwnership(t *testing.T) {
	dsn := testDSN(t)
	a := openLog(t, dsn, "owner", fleet.Options{})
	b := openLog(t, dsn, "other", fleet.Options{})
	th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Free(ctx, "t1"); !errors.Is(err, rollout.ErrThreadLocked) {
		t.Fatalf("Free of an owned thread: %v", err)
	}
	if err := b.Move(ctx, "t1", "active", "archived", nil); !errors.Is(err, rollout.ErrThreadLocked) {
		t.Fatalf("move of another host's thread: %v", err)
	}
	if err := b.Delete(ctx, "t1"); !errors.Is(err, rollout.ErrThreadLocked) {
		t.Fatalf("delete of another host's thread: %v", err)
	}
	if err := a.Move(ctx, "t1", "active", "archived", th); err != nil {
		t.Fatal(err)
	}
	if loc, err := b.Locate(ctx, "t1"); err != nil || loc != "archived" {
		t.Fatalf("Locate: %q %v", loc, err)
	}
	if err := a.Move(ctx, "t1", "active", "archived", th); !vfs.IsNotExist(err) {
		t.Fatalf("move from the wrong location: %v", err)
	}
	th.Close()
	if err := b.Move(ctx, "t1", "archived", "active", nil); err != nil {
		t.Fatal(err)
	}
	head, err := rollout.NewRecord(rollout.KindThreadOpened, "", rollout.ThreadOpened{ThreadID: "copy"})
	if err != nil {
		t.Fatal(err)
	}
	frames := [][]rollout.Record{{head}, {item(t, "", "one"), item(t, "", "two")}, {item(t, "", "three")}}
	if err := b.Write(ctx, "copy", frames); err != nil {
		t.Fatal(err)
	}
	if err := b.Write(ctx, "copy", frames); !errors.Is(err, rollout.ErrThreadExists) {
		t.Fatalf("second write: %v", err)
	}
	if g := strings.Join(texts(t, readAll(t, a, "copy")), ","); g != "one,two,three" {
		t.Fatalf("written thread holds %q", g)
	}
	c, err := a.Open(ctx, "copy", "active")
	if err != nil {
		t.Fatal(err)
	}
	if c.LastSeq() != 4 {
		t.Fatalf("written thread opens at seq %d", c.LastSeq())
	}
	c.Close()
	if err := b.Delete(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(ctx, "t1"); !vfs.IsNotExist(err) {
		t.Fatalf("read after delete: %v", err)
	}
	if n := count(t, dsn, `SELECT count(*) FROM rolloutdb.frames f JOIN rolloutdb.threads t USING (tid) WHERE t.id = 't1'`); n != 0 {
		t.Fatalf("%d frames left", n)
	}
}
