package rolloutdb_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// A thread's life: archive, restore, delete with subagents; rollback;
// fork; the business state beside it.

// subagentTree makes root r with subagents c (open edge), g (c's, open)
// and d (r's, edge closed), each with a turn and a goal.
func subagentTree(t testing.TB, db *rolloutdb.DB) {
	t.Helper()
	for _, n := range []struct{ id, parent string }{{"r", ""}, {"c", "r"}, {"g", "c"}, {"d", "r"}} {
		o := rolloutdb.ThreadOptions{ID: n.id}
		if n.parent != "" {
			o.Source = rollout.Source{Kind: rollout.SourceSubagent, Parent: n.parent, Root: "r"}
		}
		mustThreadWithTurns(t, db, o, "work for "+n.id)
		if _, err := db.Business().AddGoal(ctx, n.id, "goal of "+n.id); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Business().CloseEdge(ctx, "r", "d"); err != nil {
		t.Fatal(err)
	}
}

// threadPlaces lists each thread of the workspace as id=location, newest
// first.
func threadPlaces(t testing.TB, db *rolloutdb.DB) string {
	t.Helper()
	page, err := db.List(ctx, projection.ListOptions{Scope: projection.ScopeAll, Sort: projection.SortCreated})
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, info := range page.Threads {
		s = append(s, info.ID+"="+info.Status)
	}
	return fmt.Sprint(s)
}

// Archive takes a root and every subagent below it (open and closed
// edges) to archived, asking the terminal hook for each; new turns are
// refused, history stays readable and followable. Restore brings back the
// root and the subagents whose edges are open. Delete removes the whole
// tree with its rows and business state. A subagent alone is refused
// (ErrSubagent); another host sees each step.
func behaveArchiveRestoreDeleteTree(t *testing.T, e engine) {
	var mu sync.Mutex
	var hooked []string
	hook := func(_ context.Context, id string) error {
		mu.Lock()
		defer mu.Unlock()
		hooked = append(hooked, id)
		return nil
	}
	ws, db := e.open(t, rolloutdb.Options{TerminalHook: hook})
	other := e.reopen(t, ws, rolloutdb.Options{})
	subagentTree(t, db)
	for name, op := range map[string]func(string) error{
		"archive": func(id string) error { _, err := db.Archive(ctx, id, "done"); return err },
		"delete":  func(id string) error { _, err := db.Delete(ctx, id); return err },
	} {
		isErr(t, name+" of a subagent alone", op("c"), rolloutdb.ErrSubagent)
	}
	_, err := db.Restore(ctx, "r")
	isErr(t, "restore of an active thread", err, rolloutdb.ErrNotArchived)

	// r is held open with a turn running: the archive does not cancel it.
	r := mustOpenThread(t, db, "r")
	running, err := r.StartTurn(ctx, rolloutdb.TurnOptions{Input: "still running"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := db.Archive(ctx, "r", "done")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sorted(rep.Threads), []string{"c", "d", "g", "r"}) || rep.Threads[0] != "r" || !slices.Equal(sorted(hooked), []string{"c", "d", "g", "r"}) {
		t.Fatalf("archived %v (root first), hook asked for %v", rep.Threads, hooked)
	}
	for _, d := range []*rolloutdb.DB{db, other} {
		if got := threadPlaces(t, d); got != "[d=archived g=archived c=archived r=archived]" {
			t.Fatalf("after archive: %s", got)
		}
	}
	_, err = r.StartTurn(ctx, rolloutdb.TurnOptions{})
	isErr(t, "a new turn on an archived thread", err, rolloutdb.ErrThreadArchived)
	if _, err := running.Commit(ctx, rolloutdb.Commit{}); err != nil {
		t.Fatalf("the turn running at the archive could not commit: %v", err)
	}
	mustClose(t, r)
	for _, d := range []*rolloutdb.DB{db, other} {
		_, err = d.OpenThread(ctx, "c")
		isErr(t, "open of an archived thread", err, rolloutdb.ErrThreadArchived)
	}
	_, err = db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "g"})
	isErr(t, "create with an archived thread's id", err, rolloutdb.ErrThreadExists)
	if info := mustInfo(t, db, "r"); info.Turns != 2 || info.Status != projection.LocationArchived {
		t.Fatalf("r archived: %+v", info)
	}
	if turns, err := db.Turns(ctx, "g", 1, 1); err != nil || len(turns) != 1 || turns[0].Items[0].Text != "work for g" {
		t.Fatalf("history of an archived thread: %+v, %v", turns, err)
	}
	// A follower of an archived thread reads it to the archive and ends.
	f := startFollower(t, other, "c", rolloutdb.FollowOptions{})
	f.waitEnd(t)
	if recs := f.seen(); f.err != nil || f.end != rolloutdb.FollowArchived || len(recs) == 0 || recs[len(recs)-1].Kind != rollout.KindArchived {
		t.Fatalf("follower of an archived thread: %v, %q, %d records", f.err, f.end, len(recs))
	}

	rep, err = db.Restore(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sorted(rep.Threads), []string{"c", "g", "r"}) || rep.Threads[0] != "r" {
		t.Fatalf("restored %v", rep.Threads)
	}
	for _, d := range []*rolloutdb.DB{db, other} {
		if got := threadPlaces(t, d); got != "[d=archived g=active c=active r=active]" {
			t.Fatalf("after restore: %s", got)
		}
	}
	c := mustOpenThread(t, other, "c") // restored threads take turns again
	mustCommitTurn(t, c, "after restore", nil)
	mustClose(t, c)

	mu.Lock()
	hooked = nil
	mu.Unlock()
	rep, err = db.Delete(ctx, "r")
	if err != nil || len(rep.Pending) != 0 {
		t.Fatalf("delete: %+v, %v", rep, err)
	}
	if !slices.Equal(sorted(rep.Threads), []string{"c", "d", "g", "r"}) || rep.Threads[0] != "r" {
		t.Fatalf("deleted %v", rep.Threads)
	}
	for _, d := range []*rolloutdb.DB{db, other} {
		if got := threadPlaces(t, d); got != "[]" {
			t.Fatalf("after delete: %s", got)
		}
		for _, id := range []string{"r", "c", "g", "d"} {
			_, err := d.ThreadInfo(ctx, id)
			isErr(t, "info of a deleted thread", err, rolloutdb.ErrNotFound)
			if goals, err := d.Business().Goals(ctx, id); err != nil || len(goals) != 0 {
				t.Fatalf("goals of deleted %s: %+v, %v", id, goals, err)
			}
			_, err = d.Follow(ctx, id, rolloutdb.FollowOptions{})
			isErr(t, "follow of a deleted thread", err, rolloutdb.ErrNotFound)
		}
		if edges, err := d.Business().Edges(ctx, projection.EdgeFilter{}); err != nil || len(edges) != 0 {
			t.Fatalf("edges after delete: %+v, %v", edges, err)
		}
	}
	for name, op := range map[string]func() error{
		"archive": func() error { _, err := db.Archive(ctx, "r", ""); return err },
		"restore": func() error { _, err := db.Restore(ctx, "r"); return err },
		"delete":  func() error { _, err := db.Delete(ctx, "r"); return err },
	} {
		isErr(t, name+" of a deleted thread", op(), rolloutdb.ErrNotFound)
	}
}

