package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// listenRaw listens on the workspace's channel with a connection of the
// test's own, and returns the next payload each call.
func listenRaw(t testing.TB, dsn string, l *fleet.Log) func() string {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	if _, err := conn.Exec(ctx, fmt.Sprintf(`LISTEN rolloutdb_ws_%d`, l.Workspace())); err != nil {
		t.Fatal(err)
	}
	return func() string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("no notice: %v", err)
		}
		return n.Payload
	}
}

// After a commit round, and after a lifecycle change, the host sends a
// notice on the workspace's channel, from a connection of its own, that
// names the thread (its tid) and, for an append, where its frames now
// end; a host with NoNotify sends none.
func TestNoticeAfterEachRound(t *testing.T) {
	dsn := testDSN(t)
	a := openLog(t, dsn, "a", fleet.Options{})
	next := listenRaw(t, dsn, a)
	th, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	created := next()
	tid, ok := strings.CutSuffix(strings.TrimPrefix(created, "c"), ":t1")
	if !ok || !strings.HasPrefix(created, "c") {
		t.Fatalf("notice of a create: %q", created)
	}
	res, err := th.Append(ctx, []rollout.Record{item(t, "", "one")}, rollout.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := next(), fmt.Sprintf("%s:%d", tid, res.End); got != want {
		t.Fatalf("notice of an append: %q, want %q", got, want)
	}
	if err := a.Move(ctx, "t1", "active", "archived", th); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "a"+tid+":t1" {
		t.Fatalf("notice of an archive: %q", got)
	}
	th.Close()
	if err := a.Delete(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "d"+tid+":t1" {
		t.Fatalf("notice of a delete: %q", got)
	}
	waitFor(t, "4 notices counted", func() bool { return a.FollowMetrics().Notices == 4 })
	if m := a.FollowMetrics(); m.NoticeFailures != 0 {
		t.Fatalf("follow metrics %+v", m)
	}

	quiet := openLog(t, dsn, "quiet", fleet.Options{NoNotify: true})
	qt, err := quiet.Create(ctx, rollout.ThreadOpened{ThreadID: "t2"})
	if err != nil {
		t.Fatal(err)
	}
	defer qt.Close()
	if _, err := qt.Append(ctx, []rollout.Record{item(t, "", "one")}, rollout.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	// A notice after the quiet host's: the first heard is it.
	th2, err := a.Create(ctx, rollout.ThreadOpened{ThreadID: "t3"})
	if err != nil {
		t.Fatal(err)
	}
	defer th2.Close()
	if got := next(); !strings.HasSuffix(got, ":t3") {
		t.Fatalf("a notice from a host with NoNotify: %q", got)
	}
}

// waitFor polls cond until it holds, or fails after 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
	}
}
