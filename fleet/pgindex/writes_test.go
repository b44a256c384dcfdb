package pgindex

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// appendWith appends one agent message to a fleet thread with the
// business writes queue makes, in the frame's transaction.
func appendWith(t testing.TB, s *Store, th *fleet.Thread, text string, queue func(w *Writes)) error {
	t.Helper()
	p, err := th.Prepare([]rollout.Record{rec(t, rollout.KindItemAppended, "", rollout.Item{Type: rollout.ItemAgentMessage, Text: text})})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	_, err = th.WritePreparedWith(ctx, p, rollout.AppendOptions{}, func(_ context.Context, b *pgx.Batch) error {
		w := s.Writes(b)
		queue(w)
		return w.Err()
	})
	return err
}

// Business writes queued in a fleet append's batch commit with its frame;
// one that names a row that is not there (ErrNoSuchRow), or an argument
// refused, or a fence that does not hold, leaves neither the frame nor
// any write of the batch.
func TestWritesCommitWithTheFrame(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	w.feed = false
	w.create("boss", rollout.Source{})
	th := w.threads["boss"]
	var g, g2 projection.Goal
	var m projection.Message
	var queued int64
	if err := appendWith(t, s, th, "spawning", func(q *Writes) {
		// The ids reserved are known once queued, before any answer.
		if err := q.Reserve(ctx, 1, 1); err != nil {
			t.Fatal(err)
		}
		q.AddGoal("boss", "ship", &g)
		q.OpenEdge("boss", "helper")
		q.Send("boss", "helper", "look", &m)
		q.SetPlan("boss", []projection.PlanStep{{Text: "look", Status: "pending"}})
		q.AddGoal("boss", "then rest", &g2) // no id reserved: from the answer
		queued = g.ID * m.ID
	}); err != nil {
		t.Fatal(err)
	}
	goals, _ := s.Goals(ctx, "boss")
	inbox, _ := s.Inbox(ctx, "helper", false)
	if len(goals) != 2 || goals[0].ID != g.ID || g.Text != "ship" || goals[1].ID != g2.ID || g2.ID <= g.ID ||
		len(inbox) != 1 || inbox[0].ID != m.ID || m.Body != "look" || queued == 0 {
		t.Fatalf("goals %+v (%+v, %+v), inbox %+v (%+v)", goals, g, g2, inbox, m)
	}
	seq := th.LastSeq()

	for _, c := range []struct {
		name  string
		queue func(q *Writes)
		want  error
	}{
		{"no such goal", func(q *Writes) {
			var lost projection.Goal
			q.AddGoal("boss", "lost", &lost)
			q.SetGoalStatus(g.ID+1000, projection.GoalDone)
		}, projection.ErrNoSuchRow},
		{"no such edge", func(q *Writes) { q.SetGoalStatus(g.ID, projection.GoalDone); q.CloseEdge("helper", "boss") }, projection.ErrNoSuchRow},
		{"no such message", func(q *Writes) { q.CloseEdge("boss", "helper"); q.MarkRead(m.ID + 1000) }, projection.ErrNoSuchRow},
		{"a bad thread id", func(q *Writes) { q.MarkRead(m.ID); q.SetPlan("../x", nil) }, rollout.ErrInvalidThreadID},
	} {
		if err := appendWith(t, s, th, c.name, c.queue); !errors.Is(err, c.want) {
			t.Fatalf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if th.LastSeq() != seq {
		t.Fatalf("last seq %d after appends that failed, want %d", th.LastSeq(), seq)
	}
	want := "goal boss \"ship\" active\ngoal boss \"then rest\" active\nplan boss [{look pending}]\nplan helper []\nmessage boss -> helper \"look\" read false\nedge boss -> helper open closed false\n"
	if got := business(t, s, "boss", "helper"); got != want {
		t.Fatalf("business state after appends that failed:\n%s", got)
	}

	// Another host takes the thread: this one's writes go nowhere.
	exec(t, w.log.Pool(), `UPDATE rolloutdb.hosts SET lease_until = now() - interval '1 second' WHERE host = 'a'`)
	other := w.openLog("b")
	th2, err := other.Open(ctx, "boss", projection.LocationActive)
	if err != nil {
		t.Fatal(err)
	}
	defer th2.Close()
	if err := appendWith(t, s, th, "zombie", func(q *Writes) { q.SetGoalStatus(g.ID, projection.GoalAbandoned) }); !errors.Is(err, fleet.ErrFenced) {
		t.Fatalf("a fenced host's append: %v", err)
	}
	if err := appendWith(t, s, th2, "done", func(q *Writes) { q.SetGoalStatus(g.ID, projection.GoalDone); q.CloseEdge("boss", "helper") }); err != nil {
		t.Fatal(err)
	}
	if goals, _ := s.Goals(ctx, "boss"); len(goals) != 2 || goals[0].Status != projection.GoalDone {
		t.Fatalf("goals after the takeover: %+v", goals)
	}
	if th2.LastSeq() != seq+1 {
		t.Fatalf("last seq %d, want %d", th2.LastSeq(), seq+1)
	}
}

// An index at layout 1 (before index_expect and the origin keys) is
// migrated at Open, its business state kept and writable.
func TestLayoutOneIsMigrated(t *testing.T) {
	w := newWorld(t)
	g, err := w.pg.AddGoal(ctx, "t0", "kept")
	if err != nil {
		t.Fatal(err)
	}
	m, err := w.pg.Send(ctx, "t1", "t0", "kept too")
	if err != nil {
		t.Fatal(err)
	}
	exec(t, w.log.Pool(), `DROP FUNCTION rolloutdb.index_expect(boolean, text);
		ALTER TABLE rolloutdb.goals DROP COLUMN origin, DROP COLUMN origin_id;
		ALTER TABLE rolloutdb.mailbox DROP COLUMN origin, DROP COLUMN origin_id;
		UPDATE rolloutdb.index_schema_version SET version = 1`)
	s := w.openIndex(w.log, Options{})
	var v int
	if err := w.log.Pool().QueryRow(ctx, `SELECT version FROM rolloutdb.index_schema_version`).Scan(&v); err != nil || v != SchemaVersion {
		t.Fatalf("layout %d after open (%v), want %d", v, err, SchemaVersion)
	}
	if err := s.SetGoalStatus(ctx, g.ID, projection.GoalDone); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkRead(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkRead(ctx, m.ID+1); !errors.Is(err, projection.ErrNoSuchRow) {
		t.Fatalf("no such message: %v", err)
	}
	if got := business(t, s, "t0"); got != "goal t0 \"kept\" done\nplan t0 []\nmessage t1 -> t0 \"kept too\" read true\n" {
		t.Fatalf("business state after the migration:\n%s", got)
	}
}
