package rolloutdb_test

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The write side: turns, seqs, optimistic concurrency, the single writer,
// durability across a close and a crash, size limits and the counters.

// A turn written with StartTurn, Add and Commit (and one cancelled) reads
// back the same through Resume, the paged history and ThreadInfo, in this
// DB and after a reopen.
func behaveTurnRoundTrip(t *testing.T, e engine) {
	ws, db := e.open(t, rolloutdb.Options{})
	th := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "chat", Metadata: map[string]string{"client": "ide"}})
	if th.ID() != "chat" || th.LastSeq() != 1 { // CreateThread: the header is seq 1
		t.Fatalf("created %q at seq %d", th.ID(), th.LastSeq())
	}
	tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "list the files", Model: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := th.StartTurn(ctx, rolloutdb.TurnOptions{}); !errors.Is(err, rolloutdb.ErrTurnInProgress) {
		t.Fatalf("a second open turn: %v", err)
	}
	call, err := tu.Add(ctx, rollout.Item{Type: rollout.ItemToolCall, CallID: "c1", Name: "shell", Arguments: `{"cmd":"ls"}`})
	if err != nil {
		t.Fatal(err)
	}
	// An item added in progress, then committed final under the same id:
	// the last one wins (Turn.Add).
	if _, err := tu.Add(ctx, rollout.Item{ID: "answer", Type: rollout.ItemAgentMessage, Status: rollout.ItemInProgress, Text: "looking"}); err != nil {
		t.Fatal(err)
	}
	c := rolloutdb.Commit{
		Items: []rollout.Item{
			{Type: rollout.ItemToolResult, CallID: "c1", Text: "a.go b.go"},
			{ID: "answer", Type: rollout.ItemAgentMessage, Text: "two files"},
		},
		ModelHistory: [][]byte{[]byte(`{"role":"user"}`), []byte(`{"role":"assistant"}`)},
		Usage:        rollout.Usage{InputTokens: 100, OutputTokens: 20, TotalTokens: 120},
	}
	if _, err := tu.Commit(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Add(ctx, rollout.Item{Type: rollout.ItemAgentMessage, Text: "late"}); !errors.Is(err, rolloutdb.ErrTurnEnded) {
		t.Fatalf("an add after the commit: %v", err)
	}
	if _, err := tu.Commit(ctx, rolloutdb.Commit{}); !errors.Is(err, rolloutdb.ErrTurnEnded) {
		t.Fatalf("a second commit: %v", err)
	}
	stop, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "stop"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stop.Cancel(ctx, "user cancelled"); err != nil {
		t.Fatal(err)
	}
	last := th.LastSeq()
	mustClose(t, th)

	check := func(db *rolloutdb.DB, when string) {
		t.Helper()
		st := mustResumeState(t, db, "chat")
		if st.LastSeq != last || st.Header.ThreadID != "chat" || st.Header.WorkspaceID != db.WorkspaceID() || st.Header.Metadata["client"] != "ide" {
			t.Fatalf("%s: resumed at seq %d (want %d), header %+v", when, st.LastSeq, last, st.Header)
		}
		if len(st.Turns) != 2 || len(st.Interrupted) != 0 {
			t.Fatalf("%s: %d turns, interrupted %v", when, len(st.Turns), st.Interrupted)
		}
		one, two := st.Turns[0], st.Turns[1]
		if one.ID != tu.ID() || one.Status != rollout.TurnStatusCompleted || one.Usage != c.Usage {
			t.Fatalf("%s: turn 1 %s %s %+v", when, one.ID, one.Status, one.Usage)
		}
		texts := map[string]string{}
		for _, it := range one.Items {
			texts[it.ID] = it.Text
		}
		if len(one.Items) != 4 || texts[tu.InputID()] != "list the files" || texts[call.ID] != "" || texts[c.Items[0].ID] != "a.go b.go" || texts["answer"] != "two files" {
			t.Fatalf("%s: turn 1 items %+v", when, one.Items)
		}
		// The exact model history is the turn's model contribution.
		if !reflect.DeepEqual(one.History, c.ModelHistory) {
			t.Fatalf("%s: turn 1 history %q, want %q", when, one.History, c.ModelHistory)
		}
		if two.ID != stop.ID() || two.Status != rollout.TurnStatusAborted {
			t.Fatalf("%s: turn 2 %s %s", when, two.ID, two.Status)
		}

		// The paged history says the same, a page at a time.
		all, err := db.Turns(ctx, "chat", 1, 2)
		if err != nil || len(all) != 2 {
			t.Fatalf("%s: turns 1-2: %d, %v", when, len(all), err)
		}
		for i, want := range []string{tu.ID(), stop.ID()} {
			page, err := db.Turns(ctx, "chat", int64(i+1), int64(i+1))
			if err != nil || len(page) != 1 || page[0].ID != want || page[0].Ordinal != int64(i+1) || !reflect.DeepEqual(page[0], all[i]) {
				t.Fatalf("%s: turn page %d: %+v, %v", when, i+1, page, err)
			}
		}
		p1 := all[0]
		if p1.Status != rollout.TurnStatusCompleted || p1.Model != "m1" || p1.Usage != c.Usage || !p1.ExactHistory || p1.EndedAt == nil || len(p1.Items) != 4 {
			t.Fatalf("%s: page of turn 1: %+v", when, p1)
		}
		for i, it := range p1.Items {
			if it.ID != one.Items[i].ID || it.Text != one.Items[i].Text {
				t.Fatalf("%s: page item %d %+v, resume has %+v", when, i, it, one.Items[i])
			}
		}
		if all[1].Status != rollout.TurnStatusAborted {
			t.Fatalf("%s: page of turn 2: %s", when, all[1].Status)
		}

		info := mustInfo(t, db, "chat")
		if info.Status != projection.LocationActive || info.Turns != 2 || info.Items != 5 || info.Usage.TotalTokens != 120 ||
			info.Preview != "list the files" || info.OpenTurn != "" || info.ProjectedSeq != last || info.Source.Kind != rollout.SourceUser {
			t.Fatalf("%s: info %+v", when, info)
		}
	}
	check(db, "written")
	mustClose(t, db)
	check(e.reopen(t, ws, rolloutdb.Options{}), "reopened")
}

