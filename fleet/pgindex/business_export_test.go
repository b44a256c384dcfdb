package pgindex

import (
	"reflect"
	"testing"

	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
)

// withoutIDs is an export with its goals' and messages' ids left out
// (each workspace draws its own).
func withoutIDs(e projection.BusinessExport) projection.BusinessExport {
	for i := range e.Goals {
		e.Goals[i].ID = 0
	}
	for i := range e.Messages {
		e.Messages[i].ID = 0
	}
	return e
}

// A local workspace's business state imported into a fleet's is the same
// rows with the same times; imported again it adds nothing; after changes
// there, a new import updates what changed and adds what is new, each
// once; a change made here after the export's stays; another origin's
// rows are its own.
func TestImportBusinessIsIdempotentAndIncremental(t *testing.T) {
	w := newWorld(t)
	local, fl := w.local, w.pg
	threads := []string{"t0", "t1"}
	g1, err := local.AddGoal(ctx, "t0", "ship it")
	if err != nil {
		t.Fatal(err)
	}
	g2, err := local.AddGoal(ctx, "t0", "then rest")
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(local.SetPlan(ctx, "t0", []projection.PlanStep{{Text: "write", Status: "done"}, {Text: "test", Status: "pending"}}))
	must(local.OpenEdge(ctx, "t0", "t1"))
	m, err := local.Send(ctx, "t1", "t0", "done")
	must(err)
	must(local.RecordResumeReport(ctx, "t1", recovery.Report{Skipped: []recovery.Skipped{{Offset: 300, Length: 20, Kind: "item_appended", FirstSeq: 4, LastSeq: 5, Reason: "bad_crc", AckLost: true}}}))

	imp := func(origin string, want projection.BusinessImport) {
		t.Helper()
		e, err := local.ExportBusiness(ctx)
		must(err)
		got, err := fl.ImportBusiness(ctx, origin, e)
		must(err)
		if got != want {
			t.Fatalf("import from %s: %+v, want %+v", origin, got, want)
		}
	}
	one := projection.RowCounts{Added: 1}
	imp("ws-local", projection.BusinessImport{Goals: projection.RowCounts{Added: 2}, Plans: one, Edges: one, Messages: one, Diagnostics: one})
	same := func(when string) {
		t.Helper()
		if got, want := business(t, fl, threads...), business(t, local, threads...); got != want {
			t.Fatalf("%s: fleet\n%s\nlocal\n%s", when, got, want)
		}
	}
	same("imported")
	le, err := local.ExportBusiness(ctx)
	must(err)
	fe, err := fl.ExportBusiness(ctx)
	must(err)
	if !reflect.DeepEqual(withoutIDs(fe), withoutIDs(le)) {
		t.Fatalf("the fleet's export\n%+v\nthe local one\n%+v", fe, le)
	}
	imp("ws-local", projection.BusinessImport{})
	same("imported twice")

	// Changes there, then a new import.
	must(local.SetGoalStatus(ctx, g1.ID, projection.GoalDone))
	_, err = local.AddGoal(ctx, "t1", "report back")
	must(err)
	must(local.MarkRead(ctx, m.ID))
	must(local.SetPlan(ctx, "t0", []projection.PlanStep{{Text: "ship", Status: "pending"}}))
	must(local.CloseEdge(ctx, "t0", "t1"))
	upd := projection.RowCounts{Updated: 1}
	imp("ws-local", projection.BusinessImport{Goals: projection.RowCounts{Added: 1, Updated: 1}, Plans: upd, Edges: upd, Messages: upd})
	same("imported after changes")

	// A change here after the export's time stays.
	goals, err := fl.Goals(ctx, "t0")
	must(err)
	for _, g := range goals {
		if g.Text == "then rest" {
			must(fl.SetGoalStatus(ctx, g.ID, projection.GoalAbandoned))
		}
	}
	must(fl.SetPlan(ctx, "t1", []projection.PlanStep{{Text: "only here", Status: "pending"}}))
	imp("ws-local", projection.BusinessImport{})
	if goals, _ := fl.Goals(ctx, "t0"); len(goals) != 2 || goals[1].Status != projection.GoalAbandoned {
		t.Fatalf("a newer status here was overwritten: %+v", goals)
	}
	// ...until the change there is newer still.
	must(local.SetGoalStatus(ctx, g2.ID, projection.GoalDone))
	imp("ws-local", projection.BusinessImport{Goals: upd})
	if goals, _ := fl.Goals(ctx, "t0"); len(goals) != 2 || goals[1].Status != projection.GoalDone {
		t.Fatalf("a newer status there was not imported: %+v", goals)
	}

	// Another workspace's rows are its own: added, not matched with these.
	imp("ws-other", projection.BusinessImport{Goals: projection.RowCounts{Added: 3}, Messages: one})
	if goals, _ := fl.Goals(ctx, "t0"); len(goals) != 4 {
		t.Fatalf("goals of two origins: %+v", goals)
	}
	if _, err := fl.ImportBusiness(ctx, "", le); err == nil {
		t.Fatal("an import without its origin")
	}
}
