package rolloutdb

import (
	"github.com/rolloutdb/rolloutdb/journal"
	"github.com/rolloutdb/rolloutdb/projection"
)

// JournalMetricsForTest reads the DB's journal counters (zero before the
// journal starts).
func JournalMetricsForTest(db *DB) journal.Metrics {
	return db.log.Metrics()
}

// SetImportLimitsForTest sets the bytes an import by db puts in a frame
// and in a record.
func SetImportLimitsForTest(db *DB, frame, record int) {
	db.private.importFrame, db.private.maxImportRecord = frame, record
}

// StateForTest returns the DB's state.db store itself, for tests that
// reach what the facade keeps internal (the cleanup queue, Flush).
func StateForTest(db *DB) *projection.Store { return db.state.(*projection.Store) }
