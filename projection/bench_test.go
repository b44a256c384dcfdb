package projection

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// The benchmarks run on one generated workspace: ROLLOUTDB_BENCH_THREADS
// threads (default 10,000) of ROLLOUTDB_BENCH_TURNS turns (default 100),
// each turn a user message, a reasoning item, a tool call and result, an
// agent message (8 records in 2 frames). It is made once per run and
// removed at the end.

func benchSize(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

type benchFixture struct {
	root    string
	dbPath  string
	threads int
	turns   int
	records int64
	bytes   int64
	store   *Store
	rebuild RebuildReport
	err     error
}

var (
	fixtureOnce sync.Once
	fixture     benchFixture
	fixtureDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.store != nil {
		_ = fixture.store.Close()
	}
	if fixtureDir != "" && os.Getenv("ROLLOUTDB_BENCH_KEEP") == "" {
		_ = os.RemoveAll(fixtureDir)
	} else if fixtureDir != "" {
		fmt.Fprintf(os.Stderr, "fixture kept: rolloutctl list -w %s\n", filepath.Join(fixtureDir, "ws"))
	}
	os.Exit(code)
}

// noSyncFS makes generating the fixture cheap: durability of a benchmark's
// input is not what is measured.
type noSyncFS struct{ vfs.FS }
type noSyncFile struct{ vfs.File }

func (noSyncFile) Sync() error { return nil }
func (f noSyncFS) Create(name string) (vfs.File, error) {
	file, err := f.FS.Create(name)
	return noSyncFile{file}, err
}
func (noSyncFS) SyncDir(string) error { return nil }

var vocabulary = func() []string {
	r := rand.New(rand.NewPCG(7, 7))
	words := make([]string, 5000)
	for i := range words {
		var b strings.Builder
		for range 3 + r.IntN(6) {
			b.WriteByte(byte('a' + r.IntN(26)))
		}
		words[i] = b.String()
	}
	return words
}()

func sentence(r *rand.Rand, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		// Zipf-like: common words often, rare words rarely.
		b.WriteString(vocabulary[int(float64(len(vocabulary))*r.Float64()*r.Float64()*r.Float64())])
	}
	return b.String()
}

func getFixture(b *testing.B) *benchFixture {
	b.Helper()
	fixtureOnce.Do(func() {
		f := &fixture
		f.threads, f.turns = benchSize("ROLLOUTDB_BENCH_THREADS", 10000), benchSize("ROLLOUTDB_BENCH_TURNS", 100)
		dir, err := os.MkdirTemp("", "rolloutdb-bench-")
		if err != nil {
			f.err = err
			return
		}
		fixtureDir = dir
		// A workspace's data directory as rolloutdb lays it out, so that
		// with ROLLOUTDB_BENCH_KEEP=1 rolloutctl -w <dir>/ws reads it.
		f.root = filepath.Join(dir, "ws", ".craft")
		f.dbPath = filepath.Join(f.root, "state.db")
		f.err = generate(f)
		if f.err == nil {
			f.err = os.WriteFile(filepath.Join(f.root, "workspace.json"), []byte(`{"workspace_id": "`+testWorkspace+`", "format_version": 1}`), 0o644)
		}
		if f.err != nil {
			return
		}
		start := time.Now()
		f.store, f.err = Open(context.Background(), Options{Path: f.dbPath, Root: f.root, WorkspaceID: testWorkspace})
		if f.err == nil {
			// Measure a settled store: the search index catches up on
			// its own goroutine after a rebuild, and would compete for
			// the processors with what is measured.
			f.err = f.store.idx.flush(context.Background())
		}
		if f.err == nil {
			f.err = checkpointWAL(f.store)
		}
		if f.err == nil {
			var db, index int64
			for _, name := range []string{"state.db", "state.db-wal", "search.db", "search.db-wal"} {
				if st, err := os.Stat(filepath.Join(f.root, name)); err == nil {
					db += st.Size()
					if strings.HasPrefix(name, "search") {
						index += st.Size()
					}
				}
			}
			fmt.Fprintf(os.Stderr, "fixture: state.db and search.db %.1f MB (search.db %.1f MB), %.3fx the rollouts' %.0f MB\n",
				float64(db)/1e6, float64(index)/1e6, float64(db)/float64(f.bytes), float64(f.bytes)/1e6)
		}
		if f.err == nil {
			f.rebuild = *f.store.Report().Rebuild
			fmt.Fprintf(os.Stderr, "fixture: %d threads x %d turns, %d records, %.0f MB of rollouts; first build of state.db (open + rebuild) %.1fs: %.0f records/s, %.1f MB/s\n",
				f.threads, f.turns, f.records, float64(f.bytes)/1e6, time.Since(start).Seconds(), f.rebuild.RecordsPerSec(), float64(f.bytes)/1e6/f.rebuild.Elapsed.Seconds())
		}
	})
	if fixture.err != nil {
		b.Fatal(fixture.err)
	}
	return &fixture
}

