package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// smallDemo is a small demo workspace: 3 user threads (the last archived
// and compressed) and a subagent of the first.
func smallDemo(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	if _, errs, code := rolloutctl(t, "demo", "-w", ws, "--threads", "3", "--turns", "4", "--seed", "9"); code != 0 {
		t.Fatalf("demo: %s", errs)
	}
	return ws
}

// The threads of smallDemo.
const (
	smallRoot  = "demo-9-00-fix-nil-map"
	smallSub   = smallRoot + "-sub"
	smallOther = "demo-9-01-add-retry"
	smallCold  = "demo-9-02-speed-up-tests" // archived and compressed by the demo
)

// holdWriter holds a thread's writer lock in this process, as a live host
// would (it conflicts like another process).
func holdWriter(t *testing.T, path, id string) {
	t.Helper()
	w, _, err := rollout.Open(context.Background(), path, id, rollout.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ctlWithin runs rolloutctl as a subprocess and kills it after d.
func ctlWithin(t *testing.T, d time.Duration, args ...string) (result, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), envMain+"=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		return result{out.String(), errb.String(), -1}, false
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run rolloutctl %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}, true
}
