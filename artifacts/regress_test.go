package artifacts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A terminal record is trusted for the thread it names: a record under
// terminals/a/ that says thread "b" (tampered, or copied between threads)
// makes the sweep remove thread b's terminal, which is still running.
func TestRegressSweepTrustsThreadNamedInRecord(t *testing.T) {
	s, c := newStore(t)
	if _, err := s.StartTerminal("b", "term", "server"); err != nil {
		t.Fatal(err)
	}
	ended := c.t.Add(-30 * 24 * time.Hour)
	code := 0
	forged := Terminal{ID: "term", Thread: "b", Command: "ls", Status: TerminalCompleted, StartedAt: ended, EndedAt: &ended, ExitCode: &code}
	b, _ := json.Marshal(forged)
	if err := os.MkdirAll(filepath.Join(s.root, TerminalsDir, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.root, TerminalsDir, "a", "term.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SweepTerminals(); err != nil {
		t.Logf("sweep: %v", err)
	}
	left, _ := s.Terminals("b")
	if len(left) != 1 || left[0].Status != TerminalRunning {
		t.Fatalf("thread b's running terminal was swept through another thread's record: %+v", left)
	}
}