func generate(f *benchFixture) error {
	ctx := context.Background()
	for _, d := range []string{rollout.ActiveDir, rollout.ArchivedDir} {
		if err := os.MkdirAll(filepath.Join(f.root, d), 0o755); err != nil {
			return err
		}
	}
	opts := rollout.Options{FS: noSyncFS{vfs.OS}, Sync: rollout.SyncNever}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range f.threads {
		r := rand.New(rand.NewPCG(uint64(i), 1))
		id := fmt.Sprintf("th-%06d", i)
		path, _ := rollout.ActivePath(f.root, id)
		clock := base.Add(time.Duration(i) * time.Minute)
		opts.Now = func() time.Time { clock = clock.Add(time.Second); return clock }
		w, err := rollout.Create(ctx, path, rollout.ThreadOpened{ThreadID: id, WorkspaceID: testWorkspace, Source: rollout.Source{Kind: rollout.SourceUser}, Created: clock}, opts)
		if err != nil {
			return err
		}
		for j := range f.turns {
			turn := fmt.Sprintf("t%d", j)
			start := []rollout.Record{
				mustRecord(rollout.KindTurnStarted, turn, rollout.TurnStarted{Model: "m"}),
				mustRecord(rollout.KindItemAppended, turn, rollout.Item{ID: turn + "u", Type: rollout.ItemUserMessage, Text: sentence(r, 20)}),
			}
			commit := []rollout.Record{
				mustRecord(rollout.KindItemAppended, turn, rollout.Item{ID: turn + "z", Type: rollout.ItemReasoning, Text: sentence(r, 30)}),
				mustRecord(rollout.KindItemAppended, turn, rollout.Item{ID: turn + "c", Type: rollout.ItemToolCall, CallID: turn, Name: "shell", Arguments: `{"cmd":"` + sentence(r, 4) + `"}`}),
				mustRecord(rollout.KindItemAppended, turn, rollout.Item{ID: turn + "r", Type: rollout.ItemToolResult, CallID: turn, Text: sentence(r, 60)}),
				mustRecord(rollout.KindItemAppended, turn, rollout.Item{ID: turn + "a", Type: rollout.ItemAgentMessage, Text: sentence(r, 40)}),
				mustRecord(rollout.KindModelHistoryAppended, turn, rollout.ModelHistory{Messages: [][]byte{[]byte(`{"role":"assistant"}`)}}),
				mustRecord(rollout.KindTurnCompleted, turn, rollout.TurnCompleted{Status: rollout.TurnStatusCompleted, Usage: rollout.Usage{TotalTokens: 1000}}),
			}
			for _, frame := range [][]rollout.Record{start, commit} {
				if _, err := w.Append(ctx, frame, rollout.AppendOptions{}); err != nil {
					return err
				}
				f.records += int64(len(frame))
			}
		}
		f.records++ // the header
		if err := w.Close(); err != nil {
			return err
		}
		size, err := vfs.OS.Stat(path)
		if err != nil {
			return err
		}
		f.bytes += size
	}
	return nil
}

func mustRecord(kind rollout.Kind, turn string, body any) rollout.Record {
	r, err := rollout.NewRecord(kind, turn, body)
	if err != nil {
		panic(err)
	}
	return r
}

func reportMs(b *testing.B, start time.Time) {
	b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/op")
}

