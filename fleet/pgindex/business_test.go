package pgindex

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// businessIndex is the business half of both stores.
type businessIndex interface {
	AddGoal(ctx context.Context, thread, text string) (projection.Goal, error)
	SetGoalStatus(ctx context.Context, id int64, status string) error
	Goals(ctx context.Context, thread string) ([]projection.Goal, error)
	SetPlan(ctx context.Context, thread string, steps []projection.PlanStep) error
	Plan(ctx context.Context, thread string) ([]projection.PlanStep, error)
	OpenEdge(ctx context.Context, parent, child string) error
	CloseEdge(ctx context.Context, parent, child string) error
	Edges(ctx context.Context, f projection.EdgeFilter) ([]projection.Edge, error)
	Send(ctx context.Context, from, to, body string) (projection.Message, error)
	Inbox(ctx context.Context, to string, unreadOnly bool) ([]projection.Message, error)
	MarkRead(ctx context.Context, id int64) error
	RecordResumeReport(ctx context.Context, thread string, rep recovery.Report) error
	Diagnostics(ctx context.Context, thread string) ([]projection.Diagnostic, error)
	DeleteBusinessState(ctx context.Context, threads []string) error
}

// business renders a store's business state for threads, without ids
// and times (each store draws its own), with whether a time is set.
func business(t testing.TB, s businessIndex, threads ...string) string {
	t.Helper()
	var b strings.Builder
	for _, id := range threads {
		goals, err := s.Goals(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range goals {
			fmt.Fprintf(&b, "goal %s %q %s\n", g.Thread, g.Text, g.Status)
		}
		plan, err := s.Plan(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "plan %s %v\n", id, plan)
		inbox, err := s.Inbox(ctx, id, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range inbox {
			fmt.Fprintf(&b, "message %s -> %s %q read %v\n", m.From, m.To, m.Body, m.ReadAt != nil)
		}
	}
	edges, err := s.Edges(ctx, projection.EdgeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range edges {
		fmt.Fprintf(&b, "edge %s -> %s %s closed %v\n", e.Parent, e.Child, e.Status, e.ClosedAt != nil)
	}
	diags, err := s.Diagnostics(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diags {
		d.SeenAt = d.SeenAt.Truncate(0)
		fmt.Fprintf(&b, "diagnostic %s %d %d %d-%d %s %s %v\n", d.Thread, d.Offset, d.Length, d.FirstSeq, d.LastSeq, d.Kind, d.Reason, d.AckLost)
	}
	return b.String()
}

// Business state round-trips as state.db's does (the same calls on both
// give the same rows), survives a rebuild, refuses what state.db refuses,
// belongs to its workspace alone, and goes with DeleteBusinessState.
func TestBusinessStateRoundTrips(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	for i := range 3 {
		w.create(fmt.Sprint("t", i), rollout.Source{})
		w.turn(fmt.Sprint("t", i), "a", "hello")
	}
	rep := recovery.Report{Skipped: []recovery.Skipped{{Offset: 300, Length: 20, Kind: "item_appended", FirstSeq: 4, LastSeq: 5, Reason: "bad_crc", AckLost: true},
		{Offset: 900, Reason: "undecodable", FirstSeq: 9, LastSeq: 9}}}
	for _, st := range []businessIndex{s, w.local} {
		if _, err := st.AddGoal(ctx, "t0", "ship it"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AddGoal(ctx, "t0", "then rest"); err != nil {
			t.Fatal(err)
		}
		if err := st.SetPlan(ctx, "t0", []projection.PlanStep{{Text: "write", Status: "done"}, {Text: "test", Status: "pending"}}); err != nil {
			t.Fatal(err)
		}
		for _, e := range [][2]string{{"t0", "t1"}, {"t0", "t2"}, {"t1", "t2"}} {
			if err := st.OpenEdge(ctx, e[0], e[1]); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.Send(ctx, "t1", "t0", "done"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Send(ctx, "t0", "t2", "go"); err != nil {
			t.Fatal(err)
		}
		for range 2 { // each skipped record is kept once
			if err := st.RecordResumeReport(ctx, "t1", rep); err != nil {
				t.Fatal(err)
			}
		}
	}
	threads := []string{"t0", "t1", "t2"}
	if got, want := business(t, s, threads...), business(t, w.local, threads...); got != want {
		t.Fatalf("business state:\nfleet %s\nlocal %s", got, want)
	}
	before := business(t, s, threads...)
	rows := dump(t, s)
	if _, err := s.Rebuild(ctx, projection.RebuildOptions{Restart: true}); err != nil {
		t.Fatal(err)
	}
	if got := business(t, s, threads...); got != before {
		t.Fatalf("a rebuild changed business state:\n%s\nwant\n%s", got, before)
	}
	if got := dump(t, s); got != rows {
		t.Fatalf("a rebuild changed the rows:\n%s", dumpDiff(got, rows))
	}

	// As a host uses them, on both.
	for _, st := range []businessIndex{s, w.local} {
		if err := st.CloseEdge(ctx, "t0", "t1"); err != nil {
			t.Fatal(err)
		}
		if err := st.CloseEdge(ctx, "t1", "t0"); !errors.Is(err, projection.ErrNoSuchRow) {
			t.Fatalf("closing an edge that is not there: %v", err)
		}
		if err := st.OpenEdge(ctx, "t1", "t1"); err == nil {
			t.Fatal("a thread its own subagent")
		}
		edges, _ := st.Edges(ctx, projection.EdgeFilter{Parent: "t0", Status: projection.EdgeClosed})
		if len(edges) != 1 || edges[0].Child != "t1" || edges[0].ClosedAt == nil {
			t.Fatalf("closed edges of t0: %+v", edges)
		}
		if edges, _ := st.Edges(ctx, projection.EdgeFilter{Child: "t2"}); len(edges) != 2 {
			t.Fatalf("edges to t2: %+v", edges)
		}
		inbox, _ := st.Inbox(ctx, "t0", true)
		if len(inbox) != 1 || inbox[0].Body != "done" || inbox[0].From != "t1" {
			t.Fatalf("inbox: %+v", inbox)
		}
		if err := st.MarkRead(ctx, inbox[0].ID); err != nil {
			t.Fatal(err)
		}
		if err := st.MarkRead(ctx, inbox[0].ID); err != nil {
			t.Fatalf("a message read twice: %v", err)
		}
		if err := st.MarkRead(ctx, inbox[0].ID+1000); !errors.Is(err, projection.ErrNoSuchRow) {
			t.Fatalf("no such message: %v", err)
		}
		if inbox, _ := st.Inbox(ctx, "t0", true); len(inbox) != 0 {
			t.Fatalf("a read message still unread: %+v", inbox)
		}
		goals, _ := st.Goals(ctx, "t0")
		if len(goals) != 2 || goals[0].Text != "ship it" || goals[0].Status != projection.GoalActive {
			t.Fatalf("goals: %+v", goals)
		}
		if err := st.SetGoalStatus(ctx, goals[0].ID, projection.GoalDone); err != nil {
			t.Fatal(err)
		}
		if err := st.SetGoalStatus(ctx, goals[1].ID+1000, projection.GoalDone); !errors.Is(err, projection.ErrNoSuchRow) {
			t.Fatalf("no such goal: %v", err)
		}
		if err := st.SetPlan(ctx, "t1", []projection.PlanStep{{Text: "only", Status: "pending"}}); err != nil {
			t.Fatal(err)
		}
		if err := st.SetPlan(ctx, "t1", nil); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"../x", "UPPER", ""} {
			if _, err := st.AddGoal(ctx, bad, "x"); !errors.Is(err, rollout.ErrInvalidThreadID) {
				t.Fatalf("AddGoal(%q): %v", bad, err)
			}
			if _, err := st.Send(ctx, "t0", bad, "x"); !errors.Is(err, rollout.ErrInvalidThreadID) {
				t.Fatalf("Send to %q: %v", bad, err)
			}
		}
	}
	if got, want := business(t, s, threads...), business(t, w.local, threads...); got != want {
		t.Fatalf("business state after use:\nfleet %s\nlocal %s", got, want)
	}

	// Another workspace in the same database sees none of it, and its own
	// rows are its own.
	lo, err := fleet.Open(ctx, w.dsn, fleet.Options{Host: "o", Workspace: "other"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lo.Close() })
	so := w.openIndex(lo, Options{})
	if got := business(t, so, threads...); got != "plan t0 []\nplan t1 []\nplan t2 []\n" {
		t.Fatalf("another workspace's business state:\n%s", got)
	}
	if p, err := so.List(ctx, projection.ListOptions{Scope: projection.ScopeAll}); err != nil || len(p.Threads) != 0 {
		t.Fatalf("another workspace's list: %+v %v", p, err)
	}
	if _, err := so.AddGoal(ctx, "t0", "elsewhere"); err != nil {
		t.Fatal(err)
	}
	if g, _ := s.Goals(ctx, "t0"); len(g) != 2 {
		t.Fatalf("a goal of another workspace is seen: %+v", g)
	}

	// A thread deleted for good takes its business state with it.
	w.remove("t0")
	for _, st := range []businessIndex{s, w.local} {
		if err := st.DeleteBusinessState(ctx, []string{"t0"}); err != nil {
			t.Fatal(err)
		}
	}
	got := business(t, s, threads...)
	if strings.Contains(strings.ReplaceAll(got, "plan t0 []", ""), "t0") {
		t.Fatalf("t0's business rows survived its deletion:\n%s", got)
	}
	if want := business(t, w.local, threads...); got != want {
		t.Fatalf("business state after a delete:\nfleet %s\nlocal %s", got, want)
	}
	if g, _ := so.Goals(ctx, "t0"); len(g) != 1 {
		t.Fatalf("another workspace's goal went with this one's thread: %+v", g)
	}
	if _, err := s.Thread(ctx, "t0"); !errors.Is(err, projection.ErrNotFound) {
		t.Fatalf("a deleted thread: %v", err)
	}
}

// The cleanup queue keeps what is queued until done, oldest first,
// counting failed attempts, per workspace.
func TestCleanupQueue(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	if err := s.EnqueueCleanup(ctx, "thread t1 deleted", "tool-results/t1/a", "tool-results/t1/b"); err != nil {
		t.Fatal(err)
	}
	if err := s.EnqueueCleanup(ctx, "thread t2 deleted", "terminals/t2"); err != nil {
		t.Fatal(err)
	}
	q, err := s.PendingCleanup(ctx)
	if err != nil || len(q) != 3 || q[0].Path != "tool-results/t1/a" || q[1].Path != "tool-results/t1/b" || q[2].Reason != "thread t2 deleted" {
		t.Fatalf("queue: %+v %v", q, err)
	}
	if err := s.CleanupFailed(ctx, q[0].ID, errors.New("permission denied")); err != nil {
		t.Fatal(err)
	}
	if err := s.CleanupFailed(ctx, q[0].ID, errors.New("still denied")); err != nil {
		t.Fatal(err)
	}
	if err := s.CleanupDone(ctx, q[1].ID); err != nil {
		t.Fatal(err)
	}
	// Another host's index of the workspace has the same queue; another
	// workspace's none of it.
	other := w.openIndex(w.openLog("b"), Options{})
	q, err = other.PendingCleanup(ctx)
	if err != nil || len(q) != 2 || q[0].Attempts != 2 || q[0].LastError != "still denied" || q[1].Path != "terminals/t2" {
		t.Fatalf("queue after a failure and a removal: %+v %v", q, err)
	}
	lo, err := fleet.Open(ctx, w.dsn, fleet.Options{Host: "o", Workspace: "other"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lo.Close() })
	if q, err := w.openIndex(lo, Options{}).PendingCleanup(ctx); err != nil || len(q) != 0 {
		t.Fatalf("another workspace's queue: %+v %v", q, err)
	}
}
