package rolloutdb_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/internal/pgtest/pgtesting"
)

// The root package's tests share one throwaway PostgreSQL cluster (fsync
// on) for the fleet engine, started by its first case.
func TestMain(m *testing.M) { pgtesting.Main(m) }

// fleetLease is the fleet engine's lease in the suite: how long a crashed
// host's threads stay locked to the next.
const fleetLease = 2 * time.Second

// fleetEngine is a fleet workspace in a fresh database of the shared
// cluster. Each DB is a host of its own (its own lease); a crash is the
// host dying with its lease held.
func fleetEngine() engine {
	var hosts atomic.Int64
	try := func(t testing.TB, ws string, o rolloutdb.Options) (*rolloutdb.DB, error) {
		o.Fleet.HostName = fmt.Sprint("host-", hosts.Add(1))
		o.Fleet.LeaseTTL = fleetLease
		db, err := rolloutdb.Open(ctx, ws, o)
		if err == nil {
			t.Cleanup(func() { _ = db.Close() })
		}
		return db, err
	}
	reopen := func(t testing.TB, ws string, o rolloutdb.Options) *rolloutdb.DB {
		t.Helper()
		db, err := try(t, ws, o)
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	return engine{
		name: "fleet",
		open: func(t testing.TB, o rolloutdb.Options) (string, *rolloutdb.DB) {
			ws := pgtesting.Database(t)
			return ws, reopen(t, ws, o)
		},
		reopen: reopen,
		try:    try,
		crash: func(t testing.TB, ws string, db *rolloutdb.DB) string {
			t.Helper()
			rolloutdb.CrashForTest(db)
			return ws
		},
		takeover:          fleetLease,
		remoteWatch:       true,
		businessWithFrame: true,
	}
}