// BenchmarkList: a page of 50 from state.db (with its read-repair: one
// listing of the thread directory and a stat per row on the page), against
// what a design without a projection does: read the head of every rollout
// to learn what threads exist, then sort.
func BenchmarkList(b *testing.B) {
	f := getFixture(b)
	ctx := context.Background()
	b.Run("first-page", func(b *testing.B) {
		start := time.Now()
		for range b.N {
			p, err := f.store.List(ctx, ListOptions{Limit: 50})
			if err != nil || len(p.Threads) != 50 {
				b.Fatal(err, len(p.Threads))
			}
		}
		reportMs(b, start)
	})
	b.Run("page-100-by-cursor", func(b *testing.B) {
		cursor := ""
		for range 99 {
			p, err := f.store.List(ctx, ListOptions{Limit: 50, Cursor: cursor})
			if err != nil {
				b.Fatal(err)
			}
			cursor = p.NextCursor
		}
		b.ResetTimer()
		start := time.Now()
		for range b.N {
			p, err := f.store.List(ctx, ListOptions{Limit: 50, Cursor: cursor})
			if err != nil || len(p.Threads) != 50 {
				b.Fatal(err, len(p.Threads))
			}
		}
		reportMs(b, start)
	})
	// While 64 threads are appended to, each append durable (an fsync of
	// its rollout) and handed to the projector, as a host does: the page's
	// rows change under the list (they are the newest), so it reads them
	// again, and the projector competes for the processors.
	b.Run("first-page-while-64-threads-append", func(b *testing.B) {
		stop := appendLoad(b, f, 64)
		var took []time.Duration
		start := time.Now()
		for range b.N {
			t0 := time.Now()
			p, err := f.store.List(ctx, ListOptions{Limit: 50})
			took = append(took, time.Since(t0))
			if err != nil || len(p.Threads) != 50 {
				b.Fatal(err, len(p.Threads))
			}
		}
		appended := stop()
		reportMs(b, start)
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(appended)/time.Since(start).Seconds(), "appends/s")
	})
	// The parts of a List: the query of a page alone, and the
	// filesystem-first check that precedes it (a listing of the thread
	// directories compared with every row).
	b.Run("page-query-only", func(b *testing.B) {
		start := time.Now()
		for range b.N {
			p, _, err := f.store.listQuery(ctx, ListOptions{Limit: 50})
			if err != nil || len(p.Threads) != 50 {
				b.Fatal(err, len(p.Threads))
			}
		}
		reportMs(b, start)
	})
	b.Run("reconcile-only", func(b *testing.B) {
		start := time.Now()
		for range b.N {
			if err := f.store.reconcile(ctx, false); err != nil {
				b.Fatal(err)
			}
		}
		reportMs(b, start)
	})
	b.Run("baseline-read-heads", func(b *testing.B) {
		start := time.Now()
		for range b.N {
			if got := listByHeads(b, f.root, 50); len(got) != 50 {
				b.Fatal(len(got))
			}
		}
		reportMs(b, start)
	})
}

// listByHeads lists threads the way a projection-less design must: open
// every rollout, decode its header record, sort by creation, cut a page.
func listByHeads(b *testing.B, root string, limit int) []rollout.ThreadOpened {
	dir := filepath.Join(root, rollout.ActiveDir)
	names, err := vfs.OS.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	heads := make([]rollout.ThreadOpened, 0, len(names))
	for _, n := range names {
		f, err := vfs.OS.Open(filepath.Join(dir, n))
		if err != nil {
			b.Fatal(err)
		}
		size, _ := f.Size()
		r, err := rollout.NewReader(f, size, rollout.ReaderOptions{ReadAhead: 4096})
		if err != nil {
			b.Fatal(err)
		}
		if !r.Next() {
			b.Fatal("no header")
		}
		rec := r.Record()
		var h rollout.ThreadOpened
		if err := rec.Decode(&h); err != nil {
			b.Fatal(err)
		}
		_ = f.Close()
		heads = append(heads, h)
	}
	slices.SortFunc(heads, func(a, b rollout.ThreadOpened) int { return b.Created.Compare(a.Created) })
	return heads[:min(limit, len(heads))]
}