// Concurrent appends to one thread get seqs 2, 3, 4... with no gap and
// no seq twice: each append's result names its own, and the thread read
// back (Resume, a follower) holds every seq once, in order.
func behaveSeqsWithoutGaps(t *testing.T, e engine) {
	_, db := e.open(t, rolloutdb.Options{})
	th := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "seq"})
	tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "go"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var results []rollout.AppendResult
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				res, err := tu.Add(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: fmt.Sprintf("%d.%d", g, i)})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				results = append(results, res.AppendResult)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	res, err := tu.Commit(ctx, rolloutdb.Commit{})
	if err != nil {
		t.Fatal(err)
	}
	results = append(results, res)
	sort.Slice(results, func(i, j int) bool { return results[i].FirstSeq < results[j].FirstSeq })
	next := uint64(4) // 1 header, 2-3 turn_started and the input
	for _, r := range results {
		if r.FirstSeq != next || r.LastSeq < r.FirstSeq {
			t.Fatalf("an append got seqs %d..%d, want it to start at %d", r.FirstSeq, r.LastSeq, next)
		}
		next = r.LastSeq + 1
	}
	if last := th.LastSeq(); last != next-1 || last != 3+8*40+1 {
		t.Fatalf("last seq %d, results end at %d", last, next-1)
	}
	f := startFollower(t, db, "seq", rolloutdb.FollowOptions{})
	f.waitSeq(t, th.LastSeq())
	f.checkSeqs(t, "follower", 1, th.LastSeq())
	mustClose(t, th)
	st := mustResumeState(t, db, "seq")
	if st.LastSeq != next-1 || len(st.Turns) != 1 || len(st.Turns[0].Items) != 1+8*40 {
		t.Fatalf("resumed at %d with %d turns", st.LastSeq, len(st.Turns))
	}
}

