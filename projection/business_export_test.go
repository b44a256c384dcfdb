package projection

import (
	"context"
	"reflect"
	"testing"

	"github.com/rolloutdb/rolloutdb/recovery"
)

// ExportBusiness reads every business row as the per-thread reads give
// it, ids and times included, plans with their time; Of keeps the rows of
// the threads asked for, edges and messages by either end.
func TestExportBusiness(t *testing.T) {
	ctx := context.Background()
	s := newWorkspace(t).open("")
	seedBusiness(t, s, "t0", "t1")
	if _, err := s.AddGoal(ctx, "t2", "elsewhere"); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordResumeReport(ctx, "t1", recovery.Report{Skipped: []recovery.Skipped{{Offset: 64, Length: 9, Reason: "bad_crc", FirstSeq: 2, LastSeq: 2}}}); err != nil {
		t.Fatal(err)
	}
	e, err := s.ExportBusiness(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var goals []Goal
	for _, id := range []string{"t0", "t2"} {
		g, err := s.Goals(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		goals = append(goals, g...)
	}
	plan, _ := s.Plan(ctx, "t0")
	edges, _ := s.Edges(ctx, EdgeFilter{})
	inbox, _ := s.Inbox(ctx, "t0", false)
	diags, _ := s.Diagnostics(ctx, "")
	if !reflect.DeepEqual(e.Goals, goals) || len(e.Plans) != 1 || e.Plans[0].Thread != "t0" || !reflect.DeepEqual(e.Plans[0].Steps, plan) ||
		e.Plans[0].UpdatedAt.IsZero() || !reflect.DeepEqual(e.Edges, edges) || !reflect.DeepEqual(e.Messages, inbox) || !reflect.DeepEqual(e.Diagnostics, diags) {
		t.Fatalf("export %+v", e)
	}
	if n := e.Rows(); n != 2+2+1+1+1 { // goals, plan steps, edge, message, diagnostic
		t.Fatalf("%d rows", n)
	}
	of := e.Of(func(id string) bool { return id == "t1" })
	if len(of.Goals) != 0 || len(of.Plans) != 0 || len(of.Edges) != 1 || len(of.Messages) != 1 || len(of.Diagnostics) != 1 {
		t.Fatalf("the rows of t1: %+v", of)
	}
}
