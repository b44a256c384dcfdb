package rolloutdb_test

import (
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/internal/pgtest/pgtesting"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// A local workspace's business state exported and imported into a fleet
// workspace reads the same there; imported again it adds nothing. A
// local workspace does not import (no origin keys in state.db).
func TestBusinessExportImport(t *testing.T) {
	local, err := rolloutdb.Open(ctx, t.TempDir(), rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = local.Close() })
	mustThreadWithTurns(t, local, rolloutdb.ThreadOptions{ID: "boss"}, "q")
	mustThreadWithTurns(t, local, rolloutdb.ThreadOptions{ID: "helper", Source: rollout.Source{Kind: rollout.SourceSubagent, Parent: "boss", Root: "boss", Depth: 1}}, "q")
	b := local.Business()
	g, err := b.AddGoal(ctx, "boss", "ship")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetGoalStatus(ctx, g.ID, projection.GoalDone); err != nil {
		t.Fatal(err)
	}
	if err := b.SetPlan(ctx, "boss", []projection.PlanStep{{Text: "a", Status: "done"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Send(ctx, "helper", "boss", "found it"); err != nil {
		t.Fatal(err)
	}
	e, err := b.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := local.Business().Import(ctx, "elsewhere", e); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("a local workspace's import: %v", err)
	}
	fl, err := rolloutdb.Open(ctx, pgtesting.Database(t), rolloutdb.Options{Fleet: rolloutdb.FleetOptions{HostName: "h", LeaseTTL: fleetLease}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fl.Close() })
	rep, err := fl.Business().Import(ctx, local.WorkspaceID(), e)
	if err != nil || rep.Goals.Added != 1 || rep.Plans.Added != 1 || rep.Edges.Added != 1 || rep.Messages.Added != 1 {
		t.Fatalf("import: %+v %v", rep, err)
	}
	if rep, err := fl.Business().Import(ctx, local.WorkspaceID(), e); err != nil || rep != (projection.BusinessImport{}) {
		t.Fatalf("second import: %+v %v", rep, err)
	}
	if got, want := businessString(t, fl, "boss", "helper"), businessString(t, local, "boss", "helper"); got != want {
		t.Fatalf("the fleet's business state\n%s\nthe local one\n%s", got, want)
	}
}
