package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/rolloutdb/rolloutdb/internal/pgtest/pgtesting"
)

// The read commands on a fleet workspace: a demo made there is listed,
// verified and counted from its frames; fleet push copies a local
// workspace in, again copying nothing, and its threads are then listed.
func TestFleetWorkspaceCommands(t *testing.T) {
	dsn := pgtesting.Database(t)
	if _, errs, code := rolloutctl(t, "demo", "-w", dsn, "--threads", "2", "--turns", "4"); code != 0 {
		t.Fatalf("demo: %d %s", code, errs)
	}
	if out, errs, code := rolloutctl(t, "verify", "-w", dsn); code != 0 || !strings.Contains(out, "0 damaged") {
		t.Fatalf("verify: %d\n%s\n%s", code, out, errs)
	}
	out, errs, code := rolloutctl(t, "stats", "-w", dsn, "--verify", "--json")
	if code != 0 {
		t.Fatalf("stats: %d %s", code, errs)
	}
	var st statsJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if st.Threads.Total < 2 || st.Bytes.Rollouts <= 0 || st.Bytes.Rollouts != st.Bytes.Active+st.Bytes.ArchivedPlain {
		t.Fatalf("stats --verify of a fleet: %+v %+v", st.Threads, st.Bytes)
	}

	local := smallDemo(t)
	to := pgtesting.Database(t)
	if out, errs, code := rolloutctl(t, "fleet", "push", "-w", local, "--to", to); code != 0 || !strings.Contains(out, "0 refused") {
		t.Fatalf("push: %d\n%s\n%s", code, out, errs)
	}
	if out, errs, code := rolloutctl(t, "fleet", "push", "-w", local, "--to", to); code != 0 || !strings.Contains(out, "0 new, 0 frame(s) copied") {
		t.Fatalf("second push: %d\n%s\n%s", code, out, errs)
	}
	lo, _, _ := rolloutctl(t, "list", "-w", local, "--all")
	fo, errs, code := rolloutctl(t, "list", "-w", to, "--all")
	if code != 0 || strings.Count(fo, "\n") != strings.Count(lo, "\n") {
		t.Fatalf("the fleet lists\n%s\nthe local workspace\n%s\n%s", fo, lo, errs)
	}
}
