package pgindex

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// projection's TestRollbackHidesTurnsAndSkipsLateRecords on both
// engines: a rollback hides the last turns (and their items from
// search), the checkpoint of a rolled-back turn is not offered, a late
// record of a hidden turn does not bring it back, and a new turn reusing
// a rolled-back id is a new turn.
func TestRollbackHidesTurnsAndSkipsLateRecords(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	w.create("t1", rollout.Source{})
	for i := range 4 {
		w.turn("t1", fmt.Sprintf("a%d", i), fmt.Sprintf("word%d", i))
	}
	w.append("t1", rec(t, rollout.KindCheckpoint, "a1", rollout.Checkpoint{ID: "c1", CoveredTurn: "a1", Trigger: rollout.TriggerManual, ReplacementHistory: [][]byte{[]byte("s1")}}))
	cpOff := w.append("t1", rec(t, rollout.KindCheckpoint, "a3", rollout.Checkpoint{ID: "c3", CoveredTurn: "a3", Trigger: rollout.TriggerManual, ReplacementHistory: [][]byte{[]byte("s3")}})).Offset
	info, _ := s.Thread(ctx, "t1")
	if info.CheckpointOffset != cpOff {
		t.Fatalf("checkpoint offset %d, want %d", info.CheckpointOffset, cpOff)
	}
	w.append("t1", rec(t, rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: 2}))
	w.append("t1", rec(t, rollout.KindItemAppended, "a3", rollout.Item{ID: "late", Type: rollout.ItemAgentMessage, Text: "late word3"}))
	info, err := s.Thread(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Turns != 2 || info.Items != 8 || info.Usage.TotalTokens != 30 {
		t.Fatalf("after rollback: %+v", info)
	}
	cps, _ := s.Checkpoints(ctx, "t1")
	if len(cps) != 2 || info.CheckpointOffset != cps[0].Offset {
		t.Fatalf("the checkpoint of a rolled-back turn is offered: %+v, offset %d", cps, info.CheckpointOffset)
	}
	if ids := w.sameSearch(s, "word3", projection.SearchOptions{}); len(ids) != 0 {
		t.Fatalf("rolled-back items still searchable: %v", ids)
	}
	w.sameThread(s, "t1")
	w.turn("t1", "a3", "again")
	turns, err := s.Turns(ctx, "t1", 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 3 || turns[2].ID != "a3" || turns[2].Ordinal != 3 || len(turns[2].Items) != 4 || turns[2].Items[0].Text != "again" {
		t.Fatalf("turns: %+v", turns)
	}
	// The preview does not depend on how records fell into batches
	// (projection's TestPreviewDoesNotDependOnBatching).
	w.create("t2", rollout.Source{})
	userTurn := func(turn, text string) {
		w.append("t2", rec(t, rollout.KindTurnStarted, turn, rollout.TurnStarted{Model: "m"}),
			rec(t, rollout.KindItemAppended, turn, rollout.Item{ID: turn + "-u", Type: rollout.ItemUserMessage, Text: text}),
			rec(t, rollout.KindTurnCompleted, turn, rollout.TurnCompleted{Status: rollout.TurnStatusCompleted}))
	}
	userTurn("a", "")
	userTurn("b", "second")
	w.append("t2", rec(t, rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: 1}))
	if err := s.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	userTurn("c", "third")
	for _, id := range []string{"t1", "t2"} {
		w.sameThread(s, id)
	}
	checkEqualsRebuild(t, s)
}

