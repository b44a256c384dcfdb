package pgindex

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// fill makes n threads, copies of one thread the index projected (its
// log rows and its index row), in SQL: the workspace a list of a large
// fleet meets, made in seconds rather than by n creates. Each copy has
// its own sort keys, location (a tenth archived), state (half running),
// labels (one of twenty, and a third of them "common"), and one in a
// hundred a parent (one of ten). Copies are fresh (their rows end where
// their frames do), so no read catches one up; the change log's entries
// for them are dropped, as a quiet workspace's would have been matched.
func fill(t testing.TB, w *world, n int) {
	t.Helper()
	last := time.Now()
	step := func(what string) { t.Logf("fill: %s %v", what, time.Since(last)); last = time.Now() }
	defer step("analyze")
	w.create("tmpl", rollout.Source{})
	w.turn("tmpl", "a", "a template")
	if err := w.pg.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	pool, ws := w.pg.pool, w.pg.ws
	id := `'x' || lpad(g::text, 8, '0')`
	loc := `CASE WHEN g % 10 = 0 THEN 'archived' ELSE 'active' END`
	exec(t, pool, `INSERT INTO rolloutdb.threads (ws, id, location, file_id, header, epoch)
		SELECT t.ws, `+id+`, `+loc+`, t.file_id, t.header, 1 FROM rolloutdb.threads t, generate_series(1, $2) g
		WHERE t.ws = $1 AND t.id = 'tmpl'`, ws, n)
	step("threads")
	exec(t, pool, `INSERT INTO rolloutdb.frames (tid, off, seq, epoch, data)
		SELECT c.tid, f.off, f.seq, 1, f.data FROM rolloutdb.threads tt JOIN rolloutdb.frames f ON f.tid = tt.tid
		JOIN rolloutdb.threads c ON c.ws = tt.ws AND c.id LIKE 'x%'
		WHERE tt.ws = $1 AND tt.id = 'tmpl'`, ws)
	step("frames")
	set := map[string]string{
		"id":          id,
		"location":    loc,
		"updated_at":  `t.updated_at + (g::bigint * 7919 % $2) * 1000000`,
		"created_at":  `t.created_at + g::bigint * 1000`,
		"state":       `CASE WHEN g % 2 = 0 THEN 'running' ELSE 'idle' END`,
		"labels":      `ARRAY['l' || (g % 20)] || CASE WHEN g % 3 = 0 THEN ARRAY['common'] ELSE '{}'::text[] END`,
		"parent":      `CASE WHEN g % 100 = 1 THEN 'p' || (g / 100 % 10) ELSE '' END`,
		"source_kind": `CASE WHEN g % 100 = 1 THEN 'subagent' ELSE t.source_kind END`,
		"rev":         `g`,
	}
	var cols, vals []string
	for _, c := range strings.Split(threadCols, ",") {
		c = strings.TrimSpace(c)
		if c == "tid" {
			continue
		}
		cols = append(cols, c)
		if v, ok := set[c]; ok {
			vals = append(vals, v)
		} else {
			vals = append(vals, "t."+c)
		}
	}
	exec(t, pool, `INSERT INTO rolloutdb.index_threads (ws, `+strings.Join(cols, ", ")+`)
		SELECT t.ws, `+strings.Join(vals, ", ")+` FROM rolloutdb.index_threads t, generate_series(1, $2) g
		WHERE t.ws = $1 AND t.id = 'tmpl'`, ws, n)
	step("index rows")
	exec(t, pool, `INSERT INTO rolloutdb.index_labels (tid, label, ws, id, location, updated_at, created_at)
		SELECT t.tid, l, t.ws, t.id, t.location, t.updated_at, t.created_at FROM rolloutdb.index_threads t, unnest(t.labels) l
		WHERE t.ws = $1 AND t.id LIKE 'x%'`, ws)
	step("labels")
	exec(t, pool, `DELETE FROM rolloutdb.index_changes WHERE ws = $1`, ws)
	// The planner's statistics, as autovacuum would have them.
	exec(t, pool, `ANALYZE`)
}