// An append that names the seq it expects to follow (IfLastSeq) is
// written only if the thread ends there: otherwise ErrConflict, nothing
// written, for a stale seq and for one ahead; also when the thread moved
// on under another host.
func behaveIfLastSeqConflicts(t *testing.T, e engine) {
	ws, db := e.open(t, rolloutdb.Options{})
	th := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "occ"})
	mustCommitTurn(t, th, "q", nil)
	seen := th.LastSeq()
	if res, err := th.Append(ctx, nameRecord(t, "first"), rollout.AppendOptions{IfLastSeq: seen}); err != nil || res.FirstSeq != seen+1 {
		t.Fatalf("an append at the expected seq: %+v, %v", res, err)
	}
	for _, stale := range []uint64{seen, seen + 5} {
		_, err := th.Append(ctx, nameRecord(t, "stale"), rollout.AppendOptions{IfLastSeq: stale})
		isErr(t, fmt.Sprintf("an append expecting seq %d at %d", stale, seen+1), err, rolloutdb.ErrConflict)
	}
	if th.LastSeq() != seen+1 {
		t.Fatalf("refused appends moved the thread to seq %d", th.LastSeq())
	}
	if info := mustInfo(t, db, "occ"); info.Name != "first" || info.ProjectedSeq != seen+1 {
		t.Fatalf("after refused appends: %+v", info)
	}
	mustClose(t, th)

	// Another host appends; this host's knowledge is stale.
	other := e.reopen(t, ws, rolloutdb.Options{})
	oth := mustOpenThread(t, other, "occ")
	mustCommitTurn(t, oth, "from the other host", nil)
	moved := oth.LastSeq()
	mustClose(t, oth)
	th = mustOpenThread(t, db, "occ")
	_, err := th.Append(ctx, nameRecord(t, "stale"), rollout.AppendOptions{IfLastSeq: seen + 1})
	isErr(t, "an append on what another host moved on", err, rolloutdb.ErrConflict)
	if res, err := th.Append(ctx, nameRecord(t, "second"), rollout.AppendOptions{IfLastSeq: moved}); err != nil || res.FirstSeq != moved+1 {
		t.Fatalf("an append at the seq the other host left: %+v, %v", res, err)
	}
	mustClose(t, th)
	st := mustResumeState(t, db, "occ")
	if st.LastSeq != moved+1 || st.Metadata.Name != "second" || len(st.Turns) != 2 {
		t.Fatalf("resumed: seq %d, name %q, %d turns", st.LastSeq, st.Metadata.Name, len(st.Turns))
	}
}

// nameRecord is a metadata_updated record naming the thread, for raw
// appends.
func nameRecord(t testing.TB, name string) []rollout.Record {
	t.Helper()
	rec, err := rollout.NewRecord(rollout.KindMetadataUpdated, "", rollout.MetadataUpdated{Name: &name})
	if err != nil {
		t.Fatal(err)
	}
	return []rollout.Record{rec}
}

// One writer per thread: a second host gets ErrThreadLocked at once (to
// open or resume it), this DB a second handle ErrThreadOpen; readers are
// not refused. Once the writer closes the thread, the other host takes it
// over where it ended, and this one sees what it wrote.
func behaveSecondWriterRefusedAndHandOff(t *testing.T, e engine) {
	ws, a := e.open(t, rolloutdb.Options{})
	b := e.reopen(t, ws, rolloutdb.Options{})
	th := mustCreateThread(t, a, rolloutdb.ThreadOptions{ID: "one"})
	mustCommitTurn(t, th, "from a", nil)

	_, err := b.OpenThread(ctx, "one")
	isErr(t, "another host opens a held thread", err, rolloutdb.ErrThreadLocked)
	_, _, err = b.Resume(ctx, "one", rolloutdb.ResumeOptions{})
	isErr(t, "another host resumes a held thread", err, rolloutdb.ErrThreadLocked)
	_, err = a.OpenThread(ctx, "one")
	isErr(t, "a second handle in the same DB", err, rolloutdb.ErrThreadOpen)
	if info, err := b.ThreadInfo(ctx, "one"); err != nil || info.Turns != 1 {
		t.Fatalf("another host reads a held thread: %+v, %v", info, err)
	}

	held := th.LastSeq()
	mustClose(t, th)
	if _, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "after close"}); err == nil {
		t.Fatal("a turn started on a closed thread handle")
	}
	if err := th.Close(); err != nil {
		t.Fatalf("a second Thread.Close: %v", err)
	}
	tb := mustOpenThread(t, b, "one")
	if tb.LastSeq() != held {
		t.Fatalf("taken over at seq %d, the first host left %d", tb.LastSeq(), held)
	}
	mustCommitTurn(t, tb, "from b", nil)
	_, err = a.OpenThread(ctx, "one")
	isErr(t, "the first host opens it back while the second holds it", err, rolloutdb.ErrThreadLocked)
	turns, err := a.Turns(ctx, "one", 2, 2)
	if err != nil || len(turns) != 1 || turns[0].Items[0].Text != "from b" {
		t.Fatalf("the first host reads the second's turn: %+v, %v", turns, err)
	}
	handed := tb.LastSeq()
	mustClose(t, tb)
	back := mustOpenThread(t, a, "one")
	defer back.Close()
	if back.LastSeq() != handed {
		t.Fatalf("handed back at seq %d, want %d", back.LastSeq(), handed)
	}
}

