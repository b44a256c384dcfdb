package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/internal/pgtest/pgtesting"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The read commands on a fleet workspace: a demo made there is listed,
// verified and counted from its frames; fleet push copies a local
// workspace in, again copying nothing, and its threads are then listed.
func TestFleetWorkspaceCommands(t *testing.T) {
	dsn := pgtesting.Database(t)
	if _, errs, code := rolloutctl(t, "demo", "-w", dsn, "--threads", "2", "--turns", "4"); code != 0 {
		t.Fatalf("demo: %d %s", code, errs)
	}
	if out, errs, code := rolloutctl(t, "verify", "-w", dsn); code != 0 || !strings.Contains(out, "0 damaged") {
		t.Fatalf("verify: %d\n%s\n%s", code, out, errs)
	}
	out, errs, code := rolloutctl(t, "stats", "-w", dsn, "--verify", "--json")
	if code != 0 {
		t.Fatalf("stats: %d %s", code, errs)
	}
	var st statsJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if st.Threads.Total < 2 || st.Bytes.Rollouts <= 0 || st.Bytes.Rollouts != st.Bytes.Active+st.Bytes.ArchivedPlain {
		t.Fatalf("stats --verify of a fleet: %+v %+v", st.Threads, st.Bytes)
	}

	local := smallDemo(t)
	to := pgtesting.Database(t)
	if out, errs, code := rolloutctl(t, "fleet", "push", "-w", local, "--to", to); code != 0 || !strings.Contains(out, "0 refused") {
		t.Fatalf("push: %d\n%s\n%s", code, out, errs)
	}
	if out, errs, code := rolloutctl(t, "fleet", "push", "-w", local, "--to", to); code != 0 || !strings.Contains(out, "0 new, 0 frame(s) copied") {
		t.Fatalf("second push: %d\n%s\n%s", code, out, errs)
	}
	lo, _, _ := rolloutctl(t, "list", "-w", local, "--all")
	fo, errs, code := rolloutctl(t, "list", "-w", to, "--all")
	if code != 0 || strings.Count(fo, "\n") != strings.Count(lo, "\n") {
		t.Fatalf("the fleet lists\n%s\nthe local workspace\n%s\n%s", fo, lo, errs)
	}
}

