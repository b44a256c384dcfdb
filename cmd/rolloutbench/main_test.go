package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/internal/pgtest/pgtesting"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// TestMain runs the test binary as a host process of --fleet when it is
// started as one (the program starts itself; under test, itself is this
// binary), and otherwise the tests, with a PostgreSQL cluster they share.
func TestMain(m *testing.M) {
	if isHost() {
		os.Exit(hostMain(os.Stdin, os.Stdout, os.Stderr))
	}
	pgtesting.Main(m)
}

// tinyArgs run every scenario at sizes that take a few seconds: 16 threads
// rather than the default 64 (under -race, each rolloutdb thread made and
// projected costs tens of milliseconds), and a long turn of 200 items, in
// blocks of 100.
var tinyArgs = []string{
	"--records", "40", "--warmup", "8", "--rewrite-max", "30", "--writers", "1,8,64", "--threads", "16",
	"--replay-turns", "10", "--replay-repeat", "1", "--list-threads", "60", "--list-repeat", "2", "--long-turn", "200", "--keep",
}

func TestRunJSON(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), append([]string{"--json", "--dir", dir}, tinyArgs...), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	// Exactly one JSON document on stdout.
	dec := json.NewDecoder(&stdout)
	var rep report
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("stdout is not JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("more than one JSON document on stdout (%v)", err)
	}
	if rep.Machine.CPUs < 1 || rep.Machine.GoVersion == "" || rep.Machine.FSType == "" || rep.Config.DataDir == "" {
		t.Fatalf("machine or config incomplete: %+v %+v", rep.Machine, rep.Config)
	}

	got := map[string]result{}
	for _, r := range rep.Results {
		key := r.System + " " + r.Scenario
		if _, dup := got[key]; dup {
			t.Errorf("%s reported twice", key)
		}
		got[key] = r
	}
	appendScens := []string{"append-1thread-1writers", "append-1thread-8writers", "append-1thread-64writers", "append-16threads"}
	core := []string{sysRolloutdb, sysJSONL, sysRewrite, sysSQLite}
	appendOnly := []string{sysThreadAppend, sysPebble}
	for _, sys := range append(core, appendOnly...) {
		for _, sc := range appendScens {
			r, ok := got[sys+" "+sc]
			if !ok {
				t.Errorf("missing %s %s", sys, sc)
				continue
			}
			if r.Records <= 0 || r.RecordsPerSec <= 0 || r.P50us <= 0 || r.P99us < r.P50us || r.BytesPerRecord <= 0 || r.Seconds <= 0 {
				t.Errorf("%s %s: figures not positive: %+v", sys, sc, r)
			}
			if rep.Machine.ProcIO && r.WrittenBytesPerRecord <= 0 {
				t.Errorf("%s %s: no written bytes though /proc/self/io is readable", sys, sc)
			}
			if r.VerifiedRecords != r.Records+r.WarmupRecords {
				t.Errorf("%s %s: %d records verified, %d + %d warm-up acknowledged", sys, sc, r.VerifiedRecords, r.Records, r.WarmupRecords)
			}
			if sys != sysRewrite && r.Records < 40 {
				t.Errorf("%s %s: %d records measured, asked 40", sys, sc, r.Records)
			}
			if sys != sysRolloutdb && r.RolloutdbAdvantage <= 0 {
				t.Errorf("%s %s: no ratio against rolloutdb", sys, sc)
			}
		}
	}
	if r := got[sysRewrite+" append-1thread-1writers"]; !r.Capped || r.Records+r.WarmupRecords != 30 || !strings.Contains(r.Note, "capped") {
		t.Errorf("rewrite not capped at 30 records: %+v", r)
	}
	for _, sys := range core {
		for _, sc := range []string{"replay", "list-60", "size-active", "size-archived"} {
			r, ok := got[sys+" "+sc]
			if !ok {
				t.Errorf("missing %s %s", sys, sc)
				continue
			}
			switch sc {
			case "replay":
				if r.Ms <= 0 || r.RecordsPerSec <= 0 || r.Turns != 10 || r.Records <= 10 {
					t.Errorf("%s replay: %+v", sys, r)
				}
			case "list-60":
				if r.Ms <= 0 || r.P50us <= 0 || r.Threads != 60 {
					t.Errorf("%s list: %+v", sys, r)
				}
			default:
				if r.Bytes <= 0 || r.BytesPerRecord <= 0 {
					t.Errorf("%s %s: %+v", sys, sc, r)
				}
			}
			if sys != sysRolloutdb && r.RolloutdbAdvantage <= 0 {
				t.Errorf("%s %s: no ratio against rolloutdb", sys, sc)
			}
		}
	}
	if r := got[sysRolloutdb+" size-active"]; r.TotalBytes <= r.Bytes {
		t.Errorf("rolloutdb size-active: state.db not counted in total_bytes: %+v", r)
	}

	// What each system claims was written is on disk: counted here with
	// code of the test's own, not the program's read-back.
	root := rep.Config.DataDir
	for _, sc := range appendScens {
		want := map[string]int64{}
		for _, sys := range append(core, appendOnly...) {
			r := got[sys+" "+sc]
			want[sys] = r.Records + r.WarmupRecords
		}
		threads := 1
		if sc == "append-16threads" {
			threads = 16
		}
		for sys, n := range want {
			dir := filepath.Join(root, sc, sys)
			var found int64
			switch sys {
			case sysRolloutdb, sysThreadAppend:
				found = resumedItems(t, dir, threads)
			case sysJSONL:
				found = jsonlLines(t, dir, threads) - int64(threads) // the header lines
			case sysRewrite:
				found = arrayElems(t, dir, threads) - int64(threads)
			case sysSQLite:
				found = sqliteRows(t, dir)
			case sysPebble:
				found = pebbleItems(t, dir, threads)
			}
			if found != n {
				t.Errorf("%s %s: %d records on disk, %d claimed", sc, sys, found, n)
			}
		}
	}
	// Archived forms exist where the program says.
	for _, p := range []string{
		"replay/rolloutdb/.craft/threads/archived/big-thread.rollout.zst",
		"replay/jsonl-fsync/big-thread.jsonl.zst",
		"replay/rewrite/big-thread.json.zst",
	} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("archived file: %v", err)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(root, "list-60", sysJSONL)); err != nil || len(ents) != 60 {
		t.Errorf("list fixture: %d files, %v", len(ents), err)
	}
}