// Hosts racing for one thread: of eight creates of one id over two
// hosts, one wins and the others get ErrThreadExists (or ErrThreadOpen in
// the winner's DB while it holds the thread); of opens of an
// existing thread, one at a time holds it, the others get
// ErrThreadLocked (another host) or ErrThreadOpen (the same DB), and
// every turn the holders wrote is there, in one unbroken run of seqs.
func behaveHostsRaceForAThread(t *testing.T, e engine) {
	ws, a := e.open(t, rolloutdb.Options{})
	b := e.reopen(t, ws, rolloutdb.Options{})
	hosts := []*rolloutdb.DB{a, b}
	var mu sync.Mutex
	won, exists := 0, 0
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			th, err := hosts[i%2].CreateThread(ctx, rolloutdb.ThreadOptions{ID: "contended"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
				mustCommitTurn(t, th, "created", nil)
				if err := th.Close(); err != nil {
					t.Error(err)
				}
			case errors.Is(err, rolloutdb.ErrThreadExists), errors.Is(err, rolloutdb.ErrThreadOpen): // the winner's own DB, while it holds it
				exists++
			default:
				t.Errorf("a racing create: %v", err)
			}
		}()
	}
	wg.Wait()
	if won != 1 || exists != 7 {
		t.Fatalf("8 racing creates: %d won, %d refused", won, exists)
	}

	turns := 1
	for round := range 5 {
		var wrote int
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				th, err := hosts[i%2].OpenThread(ctx, "contended")
				if errors.Is(err, rolloutdb.ErrThreadLocked) || errors.Is(err, rolloutdb.ErrThreadOpen) {
					return
				}
				if err != nil {
					t.Errorf("round %d: a racing open: %v", round, err)
					return
				}
				mustCommitTurn(t, th, fmt.Sprintf("round %d", round), nil)
				mu.Lock()
				wrote++
				mu.Unlock()
				if err := th.Close(); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if wrote == 0 {
			t.Fatalf("round %d: no racing open got the thread", round)
		}
		turns += wrote
	}
	st := mustResumeState(t, a, "contended")
	if len(st.Turns) != turns || st.LastSeq != uint64(1+3*turns) { // a turn: turn_started, the input, turn_completed
		t.Fatalf("%d turns written by the holders, %d resumed, last seq %d", turns, len(st.Turns), st.LastSeq)
	}
	f := startFollower(t, b, "contended", rolloutdb.FollowOptions{PollInterval: 5 * time.Millisecond})
	f.waitSeq(t, st.LastSeq)
	f.checkSeqs(t, "the raced thread", 1, st.LastSeq)
}