// A rollback drops the last turns from everything a host reads (resume
// and its model history, the paged history, the list's counts, search);
// a checkpoint of a rolled-back turn is no longer used; it is refused
// past the first turn and while a turn is open. It holds after a reopen.
func behaveRollback(t *testing.T, e engine) {
	ws, db := e.open(t, rolloutdb.Options{})
	th := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "rb"})
	var ids []string
	for i := 1; i <= 3; i++ {
		tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: fmt.Sprintf("question %d", i)})
		if err != nil {
			t.Fatal(err)
		}
		c := rolloutdb.Commit{Items: []rollout.Item{{Type: rollout.ItemAgentMessage, Text: fmt.Sprintf("answer%d", i)}}, ModelHistory: [][]byte{[]byte(fmt.Sprintf("h%d", i))}}
		if i >= 2 {
			c.Checkpoint = &rollout.Checkpoint{ReplacementHistory: [][]byte{[]byte(fmt.Sprintf("summary through %d", i))}}
		}
		if _, err := tu.Commit(ctx, c); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tu.ID())
	}
	_, err := th.Rollback(ctx, 4)
	isErr(t, "a rollback of more turns than there are", err, rolloutdb.ErrRollbackTooFar)
	if _, err := th.Rollback(ctx, 1); err != nil {
		t.Fatal(err)
	}
	check := func(db *rolloutdb.DB, when string, turns []string, history []string) {
		t.Helper()
		st := mustResumeState(t, db, "rb")
		var got []string
		for _, tu := range st.Turns {
			got = append(got, tu.ID)
		}
		var hist []string
		for _, h := range st.ModelHistory {
			hist = append(hist, string(h))
		}
		if !slices.Equal(got, turns) || !slices.Equal(hist, history) {
			t.Fatalf("%s: resumed turns %v, history %q; want %v, %q", when, got, hist, turns, history)
		}
		if info := mustInfo(t, db, "rb"); info.Turns != int64(len(turns)) {
			t.Fatalf("%s: info counts %d turns", when, info.Turns)
		}
		pages, err := db.Turns(ctx, "rb", 1, 10)
		if err != nil || len(pages) != len(turns) {
			t.Fatalf("%s: paged history %d turns, %v", when, len(pages), err)
		}
		for i, p := range pages {
			if p.ID != turns[i] {
				t.Fatalf("%s: page turn %d is %s, want %s", when, i+1, p.ID, turns[i])
			}
		}
		hits, err := db.Search(ctx, "answer3", projection.SearchOptions{})
		if err != nil || len(hits) != 0 {
			t.Fatalf("%s: a rolled-back turn's item is found: %+v, %v", when, hits, err)
		}
		// From the latest checkpoint still in force, the same model
		// history (ResumeOptions.FromCheckpoint).
		th, fast := mustResume(t, db, "rb", rolloutdb.ResumeOptions{FromCheckpoint: true})
		mustClose(t, th)
		if !reflect.DeepEqual(fast.ModelHistory, st.ModelHistory) {
			t.Fatalf("%s: model history from the checkpoint %q, full pass %q", when, fast.ModelHistory, st.ModelHistory)
		}
	}
	mustClose(t, th)
	// Turn 3's checkpoint is rolled back with it: turn 2's stands.
	check(db, "one rolled back", ids[:2], []string{"summary through 2"})

	th = mustOpenThread(t, db, "rb")
	tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "instead"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = th.Rollback(ctx, 1)
	isErr(t, "a rollback while a turn is open", err, rolloutdb.ErrTurnInProgress)
	if _, err := tu.Commit(ctx, rolloutdb.Commit{ModelHistory: [][]byte{[]byte("h-instead")}}); err != nil {
		t.Fatal(err)
	}
	if pages, err := db.Turns(ctx, "rb", 3, 3); err != nil || len(pages) != 1 || pages[0].ID != tu.ID() || pages[0].Ordinal != 3 {
		t.Fatalf("the turn after a rollback is turn 3: %+v, %v", pages, err)
	}
	// Two more: back to turn 1, with no checkpoint left in force.
	if _, err := th.Rollback(ctx, 2); err != nil {
		t.Fatal(err)
	}
	mustClose(t, th)
	check(db, "three rolled back", ids[:1], []string{"h1"})
	mustClose(t, db)
	check(e.reopen(t, ws, rolloutdb.Options{}), "reopened", ids[:1], []string{"h1"})
}

