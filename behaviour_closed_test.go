package rolloutdb_test

import (
	"slices"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

func init() {
	behaviours = append(behaviours,
		behaviour{"ClosedSaysErrClosed", behaveClosedSaysErrClosed},
		behaviour{"SearchRawSyntax", behaveSearchRawSyntax},
		behaviour{"ForkAfterCloseWritesNothing", behaveForkAfterCloseWritesNothing},
		behaviour{"FollowAfterClose", behaveFollowAfterClose},
	)
}

// ErrClosed "is returned by a DB or Thread after Close" (errors.go): by
// every call on a closed DB, on the threads and turns it had open, and on
// a Thread after its own Close. (Found by this suite: the index's calls
// returned projection.ErrClosed and the thread's rollout.ErrClosed, which
// did not match rolloutdb.ErrClosed.)
func behaveClosedSaysErrClosed(t *testing.T, e engine) {
	_, db := e.open(t, rolloutdb.Options{})
	mustThreadWithTurns(t, db, rolloutdb.ThreadOptions{ID: "x"}, "q")
	mustThreadWithTurns(t, db, rolloutdb.ThreadOptions{ID: "y"}, "q")
	mustThreadWithTurns(t, db, rolloutdb.ThreadOptions{ID: "z"}, "q")
	x, y := mustOpenThread(t, db, "x"), mustOpenThread(t, db, "y")
	tu, err := x.StartTurn(ctx, rolloutdb.TurnOptions{Input: "open at close"})
	if err != nil {
		t.Fatal(err)
	}
	z := mustOpenThread(t, db, "z")
	mustClose(t, z)
	for name, call := range map[string]func() error{
		"StartTurn": func() error { _, err := z.StartTurn(ctx, rolloutdb.TurnOptions{}); return err },
		"UpdateMetadata": func() error {
			_, err := z.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{AddLabels: []string{"l"}})
			return err
		},
		"Thread.Append":   func() error { _, err := z.Append(ctx, nameRecord(t, "n"), rollout.AppendOptions{}); return err },
		"Thread.Rollback": func() error { _, err := z.Rollback(ctx, 1); return err },
	} {
		if err := call(); !errors.Is(err, rolloutdb.ErrClosed) {
			t.Errorf("%s on a closed Thread: %v, want ErrClosed", name, err)
		}
	}
	mustClose(t, db)
	names := []string{}
	calls := closedCalls(t, db, y, tu)
	for name := range calls {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := calls[name](); !errors.Is(err, rolloutdb.ErrClosed) {
			t.Errorf("%s after DB.Close: %v, want ErrClosed", name, err)
		}
	}
}

// Raw passes the query to FTS5 (AND, OR, NOT, prefix*) and refuses
// phrases and NEAR with ErrBadQuery, the index keeping no word positions
// (projection.SearchOptions); ErrBadQuery is returned for a raw query
// FTS5 cannot parse. (Found by this suite: the
// doc promised phrases, and an unterminated string was a bare SQL error.)
func behaveSearchRawSyntax(t *testing.T, e engine) {
	_, db := e.open(t, rolloutdb.Options{})
	th := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "x"})
	mustCommitTurn(t, th, "first", nil, rollout.Item{ID: "a", Type: rollout.ItemAgentMessage, Text: "the wombat digs a burrow"})
	mustCommitTurn(t, th, "second", nil, rollout.Item{ID: "c", Type: rollout.ItemAgentMessage, Text: "wombat and quokka together"})
	mustClose(t, th)
	// Phrases and NEAR need word positions, which the index does not keep:
	// refused, as the option's doc says.
	for _, q := range []string{`"wombat digs"`, `NEAR(wombat burrow, 3)`} {
		if _, err := db.Search(ctx, q, projection.SearchOptions{Raw: true}); !errors.Is(err, projection.ErrBadQuery) {
			t.Errorf("raw search %s: %v, want ErrBadQuery", q, err)
		}
	}
	for _, q := range []string{`"unterminated`, `wombat "`} {
		_, err := db.Search(ctx, q, projection.SearchOptions{Raw: true})
		if !errors.Is(err, projection.ErrBadQuery) {
			t.Errorf("raw search %s: %v, want ErrBadQuery", q, err)
		}
	}
}

// A call on a closed DB fails and changes nothing ("The DB is unusable
// afterwards"). (Found by this suite: Fork on a closed DB wrote and
// linked the new thread's rollout before it failed.)
func behaveForkAfterCloseWritesNothing(t *testing.T, e engine) {
	ws, db := e.open(t, rolloutdb.Options{})
	mustThreadWithTurns(t, db, rolloutdb.ThreadOptions{ID: "src"}, "q")
	mustClose(t, db)
	if _, err := db.Fork(ctx, "src", rolloutdb.ForkOptions{ID: "forked"}); err == nil {
		t.Fatal("Fork on a closed DB succeeded")
	}
	db = e.reopen(t, ws, rolloutdb.Options{})
	if _, err := db.ThreadInfo(ctx, "forked"); !errors.Is(err, rolloutdb.ErrNotFound) {
		t.Fatalf("a Fork refused on a closed DB left its thread: %v", err)
	}
}

// A follower of a closed DB stops with ErrClosed ("Next blocks until ...
// the DB is closed (ErrClosed)"; "The DB is unusable afterwards"). (Found
// by this suite: Follow on a closed DB started a follower that yielded
// the thread's records.)
func behaveFollowAfterClose(t *testing.T, e engine) {
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
