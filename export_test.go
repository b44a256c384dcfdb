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

// bareLog is a Log that offers its interface's methods and nothing more:
// what another engine's log may be.
type bareLog struct{ Log }

// BareLogForTest hides the methods db's log has beyond the Log interface
// (compression, the temporary files' sweep). Call it before any thread
// is opened.
func BareLogForTest(db *DB) { db.log = bareLog{db.log} }

// CrashForTest stops a fleet DB's host as a crash would: its lease is
// neither renewed nor released, so its threads stay its own until the
// lease expires, and nothing more is committed.
func CrashForTest(db *DB) {
	if db.fleet != nil {
		db.fleet.Abandon()
	}
}
