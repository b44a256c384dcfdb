package recovery

import (
	"bytes"
	"testing"
)

// resumeBytes resumes data as fxThread from off (0: a full pass).
func resumeBytes(t *testing.T, data []byte, off int64) *State {
	t.Helper()
	st, err := Resume(ctx, bytes.NewReader(data), int64(len(data)), Options{ThreadID: fxThread, CheckpointOffset: off})
	if err != nil {
		t.Fatalf("resume (offset %d): %v", off, err)
	}
	return st
}
