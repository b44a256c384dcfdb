package rolloutdb

import (
	"context"
	"sync/atomic"

	"github.com/rolloutdb/rolloutdb/journal"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// Metrics is a snapshot of what a DB did since it was opened, for a host
// to export (see Options.MeterProvider for OpenTelemetry). Taking one
// costs a few atomic loads and one small query (the cleanup queue).
type Metrics struct {
	// Appends acknowledged through this DB's threads.
	Appends AppendMetrics `json:"appends"`
	// Journal is the workspace journal's (zero without one): its commits,
	// fdatasync latency histogram (µs) and group-commit sizes.
	Journal journal.Metrics `json:"journal"`
	// Rollouts are the rollouts' own fdatasyncs (µs): appends that do not
	// go through the journal, and the background syncs that free its
	// segments.
	Rollouts rollout.WriterMetrics `json:"rollouts"`
	// Projection is the projector's lag (records and time), what it
	// applied, appends that waited for it, catch-ups and read-repairs from
	// the rollouts, damaged records seen, the rebuild running.
	Projection projection.Metrics `json:"projection"`
	// CleanupQueue is the number of paths queued for removal (deletes
	// finished by gc); -1 when state.db could not be read.
	CleanupQueue int `json:"cleanup_queue"`
	// Followers is the number of open followers (DB.Follow).
	Followers int64 `json:"followers"`
}

// AppendMetrics counts acknowledged appends.
type AppendMetrics struct {
	Frames  int64 `json:"frames"`
	Records int64 `json:"records"`
	Bytes   int64 `json:"bytes"` // of frames, on disk
}

type dbCounters struct {
	frames, records, bytes atomic.Int64
	writers                rollout.Metrics
}

func (c *dbCounters) acked(res rollout.AppendResult, records int) {
	c.frames.Add(1)
	c.records.Add(int64(records))
	c.bytes.Add(res.End - res.Offset)
}

// Metrics returns a snapshot of the DB's counters.
func (db *DB) Metrics() Metrics {
	c := &db.counters
	m := Metrics{
		Appends:    AppendMetrics{Frames: c.frames.Load(), Records: c.records.Load(), Bytes: c.bytes.Load()},
		Rollouts:   c.writers.Snapshot(),
		Projection: db.state.Metrics(),
		Followers:  db.follow.Followers(),
	}
	m.Journal = db.log.Metrics()
	if db.fleet != nil {
		m.Followers = db.fleet.Followers() // a fleet's followers read PostgreSQL
	}
	m.CleanupQueue = -1
	if q, err := db.state.PendingCleanup(context.Background()); err == nil {
		m.CleanupQueue = len(q)
	}
	return m
}
