package rolloutdb_test

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// At the scale users reach, small enough for every run of the suite.

// scaleThreads is how many threads ScaleManyThreads makes: 10,000, the
// workspace of a heavy user (issue 24 measured 10,000 and 100,000); 1,024
// under the race detector, where projecting a new thread costs about
// 4 ms instead of 0.1 ms (10,000 would take a minute per engine). Either
// is more than a page holds.
func scaleThreads() int {
	if raceDetector {
		return 1_024
	}
	return 10_000
}

// Many threads (scaleThreads), made through the API with SyncNever by
// four goroutines, list whole in pages of every size (each once, newest
// first), filter by label, and count in Summary.
func behaveScaleManyThreads(t *testing.T, e engine) {
	scaleThreads := scaleThreads()
	_, db := e.open(t, rolloutdb.Options{Sync: rollout.SyncNever})
	start := time.Now()
	var wg sync.WaitGroup
	const workers = 4
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < scaleThreads; i += workers {
				th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: fmt.Sprintf("t%05d", i)})
				if err != nil {
					t.Error(err)
					return
				}
				if i%100 == 0 {
					if _, err := th.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{AddLabels: []string{"hundred"}}); err != nil {
						t.Error(err)
					}
				}
				if err := th.Close(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	made := time.Since(start)

	start = time.Now()
	want := make([]string, scaleThreads)
	for i := range want {
		want[i] = fmt.Sprintf("t%05d", i)
	}
	for _, limit := range []int{1000, 333} {
		if got := listAll(t, db, projection.ListOptions{Limit: limit}); !slices.Equal(sorted(got), want) {
			t.Fatalf("limit %d: listed %d threads, want %d", limit, len(got), len(want))
		}
	}
	// By creation, newest first, page after page.
	var prev time.Time
	n := 0
	for o := (projection.ListOptions{Sort: projection.SortCreated, Limit: 1000}); ; {
		page, err := db.List(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range page.Threads {
			if n > 0 && info.CreatedAt.After(prev) {
				t.Fatalf("%s (created %v) listed after one created %v", info.ID, info.CreatedAt, prev)
			}
			prev = info.CreatedAt
			n++
		}
		if o.Cursor = page.NextCursor; o.Cursor == "" {
			break
		}
	}
	if n != scaleThreads {
		t.Fatalf("by creation: %d threads", n)
	}
	// A page is at most 1000 threads (ListOptions.Limit).
	if page, err := db.List(ctx, projection.ListOptions{Limit: 5000}); err != nil || len(page.Threads) != 1000 || page.NextCursor == "" {
		t.Fatalf("limit 5000: %d threads, cursor %q, %v", len(page.Threads), page.NextCursor, err)
	}
	labelled := listAll(t, db, projection.ListOptions{Label: "hundred", Limit: 7})
	if len(labelled) != (scaleThreads+99)/100 {
		t.Fatalf("label: %d threads", len(labelled))
	}
	for _, id := range labelled {
		var i int
		if _, err := fmt.Sscanf(id, "t%05d", &i); err != nil || i%100 != 0 {
			t.Fatalf("label: %s listed", id)
		}
	}
	if sum, err := db.Summary(ctx); err != nil || sum.Threads != scaleThreads || sum.Active != scaleThreads || sum.Archived != 0 {
		t.Fatalf("summary %+v, %v", sum, err)
	}
	if ids, err := db.ListThreadIDs(ctx); err != nil || !slices.Equal(ids, want) {
		t.Fatalf("ListThreadIDs: %d ids, %v", len(ids), err)
	}
	t.Logf("%d threads made in %v, listed in %v", scaleThreads, made, time.Since(start))
}

// scaleTurns is how many turns ScaleLongThread writes.
const scaleTurns = 2000

// One thread of two thousand turns, a checkpoint every five hundred: the
// paged history reads it whole a page at a time, and a resume from the
// latest checkpoint reads only what follows it and ends with the model
// history of a full pass.
func behaveScaleLongThread(t *testing.T, e engine) {
	ws, db := e.open(t, rolloutdb.Options{Sync: rollout.SyncNever})
	th := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "long"})
	start := time.Now()
	ids := make([]string, 0, scaleTurns)
	for i := range scaleTurns {
		tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: fmt.Sprintf("question %d", i)})
		if err != nil {
			t.Fatal(err)
		}
		c := rolloutdb.Commit{
			Items:        []rollout.Item{{Type: rollout.ItemAgentMessage, Text: fmt.Sprintf("answer %d", i)}},
			ModelHistory: [][]byte{[]byte(fmt.Sprintf("h%d", i))},
		}
		if i%500 == 249 {
			c.Checkpoint = &rollout.Checkpoint{ReplacementHistory: [][]byte{[]byte(fmt.Sprintf("summary through %d", i))}}
		}
		if _, err := tu.Commit(ctx, c); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tu.ID())
	}
	mustClose(t, th)
	made := time.Since(start)

	start = time.Now()
	if info := mustInfo(t, db, "long"); info.Turns != scaleTurns || info.Items != 2*scaleTurns {
		t.Fatalf("info: %d turns, %d items", info.Turns, info.Items)
	}
	const page = 100
	for from := int64(1); from <= scaleTurns; from += page {
		turns, err := db.Turns(ctx, "long", from, from+page-1)
		if err != nil || len(turns) != page {
			t.Fatalf("turns %d-%d: %d, %v", from, from+page-1, len(turns), err)
		}
		for i, tu := range turns {
			n := from + int64(i)
			if tu.Ordinal != n || tu.ID != ids[n-1] || len(tu.Items) != 2 || tu.Items[1].Text != fmt.Sprintf("answer %d", n-1) {
				t.Fatalf("turn %d: %+v", n, tu)
			}
		}
	}
	_, full := mustResume(t, db, "long", rolloutdb.ResumeOptions{})
	mustClose(t, db)
	db = e.reopen(t, ws, rolloutdb.Options{Sync: rollout.SyncNever})
	th, fast := mustResume(t, db, "long", rolloutdb.ResumeOptions{FromCheckpoint: true})
	defer th.Close()
	// The latest checkpoint covers turn 1750: 250 turns follow it.
	if len(full.Turns) != scaleTurns || fast.Report.FromOffset == 0 || fast.Report.BytesRead*4 >= full.Report.BytesRead || len(fast.Turns) != 250 || fast.Turns[0].ID != ids[1750] {
		t.Fatalf("from the checkpoint: from offset %d, %d bytes read (a full pass %d), %d turns (full %d)",
			fast.Report.FromOffset, fast.Report.BytesRead, full.Report.BytesRead, len(fast.Turns), len(full.Turns))
	}
	if !reflect.DeepEqual(fast.ModelHistory, full.ModelHistory) || len(full.ModelHistory) != 251 || string(full.ModelHistory[0]) != "summary through 1749" {
		t.Fatalf("model history from the checkpoint %q, full pass %q", fast.ModelHistory, full.ModelHistory)
	}
	mustCommitTurn(t, th, "one more", []string{"h-more"})
	if th.LastSeq() != full.LastSeq+4 {
		t.Fatalf("after a resume from the checkpoint, a turn got seqs up to %d, want %d", th.LastSeq(), full.LastSeq+4)
	}
	t.Logf("%d turns written in %v, paged and resumed in %v", scaleTurns, made, time.Since(start))
}