// snapshot is what a host reads of a workspace: every thread as listed
// and resumed, and its business state.
func snapshot(t testing.TB, db *rolloutdb.DB) string {
	t.Helper()
	var b strings.Builder
	page, err := db.List(ctx, projection.ListOptions{Scope: projection.ScopeAll, Sort: projection.SortCreated, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range page.Threads {
		fmt.Fprintf(&b, "%s %s name=%q labels=%v flags=%v state=%q turns=%d items=%d seq=%d src=%+v fork=%s/%s\n",
			info.ID, info.Status, info.Name, info.Labels, info.Flags, info.State, info.Turns, info.Items, info.ProjectedSeq, info.Source, info.ForkedFrom, info.ForkedTurn)
		turns, err := db.Turns(ctx, info.ID, 1, info.Turns)
		if err != nil {
			t.Fatal(err)
		}
		for _, tu := range turns {
			fmt.Fprintf(&b, "  turn %d %s %s", tu.Ordinal, tu.ID, tu.Status)
			for _, it := range tu.Items {
				fmt.Fprintf(&b, " [%s %s %q]", it.ID, it.Type, it.Text)
			}
			b.WriteString("\n")
		}
		goals, err := db.Business().Goals(ctx, info.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range goals {
			fmt.Fprintf(&b, "  goal %d %q %s\n", g.ID, g.Text, g.Status)
		}
		plan, err := db.Business().Plan(ctx, info.ID)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "  plan %v\n", plan)
		inbox, err := db.Business().Inbox(ctx, info.ID, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range inbox {
			fmt.Fprintf(&b, "  message %d %s->%s %q read=%v\n", m.ID, m.From, m.To, m.Body, m.ReadAt != nil)
		}
	}
	edges, err := db.Business().Edges(ctx, projection.EdgeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range edges {
		fmt.Fprintf(&b, "edge %s->%s %s\n", e.Parent, e.Child, e.Status)
	}
	return b.String()
}

// writeWorkspace fills a workspace with a bit of everything a host
// writes: turns, an open turn, metadata, a subagent, a fork, an archived
// thread, goals, a plan and a message.
func writeWorkspace(t testing.TB, db *rolloutdb.DB) {
	t.Helper()
	main := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "main"})
	mustCommitTurn(t, main, "first question", []string{"h1"}, rollout.Item{Type: rollout.ItemAgentMessage, Text: "first answer"})
	mustCommitTurn(t, main, "second question", []string{"h2"}, rollout.Item{Type: rollout.ItemAgentMessage, Text: "second answer"})
	name, status := "the main thread", "waiting"
	if _, err := main.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{Name: &name, AddLabels: []string{"red"}, Flags: map[string]bool{"pinned": true}, Status: &status}); err != nil {
		t.Fatal(err)
	}
	open, err := main.StartTurn(ctx, rolloutdb.TurnOptions{Input: "left open"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open.Add(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: "thinking"}); err != nil {
		t.Fatal(err)
	}
	mustClose(t, main)
	mustThreadWithTurns(t, db, rolloutdb.ThreadOptions{ID: "sub", Source: rollout.Source{Kind: rollout.SourceSubagent, Parent: "main", Root: "main", Depth: 1}}, "sub work")
	fk, err := db.Fork(ctx, "main", rolloutdb.ForkOptions{ID: "fork", AtTurn: 1})
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, fk)
	mustThreadWithTurns(t, db, rolloutdb.ThreadOptions{ID: "old"}, "old work")
	if _, err := db.Archive(ctx, "old", "done"); err != nil {
		t.Fatal(err)
	}
	biz := db.Business()
	if _, err := biz.AddGoal(ctx, "main", "ship it"); err != nil {
		t.Fatal(err)
	}
	if err := biz.SetPlan(ctx, "main", []projection.PlanStep{{Text: "write", Status: "completed"}, {Text: "test", Status: "pending"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := biz.Send(ctx, "sub", "main", "done with it"); err != nil {
		t.Fatal(err)
	}
}

// Everything acknowledged is there after a Close and an Open, the same
// each time round; Open reports no loss of business state.
func behaveReopenKeepsEverything(t *testing.T, e engine) {
	ws, db := e.open(t, rolloutdb.Options{})
	writeWorkspace(t, db)
	want, id := snapshot(t, db), db.WorkspaceID()
	mustClose(t, db)
	for round := range 3 {
		db = e.reopen(t, ws, rolloutdb.Options{})
		if db.WorkspaceID() != id {
			t.Fatalf("round %d: workspace id %s, was %s", round, db.WorkspaceID(), id)
		}
		if rep := db.StateReport(); rep.BusinessStateLost || rep.Corrupt {
			t.Fatalf("round %d: state report %+v", round, rep)
		}
		if got := snapshot(t, db); got != want {
			t.Fatalf("round %d: after reopen\n%s\nwant\n%s", round, got, want)
		}
		st := mustResumeState(t, db, "main")
		if len(st.Turns) != 3 || len(st.Interrupted) != 1 || string(st.ModelHistory[0]) != "h1" {
			t.Fatalf("round %d: main resumed with %d turns, interrupted %v", round, len(st.Turns), st.Interrupted)
		}
		mustClose(t, db)
	}
}

// A host that dies without closing loses nothing it was told was
// durable: the next host finds every acknowledged record (the turn it
// left open reported interrupted), takes its threads over (within the
// engine's takeover time) and writes on from where they end. Three
// crashes in a row, each after more writes.
func behaveCrashKeepsAcknowledged(t *testing.T, e engine) {
	ws, db := e.open(t, rolloutdb.Options{})
	th := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "c"})
	turns := 0
	for round := range 3 {
		for i := range 3 {
			mustCommitTurn(t, th, fmt.Sprintf("round %d turn %d", round, i), []string{fmt.Sprintf("h%d.%d", round, i)},
				rollout.Item{Type: rollout.ItemAgentMessage, Text: "answer"})
		}
		open, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "cut off"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := open.Add(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: "half a thought"}); err != nil {
			t.Fatal(err)
		}
		turns += 4
		if _, err := db.Business().AddGoal(ctx, "c", fmt.Sprintf("goal %d", round)); err != nil {
			t.Fatal(err)
		}
		acked := th.LastSeq()

		ws = e.crash(t, ws, db)
		db = e.reopen(t, ws, rolloutdb.Options{})
		var st *recovery.State
		deadline := time.Now().Add(e.takeover)
		for {
			var err error
			th, st, err = db.Resume(ctx, "c", rolloutdb.ResumeOptions{})
			if err == nil {
				break
			}
			if !errors.Is(err, rolloutdb.ErrThreadLocked) || time.Now().After(deadline) {
				t.Fatalf("round %d: resume after the crash: %v", round, err)
			}
		}
		if st.LastSeq != acked || len(st.Turns) != turns || len(st.Interrupted) != 1 || st.Interrupted[0] != open.ID() {
			t.Fatalf("round %d: resumed at seq %d (acknowledged %d), %d turns (want %d), interrupted %v (want %s)",
				round, st.LastSeq, acked, len(st.Turns), turns, st.Interrupted, open.ID())
		}
		if items := st.Turns[turns-1].Items; len(items) != 2 || items[1].Text != "half a thought" {
			t.Fatalf("round %d: the open turn's items %+v", round, items)
		}
		if goals, err := db.Business().Goals(ctx, "c"); err != nil || len(goals) != round+1 {
			t.Fatalf("round %d: goals %+v, %v", round, goals, err)
		}
		if info := mustInfo(t, db, "c"); info.ProjectedSeq != acked || info.OpenTurn != open.ID() {
			t.Fatalf("round %d: info %+v", round, info)
		}
		if err := th.AbortInterrupted(ctx, open.ID(), "host died"); err != nil {
			t.Fatal(err)
		}
		if th.LastSeq() != acked+1 {
			t.Fatalf("round %d: the abort got seq %d, want %d", round, th.LastSeq(), acked+1)
		}
	}
	mustClose(t, th)
	st := mustResumeState(t, db, "c")
	for _, tu := range st.Turns {
		if tu.Status != rollout.TurnStatusCompleted && tu.Status != rollout.TurnStatusAborted {
			t.Fatalf("turn %s is %s after every interrupted one was aborted", tu.ID, tu.Status)
		}
	}
}

// Close is final and may be called again: a watcher stops, every call
// on the DB, its threads and turns fails (those that open threads with
// ErrClosed), and the workspace opens again with the turn left open
// interrupted.
func behaveCloseIsFinal(t *testing.T, e engine) {
	ws, db := e.open(t, rolloutdb.Options{})
	mustThreadWithTurns(t, db, rolloutdb.ThreadOptions{ID: "x"}, "q")
	mustThreadWithTurns(t, db, rolloutdb.ThreadOptions{ID: "y"}, "q")
	x, y := mustOpenThread(t, db, "x"), mustOpenThread(t, db, "y")
	tu, err := x.StartTurn(ctx, rolloutdb.TurnOptions{Input: "open at close"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := db.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, db)
	if err := db.Close(); err != nil && !errors.Is(err, rolloutdb.ErrClosed) {
		t.Fatalf("a second Close: %v", err)
	}
	if w.Next() {
		t.Fatal("a watcher of a closed DB yielded an event")
	}
	if err := w.Err(); err != nil && !errors.Is(err, rolloutdb.ErrClosed) {
		t.Fatalf("a watcher of a closed DB stopped with %v", err)
	}
	for name, call := range closedCalls(t, db, y, tu) {
		err := call()
		if err == nil {
			t.Errorf("%s after Close succeeded", name)
		}
		switch name {
		case "CreateThread", "OpenThread", "Resume", "Watch": // ErrClosed: "returned by a DB or Thread after Close"
			if !errors.Is(err, rolloutdb.ErrClosed) {
				t.Errorf("%s after Close: %v, want ErrClosed", name, err)
			}
		}
	}
	for _, th := range []*rolloutdb.Thread{x, y} {
		if err := th.Close(); err != nil {
			t.Errorf("Thread.Close of a thread its DB closed: %v", err)
		}
	}
	db = e.reopen(t, ws, rolloutdb.Options{})
	st := mustResumeState(t, db, "x")
	if len(st.Turns) != 2 || len(st.Interrupted) != 1 || st.Interrupted[0] != tu.ID() {
		t.Fatalf("after reopen: %d turns, interrupted %v", len(st.Turns), st.Interrupted)
	}
	if ids := listAll(t, db, projection.ListOptions{Scope: projection.ScopeAll}); !slices.Equal(sorted(ids), []string{"x", "y"}) {
		t.Fatalf("calls refused after Close left threads: %v", ids)
	}
}

// closedCalls are calls of every kind on a closed DB, on a thread it had
// open (th, no turn open) and on a turn it had open (tu), by name.
func closedCalls(t testing.TB, db *rolloutdb.DB, th *rolloutdb.Thread, tu *rolloutdb.Turn) map[string]func() error {
	return map[string]func() error{
		"CreateThread":     func() error { _, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{}); return err },
		"OpenThread":       func() error { _, err := db.OpenThread(ctx, "x"); return err },
		"Resume":           func() error { _, _, err := db.Resume(ctx, "x", rolloutdb.ResumeOptions{}); return err },
		"Watch":            func() error { _, err := db.Watch(ctx); return err },
		"List":             func() error { _, err := db.List(ctx, projection.ListOptions{}); return err },
		"ThreadInfo":       func() error { _, err := db.ThreadInfo(ctx, "x"); return err },
		"Turns":            func() error { _, err := db.Turns(ctx, "x", 1, 1); return err },
		"Search":           func() error { _, err := db.Search(ctx, "q", projection.SearchOptions{}); return err },
		"Archive":          func() error { _, err := db.Archive(ctx, "x", ""); return err },
		"CreateThread(id)": func() error { _, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "created"}); return err },
		"Business.Goals":   func() error { _, err := db.Business().Goals(ctx, "x"); return err },
		"StartTurn":        func() error { _, err := th.StartTurn(ctx, rolloutdb.TurnOptions{}); return err },
		"UpdateMetadata": func() error {
			_, err := th.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{AddLabels: []string{"l"}})
			return err
		},
		"Thread.Append":   func() error { _, err := th.Append(ctx, nameRecord(t, "n"), rollout.AppendOptions{}); return err },
		"Thread.Rollback": func() error { _, err := th.Rollback(ctx, 1); return err },
		"Turn.Add":        func() error { _, err := tu.Add(ctx, rollout.Item{Type: rollout.ItemReasoning}); return err },
		"Turn.Commit":     func() error { _, err := tu.Commit(ctx, rolloutdb.Commit{}); return err },
	}
}

