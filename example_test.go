package rolloutdb_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// A host opens its workspace, creates a thread and commits a turn. Each call
// returns once its records are durable.
func ExampleOpen() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "workspace")
	defer os.RemoveAll(dir)

	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "example"})
	if err != nil {
		log.Fatal(err)
	}
	turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "What is in main.go?"})
	if err != nil {
		log.Fatal(err)
	}
	res, err := turn.Commit(ctx, rolloutdb.Commit{
		Items:        []rollout.Item{{Type: rollout.ItemAgentMessage, Text: "A hello-world program."}},
		ModelHistory: [][]byte{[]byte(`{"role":"assistant","content":"A hello-world program."}`)},
		Usage:        rollout.Usage{InputTokens: 12, OutputTokens: 6},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("thread %s: commit holds seq %d..%d\n", th.ID(), res.FirstSeq, res.LastSeq)
	// Output: thread example: commit holds seq 4..6
}

// A host rolls back the last turn ("undo"), renames the thread and labels
// it; List filters by the label. Each change is a durable record, so a
// state.db rebuilt from the rollouts, and Resume, see the same.
func ExampleThread_Rollback() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "workspace")
	defer os.RemoveAll(dir)
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "undo"})
	if err != nil {
		log.Fatal(err)
	}
	for _, q := range []string{"Add a test", "Now delete every test"} {
		turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: q})
		if err != nil {
			log.Fatal(err)
		}
		if _, err := turn.Commit(ctx, rolloutdb.Commit{}); err != nil {
			log.Fatal(err)
		}
	}
	if _, err := th.Rollback(ctx, 1); err != nil {
		log.Fatal(err)
	}
	name := "tests"
	if _, err := th.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{Name: &name, AddLabels: []string{"kept"}}); err != nil {
		log.Fatal(err)
	}
	page, err := db.List(ctx, projection.ListOptions{Label: "kept"})
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range page.Threads {
		fmt.Printf("%s %q: %d turn, preview %q\n", t.ID, t.Name, t.Turns, t.Preview)
	}
	// Output: undo "tests": 1 turn, preview "Add a test"
}

// A host reads the DB's counters (to log, or to export: with
// Options.MeterProvider they are OpenTelemetry instruments; see
// examples/prometheus for Prometheus).
func ExampleDB_Metrics() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "workspace")
	defer os.RemoveAll(dir)
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{})
	if err != nil {
		log.Fatal(err)
	}
	turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "hello"}) // a frame of 2 records
	if err != nil {
		log.Fatal(err)
	}
	if _, err := turn.Commit(ctx, rolloutdb.Commit{}); err != nil { // a frame of 1
		log.Fatal(err)
	}
	m := db.Metrics()
	fmt.Printf("%d frames, %d records acknowledged; journal synced %d times\n",
		m.Appends.Frames, m.Appends.Records, m.Journal.SyncLatency.Count)
	// Output: 2 frames, 3 records acknowledged; journal synced 2 times
}

// Several clients watch one conversation: each follows the thread from the
// last seq it saw, and gets every record once it is durable.
func ExampleDB_Follow() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "workspace")
	defer os.RemoveAll(dir)
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "watched"})
	if err != nil {
		log.Fatal(err)
	}
	f, err := db.Follow(ctx, "watched", rolloutdb.FollowOptions{AfterSeq: th.LastSeq()})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	go func() {
		turn, _ := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "hello"})
		_, _ = turn.Commit(ctx, rolloutdb.Commit{})
		_, _ = db.Archive(ctx, "watched", "done")
	}()
	for f.Next() {
		fmt.Println(f.Record().Seq, f.Record().Kind)
	}
	fmt.Println("ended:", f.End(), f.Err())
	// Output:
	// 2 turn_started
	// 3 item_appended
	// 4 turn_completed
	// 5 archived
	// ended: archived <nil>
}
