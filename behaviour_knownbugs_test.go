//go:build knownbugs

package rolloutdb_test

import (
	"testing"

	"github.com/rolloutdb/rolloutdb"
)

// Cases of documented behaviour that the facade does not have yet: each
// fails today, on every engine. They run with the suite under the build
// tag knownbugs,
//
//	go test -race -count=1 -tags knownbugs -run 'TestBehaviour/.*/Bug' .
//
// and move into the suite's list (and this file goes) as each is fixed.
func init() {
	behaviours = append(behaviours,
		behaviour{"BugFollowAfterClose", behaveBugFollowAfterClose},
	)
}

// A follower of a closed DB stops with ErrClosed ("Next blocks until ...
// the DB is closed (ErrClosed)"; "The DB is unusable afterwards"). Today
// Follow on a closed DB starts a follower that reads the rollout and
// yields its records.
func behaveBugFollowAfterClose(t *testing.T, e engine) {
	_, db := e.open(t, rolloutdb.Options{})
	mustThreadWithTurns(t, db, rolloutdb.ThreadOptions{ID: "x"}, "q")
	mustClose(t, db)
	f, err := db.Follow(ctx, "x", rolloutdb.FollowOptions{})
	if err != nil {
		isErr(t, "Follow on a closed DB", err, rolloutdb.ErrClosed)
		return
	}
	defer f.Close()
	if f.Next() {
		t.Fatalf("a follower of a closed DB yielded seq %d", f.Record().Seq)
	}
	isErr(t, "a follower of a closed DB", f.Err(), rolloutdb.ErrClosed)
}