// scenario writes threads of every kind of record: turns, a rollback, a
// turn reusing a rolled-back id, an item replaced, metadata, labels,
// checkpoints, an artifact reference, an open turn, a rejected record.
func scenario(w *world) {
	t := w.t
	w.create("s1", rollout.Source{})
	w.create("s2", rollout.Source{Kind: rollout.SourceSubagent, Parent: "s1", Root: "s1", Depth: 1})
	for i := range 3 {
		w.turn("s1", fmt.Sprintf("a%d", i), fmt.Sprintf("question %d about otters", i))
	}
	name, state := "Otters", "busy"
	w.metadata("s1", rollout.MetadataUpdated{Name: &name, Status: &state, Labels: []string{"zoo"}, Flags: map[string]bool{"pinned": true}})
	w.append("s1", rec(t, rollout.KindCheckpoint, "a2", rollout.Checkpoint{ID: "c2", CoveredTurn: "a2", Trigger: rollout.TriggerPostTurn,
		ReplacementHistory: [][]byte{[]byte("sum")}, TokensBefore: 100, TokensAfter: 10}))
	w.append("s1", rec(t, rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: 1}))
	w.turn("s1", "a2", "otters again")
	w.append("s2", rec(t, rollout.KindTurnStarted, "b", rollout.TurnStarted{Model: "m2"}),
		rec(t, rollout.KindItemAppended, "b", rollout.Item{ID: "u", Type: rollout.ItemUserMessage, Text: "spill it"}),
		rec(t, rollout.KindItemAppended, "b", rollout.Item{ID: "r", Type: rollout.ItemToolResult, Text: "big output",
			Ref: &rollout.ArtifactRef{Path: "tool-results/s2/x", Size: 99, SHA256: "abc"}}))
	w.append("s2", rollout.Record{Kind: "from_the_future", Body: []byte{0x80}})
	w.append("s2", rec(t, rollout.KindItemAppended, "b", rollout.Item{ID: "r", Type: rollout.ItemToolResult, Text: "smaller output"}))
	w.metadata("s2", rollout.MetadataUpdated{Labels: []string{"zoo", "sub"}})
}

