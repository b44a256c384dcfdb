package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// The hint printed when replay refuses a rollout says to inspect it with
// `rolloutctl verify`; verify then reports that rollout (a second header
// of another thread, a copy over another thread's file) with a non-zero
// exit, so a health check running verify catches a thread that cannot be
// resumed.
// From a review: verify said the file was "ok" and exited 0.
func TestVerifyFlagsARolloutResumeRefuses(t *testing.T) {
	ws, _ := fixtureWorkspace(t, "../../testdata/corrupt/rec-second-header-other-thread.rollout")
	_, errs, code := rolloutctl(t, "replay", "-w", ws, "fixture")
	if code != exitIdentity || !strings.Contains(errs, "verify") {
		t.Fatalf("replay: exit %d %s", code, errs)
	}
	out, _, code := rolloutctl(t, "verify", "-w", ws, "fixture")
	if code == 0 {
		t.Fatalf("verify says the rollout replay refuses is fine (exit 0):\n%s", out)
	}
}

// A compressed archived rollout that is a decompression bomb (a 15 KB
// .zst of zeros claiming 128 MiB) is refused by `verify` and
// `stats --verify` without being expanded: its first bytes are not the
// file magic.
// From a review: both expanded it into memory first (a 386 KB bomb took ~40 s and 4.2 GB RSS).
func TestColdBombIsNotExpanded(t *testing.T) {
	ws := smallDemo(t)
	const n = 128 << 20
	var buf bytes.Buffer
	enc, _ := zstd.NewWriter(&buf)
	enc.ResetContentSize(&buf, n)
	zero := make([]byte, 1<<20)
	for i := 0; i < n>>20; i++ {
		enc.Write(zero)
	}
	enc.Close()
	if err := os.WriteFile(filepath.Join(ws, ".craft/threads/archived", smallCold+".rollout.zst"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"verify", "--json"}, {"stats", "--json", "--verify"}} {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		_, errs, code := rolloutctl(t, append(args, "-w", ws)...)
		runtime.ReadMemStats(&m1)
		alloc := (m1.TotalAlloc - m0.TotalAlloc) >> 20
		if code > 1 {
			t.Fatalf("%v: exit %d %s", args, code, errs)
		}
		if alloc > 64 {
			t.Errorf("%v over a %d-byte .zst bomb allocated %d MiB: it was expanded before being refused", args, buf.Len(), alloc)
		}
	}
}