// A record or frame over the size limit is refused with ErrTooLarge and
// nothing is written: the thread, its open turn and its seqs go on as if
// it had not been tried. A header too large makes no thread.
func behaveOversizedRecords(t *testing.T, e engine) {
	_, db := e.open(t, rolloutdb.Options{})
	// Over the limit before compression, however well it compresses
	// (rollout.MaxFrameSize bounds payloads "stored and decompressed").
	huge := strings.Repeat("x", rollout.MaxFrameSize+1024)
	_, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "big", Metadata: map[string]string{"blob": huge}})
	isErr(t, "a header over the limit", err, rolloutdb.ErrTooLarge)
	if _, err := db.ThreadInfo(ctx, "big"); !errors.Is(err, rolloutdb.ErrNotFound) {
		t.Fatalf("a refused create left a thread: %v", err)
	}
	if ids, err := db.ListThreadIDs(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("a refused create left %v, %v", ids, err)
	}

	th := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "big"})
	tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "q"})
	if err != nil {
		t.Fatal(err)
	}
	seq := th.LastSeq()
	_, err = tu.Add(ctx, rollout.Item{Type: rollout.ItemAgentMessage, Text: huge})
	isErr(t, "an item over the limit", err, rolloutdb.ErrTooLarge)
	_, err = tu.Commit(ctx, rolloutdb.Commit{ModelHistory: [][]byte{[]byte(huge)}})
	isErr(t, "a commit over the limit", err, rolloutdb.ErrTooLarge)
	name := huge
	_, err = th.UpdateMetadata(ctx, rolloutdb.MetadataUpdate{Name: &name})
	if err == nil {
		t.Fatal("a metadata update over the limit was written")
	}
	isErr(t, "a metadata update over the limit", err, rolloutdb.ErrTooLarge)
	if th.LastSeq() != seq {
		t.Fatalf("refused records moved the thread from seq %d to %d", seq, th.LastSeq())
	}
	// The turn is still open (a failed commit leaves it so: the host may
	// retry) and takes what fits.
	large := strings.Repeat("large but within the limit ", 40_000) // 1 MiB
	if _, err := tu.Add(ctx, rollout.Item{ID: "large", Type: rollout.ItemAgentMessage, Text: large}); err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Commit(ctx, rolloutdb.Commit{ModelHistory: [][]byte{[]byte("fits")}}); err != nil {
		t.Fatal(err)
	}
	f := startFollower(t, db, "big", rolloutdb.FollowOptions{})
	f.waitSeq(t, th.LastSeq())
	f.checkSeqs(t, "after refused records", 1, th.LastSeq())
	mustClose(t, th)
	st := mustResumeState(t, db, "big")
	if len(st.Turns) != 1 || st.Turns[0].Status != rollout.TurnStatusCompleted || len(st.Turns[0].Items) != 2 || st.Turns[0].Items[1].Text != large || st.Metadata.Name != "" {
		t.Fatalf("resumed: %d turns, name %d bytes", len(st.Turns), len(st.Metadata.Name))
	}
	if turns, err := db.Turns(ctx, "big", 1, 1); err != nil || len(turns) != 1 || turns[0].Items[1].Text != large {
		t.Fatalf("paged history of the large item: %v", err)
	}
}