// A workspace's rows are the same whether this host's index was handed
// every frame (Enqueue) or read none of them and caught each thread up
// from the log when it was read: the two are two databases written with
// the same records.
func TestCatchUpGivesTheRowsEnqueueGives(t *testing.T) {
	fed := newWorld(t)
	scenario(fed)
	read := newWorld(t)
	read.feed = false
	scenario(read)
	for _, id := range []string{"s1", "s2"} {
		fed.sameThread(fed.pg, id)
		if _, err := read.pg.Thread(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := dump(t, read.pg), dump(t, fed.pg); got != want {
		t.Fatalf("caught up (+) and enqueued (-) rows differ:\n%s", dumpDiff(got, want))
	}
	if m := read.pg.Metrics(); m.CatchUps == 0 || m.Applied != 0 {
		t.Fatalf("metrics of the index that read: %+v", m)
	}
	if m := fed.pg.Metrics(); m.Applied == 0 || m.Damaged != 1 || m.LagRecords != 0 {
		t.Fatalf("metrics of the fed index: %+v", m)
	}
	d, err := fed.pg.Diagnostics(ctx, "s2")
	if err != nil || len(d) != 1 || d[0].Reason != "unknown_kind" || d[0].Kind != "from_the_future" {
		t.Fatalf("diagnostics: %+v %v", d, err)
	}
	refs, err := fed.pg.ArtifactRefs(ctx)
	if err != nil || len(refs) != 1 || refs[0].Thread != "s2" || refs[0].Path != "tool-results/s2/x" {
		t.Fatalf("artifact refs: %+v %v", refs, err)
	}
	checkEqualsRebuild(t, fed.pg)
	checkEqualsRebuild(t, read.pg)
}

// Frames another host wrote reach this host's index: a read catches the
// row up (its tail is past the row's), and this host's next frame, which
// does not follow the row, sends the thread to the log.
func TestFramesOfAnotherHostAreCaughtUp(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	w.create("t1", rollout.Source{})
	w.turn("t1", "a", "first on a")
	if err := w.threads["t1"].Close(); err != nil {
		t.Fatal(err)
	}
	// Host b takes the thread over and appends; its own index is fed.
	lb := w.openLog("b")
	sb := w.openIndex(lb, Options{})
	thb, err := lb.Open(ctx, "t1", projection.LocationActive)
	if err != nil {
		t.Fatal(err)
	}
	recs := []rollout.Record{rec(t, rollout.KindTurnStarted, "b", rollout.TurnStarted{Model: "m"}),
		rec(t, rollout.KindItemAppended, "b", rollout.Item{ID: "u", Type: rollout.ItemUserMessage, Text: "second on b"})}
	res, err := thb.Append(ctx, recs, rollout.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sb.Enqueue(projection.Batch{Thread: "t1", Offset: res.Offset, End: res.End, DataCRC: res.DataCRC, Records: recs})
	info, err := s.Thread(ctx, "t1")
	if err != nil || info.Turns != 2 || info.OpenTurn != "b" || info.ProjectedOffset != res.End {
		t.Fatalf("a's read of b's frames: %+v %v", info, err)
	}
	if err := sb.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	// b hands the thread back; a appends past what its index last
	// applied itself.
	if err := thb.Close(); err != nil {
		t.Fatal(err)
	}
	lb2 := w.log
	tha, err := lb2.Open(ctx, "t1", projection.LocationActive)
	if err != nil {
		t.Fatal(err)
	}
	w.threads["t1"] = tha
	w.feed = false // the local oracle did not see b's frames: it is not compared
	end := rec(t, rollout.KindTurnCompleted, "b", rollout.TurnCompleted{Status: rollout.TurnStatusCompleted})
	res, err = tha.Append(ctx, []rollout.Record{end}, rollout.AppendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Enqueue(projection.Batch{Thread: "t1", Offset: res.Offset, End: res.End, DataCRC: res.DataCRC, Records: []rollout.Record{end}})
	if err := s.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*Store{s, sb} {
		info, err := st.Thread(ctx, "t1")
		if err != nil || info.Turns != 2 || info.OpenTurn != "" || info.ProjectedOffset != res.End {
			t.Fatalf("after a's frame: %+v %v", info, err)
		}
	}
	checkEqualsRebuild(t, s)
}

// A thread made without a published frame (fleet.Log.Write: a fork, an
// import) is listed by every host, found by search; a thread deleted by
// another host leaves every list.
func TestThreadsMadeAndDeletedElsewhereAreSeen(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	w.create("t1", rollout.Source{})
	w.turn("t1", "a", "hello")
	if _, err := s.List(ctx, projection.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	opened := rec(t, rollout.KindThreadOpened, "", rollout.ThreadOpened{ThreadID: "fork", WorkspaceID: testWorkspace,
		Source: rollout.Source{Kind: rollout.SourceUser}, ForkedFrom: &rollout.ForkRef{Thread: "t1", Turn: "a"}})
	frames := [][]rollout.Record{{opened}, {rec(t, rollout.KindTurnStarted, "a", rollout.TurnStarted{}),
		rec(t, rollout.KindItemAppended, "a", rollout.Item{ID: "u", Type: rollout.ItemUserMessage, Text: "forked pangolin"})}}
	if err := w.log.Write(ctx, "fork", frames); err != nil {
		t.Fatal(err)
	}
	p, err := s.List(ctx, projection.ListOptions{})
	if err != nil || len(p.Threads) != 2 || p.Threads[0].ID != "fork" || p.Threads[0].ForkedFrom != "t1" || p.Threads[0].Turns != 1 {
		t.Fatalf("list after a fork: %+v %v", p, err)
	}
	if hits, err := s.Search(ctx, "pangolin", projection.SearchOptions{}); err != nil || len(hits) != 1 {
		t.Fatalf("search of the fork: %+v %v", hits, err)
	}
	other := w.openIndex(w.openLog("b"), Options{})
	if err := w.log.Delete(ctx, "fork"); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*Store{s, other} {
		p, err := st.List(ctx, projection.ListOptions{})
		if err != nil || len(p.Threads) != 1 || p.Threads[0].ID != "t1" {
			t.Fatalf("list after the delete: %+v %v", p, err)
		}
		if _, err := st.Thread(ctx, "fork"); !errors.Is(err, projection.ErrNotFound) {
			t.Fatalf("a deleted thread: %v", err)
		}
	}
	sum, err := s.Summary(ctx)
	if err != nil || sum.Threads != 1 || sum.Turns != 1 || sum.Items != 4 {
		t.Fatalf("summary: %+v %v", sum, err)
	}
	if _, err := s.Thread(ctx, "nope"); !errors.Is(err, projection.ErrNotFound) {
		t.Fatalf("no such thread: %v", err)
	}
	if _, err := s.Thread(ctx, "../x"); !errors.Is(err, rollout.ErrInvalidThreadID) {
		t.Fatalf("bad id: %v", err)
	}
	checkEqualsRebuild(t, s)
}

// A thread that lost frames the index had applied, and then grew again
// over the same offsets (what a commit of unknown outcome leaves, once
// the next owner deletes what was not acknowledged), is projected anew:
// the row's anchor is not in the log any more. (projection's
// TestARolloutCutThenGrownPastItsProjectedSizeIsProjectedAnew.)
func TestAThreadCutThenGrownIsProjectedAnew(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	w.feed = false
	w.create("t1", rollout.Source{})
	w.turn("t1", "a", "first question")
	cut := w.threads["t1"].End()
	w.turn("t1", "b", "second question, lost")
	before, err := s.Thread(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.threads["t1"].Close(); err != nil {
		t.Fatal(err)
	}
	exec(t, s.pool, `DELETE FROM rolloutdb.frames f USING rolloutdb.threads t WHERE f.tid = t.tid AND t.id = 't1' AND f.off >= $1`, cut)
	th, err := w.log.Open(ctx, "t1", projection.LocationActive)
	if err != nil {
		t.Fatal(err)
	}
	w.threads["t1"] = th
	var end int64
	for i := range 5 {
		recs := []rollout.Record{rec(t, rollout.KindTurnStarted, fmt.Sprint("c", i), rollout.TurnStarted{}),
			rec(t, rollout.KindItemAppended, fmt.Sprint("c", i), rollout.Item{ID: "u", Type: rollout.ItemUserMessage, Text: fmt.Sprintf("later question %d, a longer one", i)}),
			rec(t, rollout.KindTurnCompleted, fmt.Sprint("c", i), rollout.TurnCompleted{})}
		res, err := th.Append(ctx, recs, rollout.AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		end = res.End
	}
	if end <= before.ProjectedOffset {
		t.Fatalf("the thread ends at %d, not past the %d projected: the case this test is for did not happen", end, before.ProjectedOffset)
	}
	ids, err := s.TurnIDs(ctx, "t1")
	if err != nil || fmt.Sprint(ids) != "[a c0 c1 c2 c3 c4]" {
		t.Fatalf("turns after the cut: %v %v", ids, err)
	}
	if hits, _ := s.Search(ctx, "lost", projection.SearchOptions{}); len(hits) != 0 {
		t.Fatalf("a lost turn is searched: %+v", hits)
	}
	checkEqualsRebuild(t, s)
}

// Hosts applying to the same rows at once (the owner's applier, other
// hosts' reads catching the thread up, a rebuild) leave the rows a
// rebuild makes.
func TestConcurrentAppliersAgree(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	var others []*Store
	for _, h := range []string{"b", "c"} {
		others = append(others, w.openIndex(w.openLog(h), Options{}))
	}
	for i := range 4 {
		w.create(fmt.Sprint("c", i), rollout.Source{})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for _, o := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := range 4 {
					if _, err := o.Thread(ctx, fmt.Sprint("c", i)); err != nil {
						errs <- err
						return
					}
				}
				if _, err := o.List(ctx, projection.ListOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for round := range 6 {
		for i := range 4 {
			w.turn(fmt.Sprint("c", i), fmt.Sprint("r", round), fmt.Sprintf("round %d of thread %d", round, i))
		}
		if round == 3 {
			w.append("c1", rec(t, rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: 2}))
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range 4 {
		id := fmt.Sprint("c", i)
		w.sameThread(s, id)
		for _, o := range others {
			w.sameThread(o, id)
		}
	}
	checkEqualsRebuild(t, s)
}

// Anchor names the last frame applied, which a writer may resume from;
// Forget drops a thread's rows (and nothing of its business state).
func TestAnchorAndForget(t *testing.T) {
	w := newWorld(t)
	s := w.pg
	w.create("t1", rollout.Source{})
	res := w.append("t1", rec(t, rollout.KindMetadataUpdated, "", rollout.MetadataUpdated{Labels: []string{"x"}}))
	if err := s.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	a, ok := s.Anchor(ctx, "t1")
	if !ok || a != (rollout.Anchor{Offset: res.Offset, Seq: res.FirstSeq, DataCRC: res.DataCRC}) {
		t.Fatalf("anchor %+v %v, want the frame at %d", a, ok, res.Offset)
	}
	if _, ok := s.Anchor(ctx, "nope"); ok {
		t.Fatal("an anchor for no thread")
	}
	if _, err := s.AddGoal(ctx, "t1", "keep me"); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM rolloutdb.index_threads) + (SELECT count(*) FROM rolloutdb.index_labels)`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows left after Forget: %d %v", n, err)
	}
	if g, err := s.Goals(ctx, "t1"); err != nil || len(g) != 1 {
		t.Fatalf("goals after Forget: %+v %v", g, err)
	}
	// The log still has it: a read makes its row again.
	if info, err := s.Thread(ctx, "t1"); err != nil || fmt.Sprint(info.Labels) != "[x]" {
		t.Fatalf("thread after Forget: %+v %v", info, err)
	}
}