// pushJSON runs fleet push --json and returns its report.
func pushJSON(t *testing.T, args ...string) pushReport {
	t.Helper()
	out, errs, code := rolloutctl(t, append([]string{"fleet", "push", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("push: %d\n%s\n%s", code, out, errs)
	}
	var rep pushReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return rep
}

// fleetBusiness renders a workspace's business state of threads (ids and
// times left out).
func fleetBusiness(t *testing.T, ws string, threads ...string) string {
	t.Helper()
	db, err := rolloutdb.Open(context.Background(), ws, rolloutdb.Options{Fleet: rolloutdb.FleetOptions{HostName: "reader-" + rollout.NewID()}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := db.Business()
	var s strings.Builder
	for _, id := range threads {
		goals, _ := b.Goals(context.Background(), id)
		for _, g := range goals {
			fmt.Fprintf(&s, "goal %s %q %s; ", g.Thread, g.Text, g.Status)
		}
		plan, _ := b.Plan(context.Background(), id)
		fmt.Fprintf(&s, "plan %s %v; ", id, plan)
		inbox, _ := b.Inbox(context.Background(), id, false)
		for _, m := range inbox {
			fmt.Fprintf(&s, "message %s>%s %q read %v; ", m.From, m.To, m.Body, m.ReadAt != nil)
		}
		diags, _ := b.Diagnostics(context.Background(), id)
		for _, d := range diags {
			fmt.Fprintf(&s, "diagnostic %s %d %s; ", d.Thread, d.Offset, d.Reason)
		}
	}
	edges, _ := b.Edges(context.Background(), projection.EdgeFilter{})
	for _, e := range edges {
		fmt.Fprintf(&s, "edge %s>%s %s; ", e.Parent, e.Child, e.Status)
	}
	return s.String()
}

// fleet push copies the business state of the threads it pushes, once:
// pushed again it adds nothing, and after changes in the local workspace
// it updates what changed and adds what is new. A thread not pushed
// (named threads only) takes none of its own.
func TestFleetPushBusinessState(t *testing.T) {
	ctx := context.Background()
	local := smallDemo(t)
	db, err := rolloutdb.Open(ctx, local, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := db.Business()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	g, err := b.AddGoal(ctx, smallRoot, "fix the map")
	must(err)
	must(b.SetPlan(ctx, smallRoot, []projection.PlanStep{{Text: "find it", Status: "completed"}, {Text: "fix it", Status: "pending"}}))
	m, err := b.Send(ctx, smallSub, smallRoot, "found two writes")
	must(err)
	must(b.AddDiagnostics(ctx, smallRoot, recovery.Report{Skipped: []recovery.Skipped{{Offset: 4096, Length: 10, Reason: "bad_crc", FirstSeq: 7, LastSeq: 7}}}))
	_, err = b.AddGoal(ctx, smallOther, "not pushed")
	must(err)
	must(db.Close())

	to := pgtesting.Database(t)
	rep := pushJSON(t, "-w", local, "--to", to, smallRoot, smallSub)
	one := projection.RowCounts{Added: 1}
	// The demo's subagent has a goal and an edge of its own.
	want := projection.BusinessImport{Goals: projection.RowCounts{Added: 2}, Plans: one, Edges: one, Messages: one, Diagnostics: one}
	if rep.Threads != 2 || rep.Business != want {
		t.Fatalf("first push: %+v", rep)
	}
	threads := []string{smallRoot, smallSub, smallOther}
	first := fleetBusiness(t, to, threads...)
	for _, w := range []string{`goal ` + smallRoot + ` "fix the map" active`, `plan ` + smallRoot + ` [{find it completed} {fix it pending}]`,
		`message ` + smallSub + `>` + smallRoot + ` "found two writes" read false`, `diagnostic ` + smallRoot + ` 4096 bad_crc`,
		`edge ` + smallRoot + `>` + smallSub + ` open`} {
		if !strings.Contains(first, w) {
			t.Fatalf("the fleet lacks %q:\n%s", w, first)
		}
	}
	if strings.Contains(first, "not pushed") {
		t.Fatalf("a thread not pushed took its goal along:\n%s", first)
	}
	if rep := pushJSON(t, "-w", local, "--to", to, smallRoot, smallSub); rep.Business != (projection.BusinessImport{}) {
		t.Fatalf("second push: %+v", rep.Business)
	}
	if got := fleetBusiness(t, to, threads...); got != first {
		t.Fatalf("a second push changed the fleet:\n%s\nwas\n%s", got, first)
	}

	db, err = rolloutdb.Open(ctx, local, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b = db.Business()
	must(b.SetGoalStatus(ctx, g.ID, projection.GoalDone))
	must(b.MarkRead(ctx, m.ID))
	must(b.CloseEdge(ctx, smallRoot, smallSub))
	_, err = b.AddGoal(ctx, smallRoot, "and test it")
	must(err)
	must(db.Close())
	upd := projection.RowCounts{Updated: 1}
	rep = pushJSON(t, "-w", local, "--to", to)
	want = projection.BusinessImport{Goals: projection.RowCounts{Added: 2, Updated: 1}, Edges: upd, Messages: upd}
	if rep.Business != want {
		t.Fatalf("push after changes: %+v, want %+v", rep.Business, want)
	}
	got := fleetBusiness(t, to, threads...)
	for _, w := range []string{`goal ` + smallRoot + ` "fix the map" done`, `goal ` + smallRoot + ` "and test it" active`,
		`"found two writes" read true`, `edge ` + smallRoot + `>` + smallSub + ` closed`, `goal ` + smallOther + ` "not pushed" active`} {
		if !strings.Contains(got, w) {
			t.Fatalf("after the push of changes the fleet lacks %q:\n%s", w, got)
		}
	}
	if strings.Count(got, `"fix the map"`) != 1 {
		t.Fatalf("a goal copied twice:\n%s", got)
	}
	out, errs, code := rolloutctl(t, "fleet", "push", "-w", local, "--to", to)
	if code != 0 || !strings.Contains(out, "business state added/updated: goals 0/0, plans 0/0, edges 0/0, messages 0/0, diagnostics 0") {
		t.Fatalf("push as text: %d\n%s\n%s", code, out, errs)
	}
}
