package fleet_test

import (
	"context"
	"testing"

	"github.com/rolloutdb/rolloutdb/internal/pgtest/pgtesting"
)

var ctx = context.Background()

// The package's tests share one throwaway PostgreSQL cluster (fsync on),
// a new database each.
func TestMain(m *testing.M) { pgtesting.Main(m) }

// testDSN makes a fresh database for one test and returns its DSN.
func testDSN(t testing.TB) string {
	t.Helper()
	return pgtesting.Database(t)
}