// BenchmarkSearch: a full-text query over every item, with the read-repair
// a search does first (a stat of every rollout).
func BenchmarkSearch(b *testing.B) {
	f := getFixture(b)
	ctx := context.Background()
	for _, q := range []struct{ name, query string }{{"common-word", vocabulary[1]}, {"two-rare-words", vocabulary[3000] + " " + vocabulary[4000]}} {
		b.Run(q.name, func(b *testing.B) {
			start := time.Now()
			for range b.N {
				if _, err := f.store.Search(ctx, q.query, SearchOptions{Limit: 20}); err != nil {
					b.Fatal(err)
				}
			}
			reportMs(b, start)
		})
	}
	b.Run("refresh-only", func(b *testing.B) {
		start := time.Now()
		for range b.N {
			if err := f.store.Refresh(ctx); err != nil {
				b.Fatal(err)
			}
		}
		reportMs(b, start)
	})
}

// BenchmarkTurnsPage: turns 51-100 of a thread, from state.db.
func BenchmarkTurnsPage(b *testing.B) {
	f := getFixture(b)
	ctx := context.Background()
	start := time.Now()
	for i := range b.N {
		id := fmt.Sprintf("th-%06d", i%f.threads)
		turns, err := f.store.Turns(ctx, id, int64(f.turns/2+1), int64(f.turns))
		if err != nil || len(turns) != f.turns-f.turns/2 {
			b.Fatal(err, len(turns))
		}
	}
	reportMs(b, start)
}

// BenchmarkRebuild: every projection from every rollout.
func BenchmarkRebuild(b *testing.B) {
	f := getFixture(b)
	ctx := context.Background()
	var records int64
	var bytes int64
	start := time.Now()
	for range b.N {
		rep, err := f.store.Rebuild(ctx, RebuildOptions{Restart: true})
		if err != nil {
			b.Fatal(err)
		}
		records += rep.Records
		bytes += f.bytes
	}
	sec := time.Since(start).Seconds()
	b.ReportMetric(float64(records)/sec, "records/s")
	b.ReportMetric(float64(bytes)/sec/1e6, "MB/s")
}

// checkpointWAL folds both databases' write-ahead logs into their files,
// so that their sizes are what they hold.
func checkpointWAL(s *Store) error {
	for _, db := range []*sql.DB{s.w, s.idx.w} {
		if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			return err
		}
	}
	return nil
}

// appendLoad starts n threads of the fixture's workspace, each appended to
// by its own goroutine (SyncAlways, every frame handed to the projector),
// until the returned stop is called; stop returns the frames appended.
func appendLoad(b *testing.B, f *benchFixture, n int) (stop func() int64) {
	b.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	var done atomic.Bool
	var count atomic.Int64
	for i := range n {
		id := fmt.Sprintf("load-%d-%d", time.Now().UnixNano(), i)
		path, _ := rollout.ActivePath(f.root, id)
		w, err := rollout.Create(ctx, path, rollout.ThreadOpened{ThreadID: id, WorkspaceID: testWorkspace, Source: rollout.Source{Kind: rollout.SourceUser}, Created: time.Now()},
			rollout.Options{Sync: rollout.SyncAlways})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Close()
			r := rand.New(rand.NewPCG(uint64(i), 2))
			for j := 0; !done.Load(); j++ {
				turn := fmt.Sprintf("t%d", j)
				recs := []rollout.Record{
					mustRecord(rollout.KindTurnStarted, turn, rollout.TurnStarted{Model: "m"}),
					mustRecord(rollout.KindItemAppended, turn, rollout.Item{ID: turn + "u", Type: rollout.ItemUserMessage, Text: sentence(r, 20)}),
					mustRecord(rollout.KindTurnCompleted, turn, rollout.TurnCompleted{Status: rollout.TurnStatusCompleted}),
				}
				res, err := w.Append(ctx, recs, rollout.AppendOptions{})
				if err != nil {
					b.Error(err)
					return
				}
				f.store.Enqueue(Batch{Thread: id, Offset: res.Offset, End: res.End, DataCRC: res.DataCRC, Records: recs})
				count.Add(1)
			}
		}()
	}
	return func() int64 {
		done.Store(true)
		wg.Wait()
		return count.Load()
	}
}