// A fork holds its source's turns up to the one named, names where it came
// from, takes turns of its own, and leaves the source as it was.
func behaveFork(t *testing.T, e engine) {
	ws, db := e.open(t, rolloutdb.Options{})
	src := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "src"})
	var ids []string
	for i := 1; i <= 3; i++ {
		ids = append(ids, mustCommitTurn(t, src, fmt.Sprintf("q%d", i), []string{fmt.Sprintf("h%d", i)}, rollout.Item{Type: rollout.ItemAgentMessage, Text: fmt.Sprintf("a%d", i)}))
	}
	// Fork works on a source held open by its writer.
	fk, err := db.Fork(ctx, "src", rolloutdb.ForkOptions{ID: "fk", AtTurn: 2, Metadata: map[string]string{"why": "try another way"}})
	if err != nil {
		t.Fatal(err)
	}
	if fk.ID() != "fk" {
		t.Fatalf("fork id %s", fk.ID())
	}
	mustCommitTurn(t, fk, "fork's own", []string{"hf"})
	forkSeq := fk.LastSeq()
	mustClose(t, fk)

	_, err = db.Fork(ctx, "src", rolloutdb.ForkOptions{ID: "fk"})
	isErr(t, "a fork onto an existing id", err, rolloutdb.ErrThreadExists)
	for _, n := range []int{4, -1} {
		_, err = db.Fork(ctx, "src", rolloutdb.ForkOptions{AtTurn: n})
		isErr(t, fmt.Sprintf("a fork at turn %d of 3", n), err, rolloutdb.ErrNoSuchTurn)
	}
	open, err := src.StartTurn(ctx, rolloutdb.TurnOptions{Input: "running"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Fork(ctx, "src", rolloutdb.ForkOptions{AtTurn: 4}); err == nil {
		t.Fatal("a fork at a turn that has not ended was made")
	}
	if _, err := open.Commit(ctx, rolloutdb.Commit{}); err != nil {
		t.Fatal(err)
	}
	mustClose(t, src)
	all, err := db.Fork(ctx, "src", rolloutdb.ForkOptions{ID: "whole"}) // AtTurn 0: the last turn
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, all)

	check := func(db *rolloutdb.DB, when string) {
		t.Helper()
		info := mustInfo(t, db, "fk")
		if info.ForkedFrom != "src" || info.ForkedTurn != ids[1] || info.Turns != 3 || info.ProjectedSeq != forkSeq {
			t.Fatalf("%s: fork info %+v", when, info)
		}
		st := mustResumeState(t, db, "fk")
		var got, hist []string
		for _, tu := range st.Turns {
			got = append(got, tu.ID)
		}
		for _, h := range st.ModelHistory {
			hist = append(hist, string(h))
		}
		if !slices.Equal(got[:2], ids[:2]) || len(got) != 3 || !slices.Equal(hist, []string{"h1", "h2", "hf"}) {
			t.Fatalf("%s: fork resumed %v, history %q", when, got, hist)
		}
		if st.Header.ForkedFrom == nil || *st.Header.ForkedFrom != (rollout.ForkRef{Thread: "src", Turn: ids[1]}) || st.Header.Metadata["why"] != "try another way" {
			t.Fatalf("%s: fork header %+v", when, st.Header)
		}
		if info := mustInfo(t, db, "src"); info.Turns != 4 || info.ForkedFrom != "" {
			t.Fatalf("%s: source after forks %+v", when, info)
		}
		if info := mustInfo(t, db, "whole"); info.Turns != 4 || info.ForkedTurn != open.ID() {
			t.Fatalf("%s: whole fork %+v", when, info)
		}
	}
	check(db, "forked")
	mustClose(t, db)
	check(e.reopen(t, ws, rolloutdb.Options{}), "reopened")
}

