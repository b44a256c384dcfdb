package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
	_ "modernc.org/sqlite"
)

// The children of the kill and twoproc modes are this test binary run
// again with childEnv set: TestMain hands them to childMain before any test
// runs, as main does in the real binary.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

var ctx = context.Background()

// TestModes runs every mode briefly through the command line and checks
// the JSON summary: something was acknowledged, nothing lost, no rollout
// unreadable, no projection different from a rebuild, no check failed.
func TestModes(t *testing.T) {
	// Small: every mode runs under -race, where SQLite (transpiled C) is
	// slow; the modes run side by side.
	small := []string{"--large", "0", "--seed", "3"}
	for _, tc := range []struct {
		mode string
		args []string
	}{
		{"kill", []string{"--iterations", "2", "--min-delay", "300ms", "--max-delay", "500ms"}},
		{"power", []string{"--iterations", "3", "--ops", "200"}},
		{"fault", []string{"--iterations", "3", "--ops", "200"}},
		{"twoproc", []string{"--iterations", "2", "--ops", "120", "--read-for", "100ms"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			args := append(append([]string{"--mode", tc.mode, "--json", "--dir", t.TempDir()}, small...), tc.args...)
			var out, errb bytes.Buffer
			code := run(ctx, args, &out, &errb)
			var sum summary
			if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
				t.Fatalf("exit %d; the output is not one JSON document: %v\n%s\nstderr:\n%s", code, err, out.String(), errb.String())
			}
			m := sum.Modes[tc.mode]
			if code != 0 || m == nil || m.Acknowledged == 0 || sum.Lost != 0 || sum.Unreadable != 0 || sum.ProjectionMismatches != 0 || sum.Failures != 0 {
				t.Fatalf("exit %d: %s\nstderr:\n%s", code, out.String(), errb.String())
			}
			if m.Iterations == 0 || sum.Iterations != m.Iterations || sum.Acknowledged != m.Acknowledged {
				t.Fatalf("counts do not add up: %s", out.String())
			}
			t.Logf("%s: %d iterations, %d acknowledged, counters %v", tc.mode, m.Iterations, m.Acknowledged, m.Counters)
		})
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"--mode", "nope"}, {"--iterations", "0"}, {"extra"}, {"--min-delay", "2s", "--max-delay", "1s"}} {
		var out, errb bytes.Buffer
		if code := run(ctx, args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}

// written makes a workspace on a MemFS (state.db on disk) the way the
// modes do, in-process: four threads written by workers until 80 calls are
// acknowledged, every one journaled. It returns the workspace closed.
func written(t *testing.T) (wsRef, *vfs.MemFS, *ledger, []string) {
	t.Helper()
	mem := vfs.NewMemFS()
	ws := wsRef{fs: mem, dir: memDir, statePath: filepath.Join(t.TempDir(), "state.db"), scratch: t.TempDir(),
		logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	db, err := ws.open(ctx, ws.statePath)
	if err != nil {
		t.Fatal(err)
	}
	led := newLedger()
	// Every thread gets acknowledged frames before the last (the damage
	// below needs them): stop once each has 20, however the workers were
	// scheduled.
	var mu sync.Mutex
	acks := map[string]int{}
	var errs []string
	h := &host{ctx: ctx, db: db, exact: true,
		j: func(line string) {
			led.line(line)
			if f := strings.Fields(line); len(f) > 1 && f[0] == "K" {
				mu.Lock()
				acks[f[1]]++
				mu.Unlock()
			}
		},
		stop: func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, id := range []string{"c-0", "c-1", "c-2", "c-3"} {
				if acks[id] < 20 {
					return false
				}
			}
			return true
		},
		onErr:  func(err error, _ int64) error { return err },
		report: func(s string) { errs = append(errs, s) },
	}
	ids := []string{"c-0", "c-1", "c-2", "c-3"}
	runWorkers(h, nil, ids, 5, "c", false, false)
	if err := db.Close(); err != nil || len(errs) > 0 {
		t.Fatalf("writing the workspace: %v %v", err, errs)
	}
	return ws, mem, led, ids
}

// TestCheckerFails: the checker can fail. A workspace is written and
// journaled, then each of its threads is damaged the way a broken library
// could, and the checker must say so, each in its words:
//   - c-0: one byte of an acknowledged frame flipped (acknowledged records
//     lost, damage in the middle of the rollout);
//   - c-1: the journal claims an acknowledgement for a record never
//     written (lost);
//   - c-2: a record appended that no writer announced (never attempted);
//   - c-3: a state.db row that says what the rollout does not, and that
//     read-repair has no reason to revisit (a projection mismatch).
//
// Then, on the ledger alone: a call journaled as failed whose frame is on
// disk before acknowledged ones (what fault mode forbids).
func TestCheckerFails(t *testing.T) {
	t.Parallel()
	ws, mem, led, ids := written(t)
	root := filepath.Join(memDir, ".craft")
	path := func(id string) string { return filepath.Join(root, rollout.ActiveDir, id+rollout.RolloutExt) }

	// c-0: flip a byte of the payload of an acknowledged frame that is not
	// the last.
	frames := frameOffsets(t, mem, path(ids[0]))
	var off int64 = -1
	for _, o := range led.threads[ids[0]].ops {
		if o.ack != 0 && o.first != 0 && frames[o.first] < frames[uint64(len(frames))] {
			off = frames[o.first]
			break
		}
	}
	if off < 0 {
		t.Fatal("no acknowledged frame before the last one")
	}
	flipByte(t, mem, path(ids[0]), off+rollout.FrameHeaderSize+1)

	// c-1: an acknowledgement of nothing.
	key := recordKey(rollout.KindTurnAborted, "t-never", rollout.TurnAborted{Reason: "never written"})
	led.line("A " + ids[1] + " op-never " + key)
	led.line("K " + ids[1] + " op-never 0 0")

	// c-2: a record no writer announced.
	db, err := ws.open(ctx, ws.statePath)
	if err != nil {
		t.Fatal(err)
	}
	th, err := db.OpenThread(ctx, ids[2])
	if err != nil {
		t.Fatal(err)
	}
	name := "phantom"
	rec, _ := rollout.NewRecord(rollout.KindMetadataUpdated, "", rollout.MetadataUpdated{Name: &name})
	if _, err := th.Append(ctx, []rollout.Record{rec}, rollout.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ThreadInfo(ctx, ids[3]); err != nil { // c-3's row up to date
		t.Fatal(err)
	}
	_ = th.Close()
	_ = db.Close()

	// c-3: a row that lies.
	sdb, err := sql.Open("sqlite", ws.statePath)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sdb.Exec(`UPDATE threads SET name = 'tampered' WHERE id = ?`, ids[3])
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("tamper with state.db: %d rows", n)
	}
	sdb.Close()

	var errb bytes.Buffer
	c := &checker{mode: "test", seed: 5, st: &stats{}, out: &errb}
	c.verify(ctx, ws, led, false)
	out := errb.String()
	for _, want := range []struct{ what, text string }{
		{"a corrupted acknowledged frame", "thread c-0: damage in the middle of the rollout"},
		{"the loss of its records", "thread c-0: acknowledged op"},
		{"an acknowledgement of a record not on disk", "thread c-1: acknowledged op op-never"},
		{"a record no writer attempted", "thread c-2: seq"},
		{"a state.db that differs from a rebuild", `thread c-3: name: state.db "tampered", rebuild`},
	} {
		if !strings.Contains(out, want.text) {
			t.Errorf("%s went unnoticed (no %q)", want.what, want.text)
		}
	}
	if c.st.Lost < 2 || c.st.Unreadable < 1 || c.st.ProjectionMismatches < 1 || !strings.Contains(out, "never attempted") {
		t.Errorf("counts: %+v", c.st)
	}
	if t.Failed() {
		t.Fatalf("the checker said:\n%s", out)
	}
	t.Logf("the checker said:\n%s", firstLines(out, 8))

	// A failed call's frame kept before acknowledged ones: say the last
	// acknowledged call of c-2 failed, and that a later one was
	// acknowledged after it.
	var last *op
	for _, o := range led.threads[ids[2]].ops {
		if o.ack != 0 && (last == nil || o.ack > last.ack) {
			last = o
		}
	}
	led.ev++
	last.ack, last.fail, last.reason = 0, led.ev, "eio"
	key = recordKey(rollout.KindTurnAborted, "t-later", rollout.TurnAborted{Reason: "later"})
	led.line("A " + ids[2] + " op-later " + key)
	led.line("K " + ids[2] + " op-later 0 0")
	errb.Reset()
	c = &checker{mode: "test", seed: 5, st: &stats{}, out: &errb}
	c.checkRollouts(mem, root, "", led, "", true)
	if !strings.Contains(errb.String(), "failed (eio)") {
		t.Fatalf("a failed frame kept before acknowledged ones went unnoticed:\n%s", errb.String())
	}
}

// frameOffsets maps each seq of a rollout to the offset of its frame.
func frameOffsets(t *testing.T, fsys vfs.FS, path string) map[uint64]int64 {
	t.Helper()
	src, size, closeFn, err := rollout.OpenRead(fsys, path)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	r, err := rollout.NewReader(src, size, rollout.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]int64{}
	for r.Next() {
		out[r.Record().Seq] = r.FrameOffset()
	}
	return out
}

func flipByte(t *testing.T, fsys vfs.FS, path string, off int64) {
	t.Helper()
	f, err := fsys.OpenRW(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
