package rolloutdb

import "github.com/rolloutdb/rolloutdb/rollout"

// JournalMetricsForTest reads the DB's journal counters (zero before the
// journal starts).
func JournalMetricsForTest(db *DB) rollout.JournalMetrics {
	db.jmu.Lock()
	j := db.jrnl
	db.jmu.Unlock()
	if j == nil {
		return rollout.JournalMetrics{}
	}
	return j.Metrics()
}
