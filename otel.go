package rolloutdb

import (
	"context"

	"github.com/cockroachdb/errors"
	"go.opentelemetry.io/otel/metric"
)

// instrumentationName names the meter the DB's instruments belong to.
const instrumentationName = "github.com/rolloutdb/rolloutdb"

// registerMetrics makes the DB's Metrics observable instruments of the
// host's MeterProvider: one callback reads a snapshot at each collection.
// Histograms are exported as their count, sum and p50/p99 (an observable
// histogram does not exist in OpenTelemetry, and a synchronous one would
// put the SDK on the append path).
func (db *DB) registerMetrics(mp metric.MeterProvider) (metric.Registration, error) {
	m := mp.Meter(instrumentationName)
	var errs error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = errors.CombineErrors(errs, err)
		return c
	}
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = errors.CombineErrors(errs, err)
		return g
	}
	var (
		frames     = counter("rolloutdb.appends.frames", "{frame}", "Frames acknowledged")
		records    = counter("rolloutdb.appends.records", "{record}", "Records acknowledged")
		bytes      = counter("rolloutdb.appends.bytes", "By", "Bytes of frames acknowledged")
		commits    = counter("rolloutdb.journal.commits", "{commit}", "Journal group commits (one fdatasync each)")
		syncCount  = counter("rolloutdb.journal.sync.count", "{sync}", "Journal fdatasyncs")
		syncSum    = counter("rolloutdb.journal.sync.duration", "us", "Time in journal fdatasyncs")
		syncP50    = gauge("rolloutdb.journal.sync.p50", "us", "Journal fdatasync latency, median (bucket bound)")
		syncP99    = gauge("rolloutdb.journal.sync.p99", "us", "Journal fdatasync latency, 99th percentile (bucket bound)")
		groupP50   = gauge("rolloutdb.journal.group.p50", "{frame}", "Frames per journal commit, median (bucket bound)")
		jfail      = counter("rolloutdb.journal.failures", "{failure}", "Failed journal writes or syncs")
		rsyncs     = counter("rolloutdb.rollouts.sync.count", "{sync}", "Rollout fdatasyncs")
		rsyncP99   = gauge("rolloutdb.rollouts.sync.p99", "us", "Rollout fdatasync latency, 99th percentile (bucket bound)")
		lagRecords = gauge("rolloutdb.projection.lag.records", "{record}", "Acknowledged records not yet projected")
		lagTime    = gauge("rolloutdb.projection.lag.time", "ms", "Age of the oldest record not yet projected")
		applied    = counter("rolloutdb.projection.applied", "{record}", "Records the projector applied")
		stalls     = counter("rolloutdb.projection.stalls", "{append}", "Appends that waited for the projector (MaxProjectionLag)")
		catchUps   = counter("rolloutdb.projection.catch_ups", "{thread}", "Threads brought up from their rollouts (read-repair, gaps, rebuilds)")
		damaged    = counter("rolloutdb.projection.damaged", "{record}", "Damaged or rejected records the projection found")
		rebuild    = gauge("rolloutdb.projection.rebuild.threads", "{thread}", "Threads done by the running rebuild (0: none)")
		cleanup    = gauge("rolloutdb.cleanup.queue", "{path}", "Paths queued for removal")
		followers  = gauge("rolloutdb.followers", "{follower}", "Open followers")
	)
	if errs != nil {
		return nil, errs
	}
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := db.Metrics()
		o.ObserveInt64(frames, s.Appends.Frames)
		o.ObserveInt64(records, s.Appends.Records)
		o.ObserveInt64(bytes, s.Appends.Bytes)
		o.ObserveInt64(commits, s.Journal.Commits)
		o.ObserveInt64(syncCount, s.Journal.SyncLatency.Count)
		o.ObserveInt64(syncSum, s.Journal.SyncLatency.Sum)
		o.ObserveInt64(syncP50, s.Journal.SyncLatency.Quantile(0.5))
		o.ObserveInt64(syncP99, s.Journal.SyncLatency.Quantile(0.99))
		o.ObserveInt64(groupP50, s.Journal.GroupSize.Quantile(0.5))
		o.ObserveInt64(jfail, s.Journal.Failures)
		o.ObserveInt64(rsyncs, s.Rollouts.Syncs.Count)
		o.ObserveInt64(rsyncP99, s.Rollouts.Syncs.Quantile(0.99))
		o.ObserveInt64(lagRecords, int64(s.Projection.LagRecords))
		o.ObserveInt64(lagTime, s.Projection.LagTime.Milliseconds())
		o.ObserveInt64(applied, s.Projection.Applied)
		o.ObserveInt64(stalls, int64(s.Projection.Stalls))
		o.ObserveInt64(catchUps, s.Projection.CatchUps)
		o.ObserveInt64(damaged, s.Projection.Damaged)
		var done int64
		if r := s.Projection.Rebuild; r != nil {
			done = int64(r.Threads)
		}
		o.ObserveInt64(rebuild, done)
		o.ObserveInt64(cleanup, int64(s.CleanupQueue))
		o.ObserveInt64(followers, s.Followers)
		return nil
	}, frames, records, bytes, commits, syncCount, syncSum, syncP50, syncP99, groupP50, jfail, rsyncs, rsyncP99,
		lagRecords, lagTime, applied, stalls, catchUps, damaged, rebuild, cleanup, followers)
}