// Goals, plans, edges and the mailbox read back as written, from another
// host too, after a reopen, and after a rebuild of the projections (which
// never deletes business state).
func behaveBusinessState(t *testing.T, e engine) {
	ws, db := e.open(t, rolloutdb.Options{})
	mustThreadWithTurns(t, db, rolloutdb.ThreadOptions{ID: "boss"}, "q")
	mustThreadWithTurns(t, db, rolloutdb.ThreadOptions{ID: "helper", Source: rollout.Source{Kind: rollout.SourceSubagent, Parent: "boss", Root: "boss", Depth: 1}}, "q")
	biz := db.Business()
	g1, err := biz.AddGoal(ctx, "boss", "ship the fix")
	if err != nil || g1.ID == 0 || g1.Thread != "boss" || g1.Text != "ship the fix" || g1.Status != projection.GoalActive {
		t.Fatalf("AddGoal: %+v, %v", g1, err)
	}
	g2, err := biz.AddGoal(ctx, "boss", "write the test")
	if err != nil {
		t.Fatal(err)
	}
	if err := biz.SetGoalStatus(ctx, g1.ID, projection.GoalDone); err != nil {
		t.Fatal(err)
	}
	if err := biz.SetGoalStatus(ctx, g2.ID+1000, projection.GoalDone); err == nil {
		t.Fatal("a status set on a goal that does not exist")
	}
	if err := biz.SetPlan(ctx, "boss", []projection.PlanStep{{Text: "old", Status: "pending"}}); err != nil {
		t.Fatal(err)
	}
	plan := []projection.PlanStep{{Text: "reproduce", Status: "completed"}, {Text: "fix", Status: "in_progress"}, {Text: "test", Status: "pending"}}
	if err := biz.SetPlan(ctx, "boss", plan); err != nil { // replaces
		t.Fatal(err)
	}
	m1, err := biz.Send(ctx, "helper", "boss", "found it")
	if err != nil || m1.From != "helper" || m1.To != "boss" || m1.Body != "found it" {
		t.Fatalf("Send: %+v, %v", m1, err)
	}
	m2, err := biz.Send(ctx, "helper", "boss", "fixed it")
	if err != nil {
		t.Fatal(err)
	}
	if err := biz.MarkRead(ctx, m1.ID); err != nil {
		t.Fatal(err)
	}
	if err := biz.MarkRead(ctx, m2.ID+1000); err == nil {
		t.Fatal("a message that does not exist marked read")
	}
	if err := biz.CloseEdge(ctx, "boss", "helper"); err != nil {
		t.Fatal(err)
	}

	check := func(db *rolloutdb.DB, when string) {
		t.Helper()
		biz := db.Business()
		goals, err := biz.Goals(ctx, "boss")
		if err != nil || len(goals) != 2 || goals[0].ID != g1.ID || goals[0].Status != projection.GoalDone || goals[1].ID != g2.ID || goals[1].Status != projection.GoalActive {
			t.Fatalf("%s: goals %+v, %v", when, goals, err)
		}
		if got, err := biz.Plan(ctx, "boss"); err != nil || !reflect.DeepEqual(got, plan) {
			t.Fatalf("%s: plan %+v, %v", when, got, err)
		}
		if got, err := biz.Plan(ctx, "helper"); err != nil || len(got) != 0 {
			t.Fatalf("%s: helper's plan %+v, %v", when, got, err)
		}
		inbox, err := biz.Inbox(ctx, "boss", false)
		if err != nil || len(inbox) != 2 || inbox[0].ID != m1.ID || inbox[0].ReadAt == nil || inbox[1].ID != m2.ID || inbox[1].ReadAt != nil {
			t.Fatalf("%s: inbox %+v, %v", when, inbox, err)
		}
		unread, err := biz.Inbox(ctx, "boss", true)
		if err != nil || len(unread) != 1 || unread[0].ID != m2.ID {
			t.Fatalf("%s: unread %+v, %v", when, unread, err)
		}
		// CreateThread with a parent opened the edge; CloseEdge closed it.
		edges, err := biz.Edges(ctx, projection.EdgeFilter{Parent: "boss"})
		if err != nil || len(edges) != 1 || edges[0].Child != "helper" || edges[0].Status != projection.EdgeClosed || edges[0].ClosedAt == nil {
			t.Fatalf("%s: edges %+v, %v", when, edges, err)
		}
		if open, err := biz.Edges(ctx, projection.EdgeFilter{Status: projection.EdgeOpen}); err != nil || len(open) != 0 {
			t.Fatalf("%s: open edges %+v, %v", when, open, err)
		}
	}
	check(db, "written")
	other := e.reopen(t, ws, rolloutdb.Options{})
	check(other, "another host")
	if _, err := db.Rebuild(ctx, projection.RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	check(db, "rebuilt")
	if err := db.Business().OpenEdge(ctx, "boss", "helper"); err != nil { // reopened
		t.Fatal(err)
	}
	if open, err := other.Business().Edges(ctx, projection.EdgeFilter{Status: projection.EdgeOpen}); err != nil || len(open) != 1 {
		t.Fatalf("a reopened edge, read by another host: %+v, %v", open, err)
	}
	if err := db.Business().CloseEdge(ctx, "boss", "helper"); err != nil {
		t.Fatal(err)
	}
	mustClose(t, other)
	mustClose(t, db)
	check(e.reopen(t, ws, rolloutdb.Options{}), "reopened")
}

// businessString is the business state of threads as one string: goals, plans,
// the mailbox, then every edge (ids and times left out).
func businessString(t testing.TB, db *rolloutdb.DB, threads ...string) string {
	t.Helper()
	biz := db.Business()
	var b strings.Builder
	for _, id := range threads {
		goals, err := biz.Goals(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range goals {
			fmt.Fprintf(&b, "goal %s %q %s; ", g.Thread, g.Text, g.Status)
		}
		plan, err := biz.Plan(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(plan) > 0 {
			fmt.Fprintf(&b, "plan %s %v; ", id, plan)
		}
		inbox, err := biz.Inbox(ctx, id, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range inbox {
			fmt.Fprintf(&b, "message %s>%s %q read %v; ", m.From, m.To, m.Body, m.ReadAt != nil)
		}
	}
	edges, err := biz.Edges(ctx, projection.EdgeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range edges {
		fmt.Fprintf(&b, "edge %s>%s %s; ", e.Parent, e.Child, e.Status)
	}
	return b.String()
}

// Business writes given to an append (Commit.Business, Thread.AppendWith)
// commit with its frame, both or neither, where the engine keeps both in
// one database (a fleet); a write that fails takes the frame with it.
// Where the engine cannot (a local workspace: the rollout and state.db
// are two files) the append is refused and writes neither, and the turn
// goes on without them.
func behaveBusinessWithTheFrame(t *testing.T, e engine) {
	ws, db := e.open(t, rolloutdb.Options{})
	th := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "boss"})
	tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "fix it, with a helper"})
	if err != nil {
		t.Fatal(err)
	}
	var w rolloutdb.BusinessWrites
	goal := w.AddGoal("boss", "ship the fix")
	w.SetPlan("boss", []projection.PlanStep{{Text: "look", Status: "completed"}, {Text: "fix", Status: "pending"}})
	w.OpenEdge("boss", "helper")
	msg := w.Send("boss", "helper", "look at handler.go")
	answer := rollout.Item{Type: rollout.ItemAgentMessage, Text: "a helper looks"}
	seq := th.LastSeq()
	_, err = tu.Commit(ctx, rolloutdb.Commit{Items: []rollout.Item{answer}, Business: &w})
	if !e.businessWithFrame {
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("a commit with business writes on %s: %v", e.name, err)
		}
		name := "renamed"
		rec, rerr := rollout.NewRecord(rollout.KindMetadataUpdated, "", rollout.MetadataUpdated{Name: &name})
		if rerr != nil {
			t.Fatal(rerr)
		}
		if _, err := th.AppendWith(ctx, []rollout.Record{rec}, rollout.AppendOptions{}, &w); !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("an append with business writes on %s: %v", e.name, err)
		}
		if th.LastSeq() != seq || businessString(t, db, "boss", "helper") != "" || goal.ID != 0 {
			t.Fatalf("a refused append wrote: last seq %d (was %d), business %q", th.LastSeq(), seq, businessString(t, db, "boss", "helper"))
		}
		if _, err := tu.Commit(ctx, rolloutdb.Commit{Items: []rollout.Item{answer}}); err != nil {
			t.Fatalf("the turn after a refused commit: %v", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if goal.ID == 0 || goal.Thread != "boss" || goal.Status != projection.GoalActive || msg.ID == 0 || msg.To != "helper" {
		t.Fatalf("the goal and the message made: %+v %+v", goal, msg)
	}
	want := `goal boss "ship the fix" active; plan boss [{look completed} {fix pending}]; message boss>helper "look at handler.go" read false; edge boss>helper open; `
	if got := businessString(t, db, "boss", "helper"); got != want {
		t.Fatalf("business state committed with the turn:\n%s\nwant\n%s", got, want)
	}
	if info, err := db.ThreadInfo(ctx, "boss"); err != nil || info.Turns != 1 || info.OpenTurn != "" {
		t.Fatalf("the turn committed with business writes: %+v %v", info, err)
	}
	if _, err := th.AppendWith(ctx, nil, rollout.AppendOptions{}, &w); err == nil {
		t.Fatal("business writes committed twice")
	}

	// A write that names no row takes the frame, and the writes before
	// it, with it.
	name := "fixed"
	rename, err := rollout.NewRecord(rollout.KindMetadataUpdated, "", rollout.MetadataUpdated{Name: &name})
	if err != nil {
		t.Fatal(err)
	}
	var bad rolloutdb.BusinessWrites
	bad.AddGoal("boss", "never")
	bad.SetGoalStatus(goal.ID+1000, projection.GoalDone)
	seq = th.LastSeq()
	if _, err := th.AppendWith(ctx, []rollout.Record{rename}, rollout.AppendOptions{}, &bad); !errors.Is(err, rolloutdb.ErrNoSuchRow) {
		t.Fatalf("an append whose write names no goal: %v", err)
	}
	if th.LastSeq() != seq || businessString(t, db, "boss", "helper") != want {
		t.Fatalf("an append that failed wrote: last seq %d (was %d), business %q", th.LastSeq(), seq, businessString(t, db, "boss", "helper"))
	}
	var done rolloutdb.BusinessWrites
	done.SetGoalStatus(goal.ID, projection.GoalDone)
	done.CloseEdge("boss", "helper")
	done.MarkRead(msg.ID)
	if res, err := th.AppendWith(ctx, []rollout.Record{rename}, rollout.AppendOptions{}, &done); err != nil || res.FirstSeq != seq+1 {
		t.Fatalf("an append with business writes: %+v %v", res, err)
	}
	want = `goal boss "ship the fix" done; plan boss [{look completed} {fix pending}]; message boss>helper "look at handler.go" read true; edge boss>helper closed; `
	check := func(db *rolloutdb.DB, when string) {
		t.Helper()
		if got := businessString(t, db, "boss", "helper"); got != want {
			t.Fatalf("%s: business state\n%s\nwant\n%s", when, got, want)
		}
		if info, err := db.ThreadInfo(ctx, "boss"); err != nil || info.Name != "fixed" || info.Turns != 1 {
			t.Fatalf("%s: thread %+v %v", when, info, err)
		}
	}
	check(db, "written")
	check(e.reopen(t, ws, rolloutdb.Options{}), "another host")
	check(e.reopen(t, e.crash(t, ws, db), rolloutdb.Options{}), "after a crash")
}