// Metrics counts the frames, records and bytes this DB's threads had
// acknowledged, and nothing refused; another host's DB counts its own;
// open followers are counted while open.
func behaveMetricsCountAppends(t *testing.T, e engine) {
	ws, db := e.open(t, rolloutdb.Options{})
	other := e.reopen(t, ws, rolloutdb.Options{})
	th := mustCreateThread(t, db, rolloutdb.ThreadOptions{ID: "m"})
	tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "q"})
	if err != nil {
		t.Fatal(err)
	}
	before := db.Metrics().Appends
	var frames, records, bytes int64
	count := func(res rollout.AppendResult, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		frames++
		records += int64(res.LastSeq - res.FirstSeq + 1)
		bytes += res.End - res.Offset
	}
	for i := range 3 {
		res, err := tu.Add(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: fmt.Sprint(i)})
		count(res.AppendResult, err)
	}
	count(tu.Commit(ctx, rolloutdb.Commit{Items: []rollout.Item{{Type: rollout.ItemAgentMessage, Text: "a"}}, ModelHistory: [][]byte{[]byte("h")}}))
	count(th.Append(ctx, nameRecord(t, "n"), rollout.AppendOptions{}))
	_, err = th.Append(ctx, nameRecord(t, "refused"), rollout.AppendOptions{IfLastSeq: 1})
	isErr(t, "a stale append", err, rolloutdb.ErrConflict)
	after := db.Metrics().Appends
	if got := (rolloutdb.AppendMetrics{Frames: after.Frames - before.Frames, Records: after.Records - before.Records, Bytes: after.Bytes - before.Bytes}); got != (rolloutdb.AppendMetrics{Frames: frames, Records: records, Bytes: bytes}) {
		t.Fatalf("appends counted %+v, acknowledged %d frames, %d records, %d bytes", got, frames, records, bytes)
	}
	if records != 3+3+1 { // the commit: an item, the history, turn_completed
		t.Fatalf("the script acknowledged %d records", records)
	}
	if m := other.Metrics().Appends; m.Frames != 0 || m.Records != 0 {
		t.Fatalf("another host counts this one's appends: %+v", m)
	}
	f1 := startFollower(t, db, "m", rolloutdb.FollowOptions{})
	f2 := startFollower(t, db, "m", rolloutdb.FollowOptions{})
	if n := db.Metrics().Followers; n != 2 {
		t.Fatalf("%d followers counted, 2 open", n)
	}
	f2.f.Close()
	f2.waitEnd(t) // "Close stops the follower; a Next waiting returns false"
	if n := db.Metrics().Followers; n != 1 {
		t.Fatalf("%d followers counted after one of 2 closed", n)
	}
	f1.waitSeq(t, th.LastSeq()) // and the open one follows
}
