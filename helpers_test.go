package rolloutdb_test

import (
	"math/rand/v2"
	"testing"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/importer"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The import fixtures were written (checked out) just now: every turn is
// imported.
func init() { importer.ActiveWindow = 0 }

func randFor(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 7)) }

// openReview opens the workspace in dir with Sync forced to SyncNever.
func openReview(t *testing.T, dir string, o rolloutdb.Options) *rolloutdb.DB {
	t.Helper()
	o.Sync = rollout.SyncNever
	db, err := rolloutdb.Open(ctx, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// newThreadWithTurn makes thread id with one committed turn of items,
// and closes it.
func newThreadWithTurn(t *testing.T, db *rolloutdb.DB, id string, items ...rollout.Item) {
	t.Helper()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "hello " + id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Commit(ctx, rolloutdb.Commit{Items: items}); err != nil {
		t.Fatal(err)
	}
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
}
