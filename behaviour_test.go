package rolloutdb_test

import (
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// The behaviour suite: what a host relies on from the facade, asserted
// through the public API only, once for every engine under it (DESIGN.md,
// "One API, two engines"). A case is a function of an engine; TestBehaviour
// runs every case on every engine as "<engine>/<case>". An engine added
// to engines is tested by the same cases, unchanged.

// An engine is what is under the facade, as a test opens it.
//
// What an engine must provide to plug in (a fleet engine, say, over a
// throwaway PostgreSQL cluster the test starts):
//   - open: a new, empty workspace of its own (a local directory; a fleet
//     namespace), opened with the case's Options. A case sets only
//     options that mean the same on every engine (Sync, TerminalHook,
//     Logger, Host, MaxProjectionLag, CompressAbove); the engine adds its
//     own (the file system, where state.db is, a DSN).
//   - reopen: the same workspace opened again, after a Close or beside a
//     DB still open. A second DB open beside the first is another host:
//     it has its own writer locks (ErrThreadLocked between them), sees
//     the same threads, index and business state, and can follow the
//     first's threads.
//   - try: reopen that returns Open's error instead of failing the test.
//   - crash: the host of db dies without Close (locally a kill or a
//     power cut; in a fleet, say, the host process killed with its lease
//     held); what comes back is the workspace as the next host finds it,
//     to reopen. Every append db acknowledged must be there.
//   - takeover: how long a dead host's threads may stay locked to the next
//     (a fleet's lease time to live); 0: at once.
//   - remoteWatch: whether DB.Watch of a second DB hears of the first's
//     changes.
//   - businessWithFrame: whether an append commits business writes with
//     its frame (BusinessWrites): a fleet's one database does; a local
//     workspace's two files refuse them.
//
// Every field is required. Every DB open, reopen or try hands out is
// closed when the test ends.
type engine struct {
	name              string
	open              func(t testing.TB, o rolloutdb.Options) (ws string, db *rolloutdb.DB)
	reopen            func(t testing.TB, ws string, o rolloutdb.Options) *rolloutdb.DB
	try               func(t testing.TB, ws string, o rolloutdb.Options) (*rolloutdb.DB, error)
	crash             func(t testing.TB, ws string, db *rolloutdb.DB) (after string)
	takeover          time.Duration
	remoteWatch       bool
	businessWithFrame bool
}

// engines are the engines the suite runs on.
var engines = []engine{localEngine(), localMemEngine(), fleetEngine()}

// A behaviour is one case of the suite: what it checks, as its name says,
// on one engine.
type behaviour struct {
	name string
	run  func(t *testing.T, e engine)
}

// behaviours are the cases.
var behaviours = []behaviour{
	{"TurnRoundTrip", behaveTurnRoundTrip},
	{"SeqsWithoutGaps", behaveSeqsWithoutGaps},
	{"IfLastSeqConflicts", behaveIfLastSeqConflicts},
	{"SecondWriterRefusedAndHandOff", behaveSecondWriterRefusedAndHandOff},
	{"HostsRaceForAThread", behaveHostsRaceForAThread},
	{"ReopenKeepsEverything", behaveReopenKeepsEverything},
	{"CrashKeepsAcknowledged", behaveCrashKeepsAcknowledged},
	{"CloseIsFinal", behaveCloseIsFinal},
	{"ListFiltersAndCursors", behaveListFiltersAndCursors},
	{"SearchLiteralAndRaw", behaveSearchLiteralAndRaw},
	{"MetadataSetAndRead", behaveMetadataSetAndRead},
	{"ArchiveRestoreDeleteTree", behaveArchiveRestoreDeleteTree},
	{"Rollback", behaveRollback},
	{"Fork", behaveFork},
	{"BusinessState", behaveBusinessState},
	{"BusinessWithTheFrame", behaveBusinessWithTheFrame},
	{"FollowInOrder", behaveFollowInOrder},
	{"FollowFromAnotherHost", behaveFollowFromAnotherHost},
	{"Watch", behaveWatch},
	{"WrongIDsAndPaths", behaveWrongIDsAndPaths},
	{"OversizedRecords", behaveOversizedRecords},
	{"MetricsCountAppends", behaveMetricsCountAppends},
	{"ScaleManyThreads", behaveScaleManyThreads},
	{"ScaleLongThread", behaveScaleLongThread},
}

func TestBehaviour(t *testing.T) {
	for _, e := range engines {
		for _, b := range behaviours {
			t.Run(e.name+"/"+b.name, func(t *testing.T) { b.run(t, e) })
		}
	}
}

// localEngine is a workspace in a temporary directory on the operating
// system's file system, with the default options: SyncAlways through
// the workspace journal, state.db and search.db in the data directory.
func localEngine() engine {
	try := func(t testing.TB, ws string, o rolloutdb.Options) (*rolloutdb.DB, error) {
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
		name: "local",
		open: func(t testing.TB, o rolloutdb.Options) (string, *rolloutdb.DB) {
			ws := t.TempDir()
			return ws, reopen(t, ws, o)
		},
		reopen: reopen,
		try:    try,
		// A kill: the workspace is every file as the kernel holds it at
		// that instant (what was written and not synced included), locks
		// and journal left as a dead process leaves them. db is settled
		// first, so that state.db is copied between transactions, as a
		// kill between two leaves it; the rollouts are copied as they are.
		crash: func(t testing.TB, ws string, db *rolloutdb.DB) string {
			t.Helper()
			if err := db.Settle(ctx); err != nil {
				t.Fatal(err)
			}
			after := t.TempDir()
			copyTree(t, ws, after)
			_ = db.Close() // frees what the dead host held; the copy does not see it
			return after
		},
		remoteWatch: true,
	}
}

// localMemEngine is a workspace on a vfs.MemFS, with state.db in a
// temporary directory (so that it outlives a DB, as on disk). A crash is a
// power cut: what was not synced may be lost, in part (vfs.MemFS.Crash).
// It has no file-change notification: a second DB's Watch does not hear
// of this one's changes, and its followers poll.
func localMemEngine() engine {
	var mu sync.Mutex
	fss := map[string]*vfs.MemFS{} // by ws: the state.db directory
	var crashes atomic.Uint64
	try := func(t testing.TB, ws string, o rolloutdb.Options) (*rolloutdb.DB, error) {
		mu.Lock()
		fs := fss[ws]
		mu.Unlock()
		o.FS, o.StatePath = fs, filepath.Join(ws, "state.db")
		db, err := rolloutdb.Open(ctx, "/ws", o)
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
		name: "local-memfs",
		open: func(t testing.TB, o rolloutdb.Options) (string, *rolloutdb.DB) {
			ws := t.TempDir()
			mu.Lock()
			fss[ws] = vfs.NewMemFS()
			mu.Unlock()
			t.Cleanup(func() {
				mu.Lock()
				delete(fss, ws)
				mu.Unlock()
			})
			return ws, reopen(t, ws, o)
		},
		reopen: reopen,
		try:    try,
		crash: func(t testing.TB, ws string, db *rolloutdb.DB) string {
			t.Helper()
			seed := crashes.Add(1)
			mu.Lock()
			fss[ws] = fss[ws].Crash(rand.New(rand.NewPCG(seed, 24)), false)
			mu.Unlock()
			t.Logf("power cut, seed %d", seed)
			_ = db.Close() // on the dead file system: it writes nothing the cut kept
			return ws
		},
	}
}

// copyTree copies the regular files and directories under src to dst.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The helpers of the cases: each fails the test on an error.

func mustCreateThread(t testing.TB, db *rolloutdb.DB, o rolloutdb.ThreadOptions) *rolloutdb.Thread {
	t.Helper()
	th, err := db.CreateThread(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

func mustOpenThread(t testing.TB, db *rolloutdb.DB, id string) *rolloutdb.Thread {
	t.Helper()
	th, err := db.OpenThread(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

func mustClose(t testing.TB, c io.Closer) {
	t.Helper()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// mustCommitTurn runs one turn: input, items added one by one, committed
// with history as its exact model history. It returns the turn's id.
func mustCommitTurn(t testing.TB, th *rolloutdb.Thread, input string, history []string, items ...rollout.Item) string {
	t.Helper()
	tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: input})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if _, err := tu.Add(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	c := rolloutdb.Commit{}
	for _, h := range history {
		c.ModelHistory = append(c.ModelHistory, []byte(h))
	}
	if _, err := tu.Commit(ctx, c); err != nil {
		t.Fatal(err)
	}
	return tu.ID()
}

// mustThreadWithTurns creates thread id with one turn per input and
// closes it.
func mustThreadWithTurns(t testing.TB, db *rolloutdb.DB, o rolloutdb.ThreadOptions, inputs ...string) {
	t.Helper()
	th := mustCreateThread(t, db, o)
	for _, in := range inputs {
		mustCommitTurn(t, th, in, nil)
	}
	mustClose(t, th)
}

func mustResume(t testing.TB, db *rolloutdb.DB, id string, o rolloutdb.ResumeOptions) (*rolloutdb.Thread, *recovery.State) {
	t.Helper()
	th, st, err := db.Resume(ctx, id, o)
	if err != nil {
		t.Fatal(err)
	}
	return th, st
}

// mustResumeState resumes id for its state only, and closes the thread.
func mustResumeState(t testing.TB, db *rolloutdb.DB, id string) *recovery.State {
	t.Helper()
	th, st := mustResume(t, db, id, rolloutdb.ResumeOptions{})
	mustClose(t, th)
	return st
}

func mustInfo(t testing.TB, db *rolloutdb.DB, id string) projection.ThreadInfo {
	t.Helper()
	info, err := db.ThreadInfo(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// listAll pages through a list, Limit at a time, and returns the ids in
// the order given; it fails on a thread listed twice.
func listAll(t testing.TB, db *rolloutdb.DB, o projection.ListOptions) []string {
	t.Helper()
	var ids []string
	seen := map[string]bool{}
	for {
		page, err := db.List(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if o.Limit > 0 && len(page.Threads) > o.Limit {
			t.Fatalf("a page of %d threads, limit %d", len(page.Threads), o.Limit)
		}
		for _, th := range page.Threads {
			if seen[th.ID] {
				t.Fatalf("%s listed twice (%v)", th.ID, ids)
			}
			seen[th.ID] = true
			ids = append(ids, th.ID)
		}
		if page.NextCursor == "" {
			return ids
		}
		o.Cursor = page.NextCursor
	}
}

// sorted returns ids sorted, for comparing sets.
func sorted(ids []string) []string {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	return ids
}

// follower drains a Follower on a goroutine: what it saw, in order.
type follower struct {
	f    rolloutdb.Follower
	mu   sync.Mutex
	recs []rollout.Record
	wake chan struct{} // closed (and replaced) at each record
	done chan struct{}
	err  error
	end  rolloutdb.FollowEnd
}

func startFollower(t testing.TB, db *rolloutdb.DB, id string, o rolloutdb.FollowOptions) *follower {
	t.Helper()
	f, err := db.Follow(ctx, id, o)
	if err != nil {
		t.Fatal(err)
	}
	fl := &follower{f: f, wake: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(fl.done)
		for f.Next() {
			fl.mu.Lock()
			fl.recs = append(fl.recs, f.Record())
			close(fl.wake)
			fl.wake = make(chan struct{})
			fl.mu.Unlock()
		}
		fl.err, fl.end = f.Err(), f.End()
	}()
	t.Cleanup(func() {
		_ = f.Close()
		<-fl.done
	})
	return fl
}

func (fl *follower) seen() []rollout.Record {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return slices.Clone(fl.recs)
}

// waitSeq waits until the follower has yielded seq.
func (fl *follower) waitSeq(t testing.TB, seq uint64) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		fl.mu.Lock()
		n, wake := len(fl.recs), fl.wake
		reached := n > 0 && fl.recs[n-1].Seq >= seq
		fl.mu.Unlock()
		if reached {
			return
		}
		select {
		case <-wake:
		case <-fl.done:
			if recs := fl.seen(); len(recs) == 0 || recs[len(recs)-1].Seq < seq {
				t.Fatalf("the follower stopped (%v, %q) before seq %d", fl.err, fl.end, seq)
			}
		case <-deadline:
			t.Fatalf("the follower did not yield seq %d (%d records)", seq, n)
		}
	}
}

// waitEnd waits until the follower has stopped.
func (fl *follower) waitEnd(t testing.TB) {
	t.Helper()
	select {
	case <-fl.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the follower did not stop")
	}
}

// checkSeqs: the follower yielded every seq from first to last, once, in
// order, and nothing else.
func (fl *follower) checkSeqs(t testing.TB, what string, first, last uint64) {
	t.Helper()
	recs := fl.seen()
	if len(recs) != int(last-first+1) {
		t.Fatalf("%s: %d records, want seqs %d..%d", what, len(recs), first, last)
	}
	for i, r := range recs {
		if r.Seq != first+uint64(i) {
			t.Fatalf("%s: record %d has seq %d, want %d", what, i, r.Seq, first+uint64(i))
		}
	}
}

// isErr fails the test unless err matches want.
func isErr(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
}
