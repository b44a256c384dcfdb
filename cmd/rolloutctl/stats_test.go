package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// `stats --json` with one archived compressed rollout that is truncated
// counts the thread once in damage.unreadable, in threads.total as in
// threads.active + threads.archived, and in archived_compressed.
// From a review: it was in neither active nor archived, and archived_compressed dropped to 0.
func TestStatsCountsAnUnreadableArchivedThread(t *testing.T) {
	ws := smallDemo(t)
	p := filepath.Join(ws, ".craft/threads/archived", smallCold+".rollout.zst")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, b[:len(b)/2], 0o644)
	out, errs, code := rolloutctl(t, "stats", "-w", ws, "--json", "--verify")
	var st statsJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 {
		t.Fatalf("stats: %d %v %s", code, err, errs)
	}
	if len(st.Damage.Unreadable) != 1 {
		t.Fatalf("unreadable: %v", st.Damage.Unreadable)
	}
	if th := st.Threads; th.Total != th.Active+th.Archived || th.ArchivedCold != 1 {
		t.Fatalf("stats threads %+v: total != active + archived, or the compressed archive not counted", th)
	}
}