// resumedItems resumes each thread of a rolloutdb workspace through the
// facade and counts the items of its turns.
func resumedItems(t *testing.T, dir string, threads int) int64 {
	t.Helper()
	ctx := context.Background()
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	for i := range threads {
		th, st, err := db.Resume(ctx, threadID(i), rolloutdb.ResumeOptions{})
		if err != nil {
			t.Fatalf("%s: resume %d: %v", dir, i, err)
		}
		for _, tu := range st.Turns {
			if tu.Status != rollout.TurnStatusCompleted {
				t.Errorf("%s: turn %s %s", dir, tu.ID, tu.Status)
			}
			n += int64(len(tu.Items))
		}
		if err := th.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func jsonlLines(t *testing.T, dir string, threads int) int64 {
	t.Helper()
	var n int64
	for i := range threads {
		f, err := os.Open(filepath.Join(dir, threadID(i)+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if !json.Valid(sc.Bytes()) {
				t.Errorf("%s: a line is not JSON", f.Name())
			}
			n++
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return n
}

func arrayElems(t *testing.T, dir string, threads int) int64 {
	t.Helper()
	var n int64
	for i := range threads {
		b, err := os.ReadFile(filepath.Join(dir, threadID(i)+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(b, &elems); err != nil {
			t.Fatal(err)
		}
		n += int64(len(elems))
	}
	return n
}

func sqliteRows(t *testing.T, dir string) int64 {
	t.Helper()
	db, err := openSQLite(filepath.Join(dir, "bench.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	if err := db.QueryRow(`SELECT COUNT(*) FROM records WHERE kind = 'item_appended'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// pebbleItems counts the item records under each thread's key prefix.
func pebbleItems(t *testing.T, dir string, threads int) int64 {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: testLogger{t}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	for i := range threads {
		prefix := append([]byte(threadID(i)), 0)
		iter, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: append([]byte(threadID(i)), 1)})
		if err != nil {
			t.Fatal(err)
		}
		for ok := iter.First(); ok; ok = iter.Next() {
			var r jsonRecord
			if err := json.Unmarshal(iter.Value(), &r); err != nil {
				t.Fatalf("%s: %v", iter.Key(), err)
			}
			if r.Kind == rollout.KindItemAppended {
				n++
			}
		}
		if err := iter.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// testLogger keeps pebble's log in the test's.
type testLogger struct{ t *testing.T }

func (l testLogger) Infof(format string, args ...any)  { l.t.Logf(format, args...) }
func (l testLogger) Errorf(format string, args ...any) { l.t.Errorf(format, args...) }
func (l testLogger) Fatalf(format string, args ...any) { l.t.Fatalf(format, args...) }

// lossyStore acknowledges every append but drops every fifth: the
// program's read-back must catch it.
type lossyStore struct {
	appendStore
	n int
}

func (s *lossyStore) Append(ctx context.Context, thread int, it rollout.Item) error {
	s.n++
	if s.n%5 == 0 {
		return nil
	}
	return s.appendStore.Append(ctx, thread, it)
}

func TestReadBackCatchesLostAppends(t *testing.T) {
	cfg := &config{Records: 20, Warmup: 2, Rounds: 2, Keep: false}
	e := &env{cfg: cfg, stderr: io.Discard, root: t.TempDir()}
	for _, s := range allSystems() {
		if s.name != sysJSONL && s.name != sysRolloutdb && s.name != sysPebble {
			continue
		}
		open := s.openAppend
		s.openAppend = func(ctx context.Context, e *env, dir string, threads int) (appendStore, error) {
			st, err := open(ctx, e, dir, threads)
			return &lossyStore{appendStore: st}, err
		}
		_, err := runAppend(context.Background(), e, []system{s}, "append-1thread-1writers", 1, 1, newWorkload(1, 1).itemStream(64))
		if err == nil || !strings.Contains(err.Error(), "were acknowledged") {
			t.Errorf("%s: lost appends not caught: %v", s.name, err)
		}
	}
}

func TestDefaults(t *testing.T) {
	cfg, dir, asJSON, err := parseFlags(nil, io.Discard)
	if err != nil || dir != "" || asJSON {
		t.Fatal(err, dir, asJSON)
	}
	if cfg.Threads != 64 || cfg.ListThreads != 10000 || fmt.Sprint(cfg.Writers) != "[1 8 64]" || !slices.Contains(cfg.Systems, sysWriter) || slices.Contains(cfg.Systems, sysWriterFsync) {
		t.Fatalf("defaults: %+v", cfg)
	}
	q, _, _, err := parseFlags([]string{"--quick", "--records", "77"}, io.Discard)
	if err != nil || q.Records != 77 || q.ReplayTurns != quickSizes.replayTurns || q.RewriteMax != quickSizes.rewriteMax {
		t.Fatalf("--quick: %+v %v", q, err)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"--writers", "0"}, {"--systems", "jsonl-fsync"}, {"--systems", "nope"}, {"--scenarios", "x"}, {"extra"}} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q", args, code, stdout.String())
		}
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	if p50, p99, p100 := percentile(d, 50), percentile(d, 99), percentile(d, 100); p50 != 50 || p99 != 99 || p100 != 100 {
		t.Fatalf("p50 %d p99 %d p100 %d", p50, p99, p100)
	}
	if got := fmt.Sprint(percentile(nil, 50)); got != "0s" {
		t.Fatal(got)
	}
}

// runFleetJSON runs --fleet with args and returns its report, checking
// that stdout is one JSON document with every system's figures.
func runFleetJSON(t *testing.T, args ...string) report {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), append([]string{"--fleet", "--json", "--dir", t.TempDir()}, args...), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	dec := json.NewDecoder(&stdout)
	var rep report
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("stdout is not JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("more than one JSON document on stdout (%v)", err)
	}
	if !rep.Config.Fleet || rep.Config.FleetCfg == nil || rep.Config.FleetCfg.Workspace == "" || rep.Config.FleetCfg.RecordBytes < 1000 {
		t.Fatalf("config: %+v %+v", rep.Config, rep.Config.FleetCfg)
	}
	return rep
}

// TestFleet runs --fleet tiny against a database of the test's: every
// system's figures are there, and every record a host process was
// acknowledged is in PostgreSQL afterwards, read back through the facade
// (the fleet's workspaces) and in SQL (the naive writer's rows).
func TestFleet(t *testing.T) {
	dsn := pgtesting.Database(t)
	const threads, perThread, warm = 8, 6, 2
	rep := runFleetJSON(t, "--dsn", dsn, "--threads", "8", "--hosts", "2", "--records", "48", "--warmup", "16", "--rounds", "2", "--seed", "7")
	fc := rep.Config.FleetCfg
	if fc.OwnCluster || len(fc.PGCPUs) > 0 {
		t.Errorf("with --dsn: own cluster %v, pg_cpus %v", fc.OwnCluster, fc.PGCPUs)
	}
	got := map[string]result{}
	for _, r := range rep.Results {
		got[r.System] = r
	}
	for _, sys := range fleetSystems {
		r, ok := got[sys]
		if !ok {
			t.Fatalf("no %s in %+v", sys, rep.Results)
		}
		if r.Scenario != "fleet-8threads-2hosts" || r.Records != threads*perThread || r.WarmupRecords != threads*warm || r.RecordsPerSec <= 0 || r.P50us <= 0 || r.P99us < r.P50us {
			t.Errorf("%s: %+v", sys, r)
		}
		if r.VerifiedRecords != r.Records+r.WarmupRecords {
			t.Errorf("%s: %d records read back, %d acknowledged", sys, r.VerifiedRecords, r.Records+r.WarmupRecords)
		}
		if want := map[string]int{sysLocal: 1}[sys]; r.Hosts != max(want, 2*(1-want)) {
			t.Errorf("%s: %d host processes", sys, r.Hosts)
		}
		if sys != sysFleet && r.RolloutdbAdvantage <= 0 {
			t.Errorf("%s: no ratio against the fleet", sys)
		}
		if sys != sysNaive && (r.FramesPerCommit < 1 || r.SettledRecordsPerSec <= 0 || r.HostCPUusPerRecord <= 0) {
			t.Errorf("%s: commits or settling not measured: %+v", sys, r)
		}
	}

	// Counted here, with code of the test's own.
	ctx := context.Background()
	for _, ws := range []string{fc.Workspace, fc.Workspace + "-log"} {
		db, err := rolloutdb.Open(ctx, dsn+"&workspace="+ws, rolloutdb.Options{Fleet: rolloutdb.FleetOptions{HostName: "test-reader"}})
		if err != nil {
			t.Fatal(err)
		}
		for i := range threads {
			th, st, err := db.Resume(ctx, threadID(i), rolloutdb.ResumeOptions{})
			if err != nil {
				t.Fatalf("%s: resume %d: %v", ws, i, err)
			}
			var n int
			for _, tu := range st.Turns {
				n += len(tu.Items)
			}
			if n != perThread+warm {
				t.Errorf("%s: thread %d holds %d items, %d acknowledged", ws, i, n, perThread+warm)
			}
			if err := th.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rows, distinct int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT thread) FROM `+pgx.Identifier{fc.NaiveTable}.Sanitize()).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != threads*(perThread+warm) || distinct != threads {
		t.Errorf("naive writer: %d rows over %d threads, want %d over %d", rows, distinct, threads*(perThread+warm), threads)
	}
}

// TestFleetOwnCluster runs --fleet tiny on a cluster of the program's
// own, PostgreSQL bound to CPU 0: the server's CPU is measured (in
// clock ticks of 10 ms: the fleet's 400 records take several).
func TestFleetOwnCluster(t *testing.T) {
	rep := runFleetJSON(t, "--threads", "4", "--hosts", "2", "--records", "400", "--warmup", "4", "--rounds", "1",
		"--systems", sysFleet+","+sysNaive, "--pg-cpus", "0", "--host-cpus", "all")
	fc := rep.Config.FleetCfg
	if !fc.OwnCluster || fmt.Sprint(fc.PGCPUs) != "[0]" || len(fc.HostCPUs) != 0 {
		t.Errorf("fleet config: %+v", fc)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("results: %+v", rep.Results)
	}
	for _, r := range rep.Results {
		if r.VerifiedRecords != 404 || (r.System == sysFleet && r.PGCPUusPerRecord <= 0) {
			t.Errorf("%s: %+v", r.System, r)
		}
	}
}
