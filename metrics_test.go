package rolloutdb_test

import (
	"testing"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Metrics counts what the host did, and the same numbers reach an
// OpenTelemetry MeterProvider.
func TestMetricsCountWhatHappened(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	db, err := rolloutdb.Open(ctx, t.TempDir(), rolloutdb.Options{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "m"})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "q"}) // 2 records
		if err != nil {
			t.Fatal(err)
		}
		if _, err := turn.Add(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: "r"}); err != nil { // 1
			t.Fatal(err)
		}
		if _, err := turn.Commit(ctx, rolloutdb.Commit{}); err != nil { // 1
			t.Fatal(err)
		}
	}
	f, err := db.Follow(ctx, "m", rolloutdb.FollowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := db.List(ctx, projection.ListOptions{}); err != nil { // waits for the projector
		t.Fatal(err)
	}
	m := db.Metrics()
	if m.Appends.Frames != 15 || m.Appends.Records != 20 || m.Appends.Bytes <= 0 {
		t.Fatalf("appends: %+v, want 15 frames of 20 records", m.Appends)
	}
	if m.Journal.Commits == 0 || m.Journal.SyncLatency.Count != m.Journal.Commits || m.Journal.GroupSize.Sum != m.Journal.Entries {
		t.Fatalf("journal: %+v", m.Journal)
	}
	if m.Projection.CatchUps != 0 {
		t.Fatalf("projection caught up %d times from the rollout of a thread only this DB wrote", m.Projection.CatchUps)
	}
	if m.Projection.Applied < 20 || m.Projection.LagRecords != 0 || m.Followers != 1 || m.CleanupQueue != 0 {
		t.Fatalf("projection %+v, followers %d, cleanup %d", m.Projection, m.Followers, m.CleanupQueue)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			switch d := md.Data.(type) {
			case metricdata.Sum[int64]:
				got[md.Name] = d.DataPoints[0].Value
			case metricdata.Gauge[int64]:
				got[md.Name] = d.DataPoints[0].Value
			}
		}
	}
	for name, want := range map[string]int64{"rolloutdb.appends.records": 20, "rolloutdb.appends.frames": 15, "rolloutdb.followers": 1, "rolloutdb.journal.commits": m.Journal.Commits} {
		if got[name] != want {
			t.Fatalf("%s: exported %d, want %d (all: %v)", name, got[name], want, got)
		}
	}
	if len(got) < 20 {
		t.Fatalf("exported %d instruments: %v", len(got), got)
	}
}
