package rolloutdb_test

import (
	"math/rand/v2"

	"github.com/rolloutdb/rolloutdb/importer"
)

// The import fixtures were written (checked out) just now: every turn is
// imported.
func init() { importer.ActiveWindow = 0 }

func randFor(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 7)) }
