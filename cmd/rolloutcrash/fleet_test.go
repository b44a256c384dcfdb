package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// TestFleetAuditFails: the fleet mode's audit can fail. On the mode's own
// PostgreSQL (primary, synchronous standby, proxies), a thread is written
// through the fleet's log; then frames are inserted the way a broken
// fence would let them in, behind the library's back, and the audit must
// name each: two with the epoch of an owner that was since replaced, and
// the epoch going down along the thread; and a violation is told once.
func TestFleetAuditFails(t *testing.T) {
	t.Parallel()
	cfg := &config{dir: t.TempDir(), lease: time.Second}
	pg, err := startFleetPG(ctx, cfg)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer pg.close()
	l, err := fleet.Open(ctx, pg.dsn(pg.proxies[0].Addr(), "audit"), fleet.Options{Host: "a", LeaseTTL: time.Second})
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer l.Close()
	th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: "x", WorkspaceID: l.WorkspaceID()})
	if err != nil {
		t.Fatalf("%+v", err)
	}
	rec, _ := rollout.NewRecord(rollout.KindMetadataUpdated, "", rollout.MetadataUpdated{Labels: []string{"a"}})
	if _, err := th.Append(ctx, []rollout.Record{rec}, rollout.AppendOptions{}); err != nil {
		t.Fatalf("%+v", err)
	}

	c := cfg.checker("fleet", 0)
	c.audit(ctx, l)
	if c.st.Failures != 0 {
		t.Fatalf("the audit fails a fleet written by the library: %d failures", c.st.Failures)
	}

	var errb bytes.Buffer
	c = cfg.checker("fleet", 1)
	c.out = &errb
	// An owner whose epoch was replaced (a zombie past a takeover).
	exec := func(sql string) {
		t.Helper()
		if _, err := l.Pool().Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`INSERT INTO rolloutdb.frames (tid, off, seq, epoch, data)
		SELECT tid, 1000000, 100, epoch - 1, '\x00' FROM rolloutdb.threads WHERE id = 'x'`)
	exec(`INSERT INTO rolloutdb.frames (tid, off, seq, epoch, data)
		SELECT tid, 2000000, 101, epoch - 1, '\x00' FROM rolloutdb.threads WHERE id = 'x'`)
	c.audit(ctx, l)
	out := errb.String()
	for _, want := range []string{"offset 1000000 (seq 100) accepted from a fenced epoch", "offset 2000000 (seq 101) accepted from a fenced epoch",
		"2 frames follow a frame of a later epoch"} {
		if !strings.Contains(out, want) {
			t.Errorf("the audit does not say %q:\n%s", want, out)
		}
	}
	if c.st.Failures != 3 {
		t.Errorf("%d failures, want 3:\n%s", c.st.Failures, out)
	}
	// Told once: the next iteration's audit reports only what is new
	// (the epochs along the thread are still wrong).
	c = cfg.checker("fleet", 2)
	errb.Reset()
	c.out = &errb
	c.audit(ctx, l)
	if c.st.Failures != 1 || strings.Contains(errb.String(), "accepted from") {
		t.Errorf("the second audit: %d failures:\n%s", c.st.Failures, errb.String())
	}
}

// TestFleetMode runs the fleet mode briefly through the command line: one
// iteration of each fault, nothing lost, no check failed.
func TestFleetMode(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	args := []string{"--fleet", "--json", "--dir", t.TempDir(), "--large", "0", "--seed", "4", "--iterations", "5", "--continue", "5"}
	code := run(ctx, args, &out, &errb)
	var sum summary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatalf("exit %d; the output is not one JSON document: %v\n%s\nstderr:\n%s", code, err, out.String(), errb.String())
	}
	m := sum.Modes["fleet"]
	if code != 0 || m == nil || m.Acknowledged == 0 || sum.Lost != 0 || sum.Failures != 0 {
		t.Fatalf("exit %d: %s\nstderr:\n%s", code, out.String(), errb.String())
	}
	t.Logf("fleet: %d iterations, %d acknowledged, counters %v", m.Iterations, m.Acknowledged, m.Counters)
}