// listCases are the lists a large workspace is asked for: the default
// page, by either sort, filtered by label, location, state, source kind
// and parent, alone and together, and deep pages.
var listCases = []struct {
	name string
	o    projection.ListOptions
}{
	{"recent", projection.ListOptions{}},
	{"created", projection.ListOptions{Sort: projection.SortCreated}},
	{"label", projection.ListOptions{Label: "l7"}},
	{"label+archived", projection.ListOptions{Label: "l10", Scope: projection.ScopeArchived}},
	{"label+state", projection.ListOptions{Label: "common", State: "running"}},
	{"label+created", projection.ListOptions{Label: "l3", Sort: projection.SortCreated}},
	{"state", projection.ListOptions{State: "idle"}},
	{"archived", projection.ListOptions{Scope: projection.ScopeArchived}},
	{"all", projection.ListOptions{Scope: projection.ScopeAll}},
	{"all+label", projection.ListOptions{Scope: projection.ScopeAll, Label: "l5"}},
	{"subagents", projection.ListOptions{SourceKind: rollout.SourceSubagent}},
	{"parent", projection.ListOptions{Parent: "p3", Scope: projection.ScopeAll}},
}

// deepCursor returns the cursor of o's 21st page (or its last).
func deepCursor(t testing.TB, s *Store, o projection.ListOptions) string {
	t.Helper()
	for range 20 {
		p, err := s.List(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if p.NextCursor == "" {
			break
		}
		o.Cursor = p.NextCursor
	}
	return o.Cursor
}

// percentile returns the p-th percentile of durations (sorted in place).
func percentile(d []time.Duration, p float64) time.Duration {
	slices.Sort(d)
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

// Lists over 100,000 threads, with every filter, take the time of a page
// (a range of an index), not of the workspace: each is asked 20 times
// and its median must be under 50 ms, where it is a few ms with its index
// and seconds without (measured with index scans disabled: about 4 s).
func TestListScale(t *testing.T) {
	w := newWorld(t)
	const n = 100_000
	t0 := time.Now()
	fill(t, w, n)
	t.Logf("made %d threads in %v", n, time.Since(t0).Round(time.Millisecond))
	s := w.pg
	for _, c := range listCases {
		o := c.o
		p, err := s.List(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Threads) == 0 {
			t.Fatalf("%s: no thread listed", c.name)
		}
		for _, th := range p.Threads {
			if (o.Label != "" && !slices.Contains(th.Labels, o.Label)) || (o.State != "" && th.State != o.State) ||
				(o.Scope == projection.ScopeArchived) != (th.Status == projection.LocationArchived) && o.Scope != projection.ScopeAll {
				t.Fatalf("%s: a thread the filter excludes: %+v", c.name, th)
			}
		}
		deep := o
		deep.Cursor = deepCursor(t, s, o)
		for _, q := range []projection.ListOptions{o, deep} {
			var took []time.Duration
			for range 20 {
				t0 := time.Now()
				if _, err := s.List(ctx, q); err != nil {
					t.Fatal(err)
				}
				took = append(took, time.Since(t0))
			}
			p50 := percentile(took, 0.5)
			t.Logf("%-14s deep=%-5v p50 %v p99 %v", c.name, q.Cursor != "", p50, percentile(took, 0.99))
			if p50 > 50*time.Millisecond {
				t.Errorf("%s (deep %v): a page takes %v at %d threads: is its index used?", c.name, q.Cursor != "", p50, n)
			}
		}
	}
	// The workspace's rows are sound, and the copies are what they seem.
	if sum, err := s.Summary(ctx); err != nil || sum.Threads != n+1 || sum.Archived != n/10 {
		t.Fatalf("summary: %+v %v", sum, err)
	}
}

// BenchmarkList1M reports the p50 and p99 of a page of 50 with a label
// and location filter (and the other cases) at 1,000,000 threads. It runs
// only with PGINDEX_BENCH_1M=1 (making the threads takes minutes);
// otherwise it reports nothing.
func BenchmarkList1M(b *testing.B) {
	if os.Getenv("PGINDEX_BENCH_1M") == "" {
		b.Log("set PGINDEX_BENCH_1M=1 to make 1,000,000 threads and list them")
		return
	}
	w := newWorld(b)
	t0 := time.Now()
	fill(b, w, 1_000_000)
	b.Logf("made 1,000,000 threads in %v", time.Since(t0).Round(time.Second))
	s := w.pg
	for _, c := range listCases {
		b.Run(c.name, func(b *testing.B) {
			took := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				if _, err := s.List(ctx, c.o); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(t0))
			}
			b.ReportMetric(float64(percentile(took, 0.5).Microseconds()), "p50-µs")
			b.ReportMetric(float64(percentile(took, 0.99).Microseconds()), "p99-µs")
		})
	}
}
