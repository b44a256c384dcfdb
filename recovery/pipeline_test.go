package recovery

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// resumeBothWays resumes data with the records applied on one goroutine
// and again with the pipelined drain, whatever the size, and fails unless
// both say the same: the same state or the same error.
func resumeBothWays(t testing.TB, data []byte, opts Options) (*State, error) {
	t.Helper()
	old := pipelineMin
	defer func() { pipelineMin = old }()
	pipelineMin = 1 << 62
	one, err1 := Resume(ctx, bytes.NewReader(data), int64(len(data)), opts)
	pipelineMin = -1
	two, err2 := Resume(ctx, bytes.NewReader(data), int64(len(data)), opts)
	// CheckIdentity pipelined says what Resume says (the fuzz target and
	// checkResume compare them on one goroutine).
	cerr2 := CheckIdentity(ctx, bytes.NewReader(data), int64(len(data)), opts)
	if fmt.Sprint(err1) != fmt.Sprint(err2) || fmt.Sprint(err2) != fmt.Sprint(cerr2) {
		t.Fatalf("one goroutine: %v; pipelined: %v (identity check %v)", err1, err2, cerr2)
	}
	if !reflect.DeepEqual(one, two) {
		t.Fatalf("the pipelined replay differs:\none goroutine %+v\npipelined    %+v", one, two)
	}
	return one, err1
}

// Every fixture (damage of every kind, identity conflicts, repairs)
// replays the same through the pipelined drain.
func TestPipelinedDrainMatchesOnFixtures(t *testing.T) {
	paths, _ := globFixtures()
	if len(paths) < 20 {
		t.Fatalf("%d fixtures", len(paths))
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		resumeBothWays(t, data, Options{ThreadID: fxThread, WorkspaceID: fxWorkspace})
	}
}

// A thread of many batches with damage spread through it: the damage is
// applied between the same records, and tied to the same turns, both ways.
func TestPipelinedDrainMatchesWithDamage(t *testing.T) {
	t.Run("uncompressed", func(t *testing.T) { testPipelinedDamage(t, -1) })
	// Every frame compressed: the reader's prefetcher decompresses them
	// ahead, up to the first damage, and the reader the rest.
	t.Run("compressed", func(t *testing.T) { testPipelinedDamage(t, 64) })
}

func testPipelinedDamage(t *testing.T, compressAbove int) {
	roll, _, _, _ := benchThreadOpts(t, 1500, 0, rollout.Options{Sync: rollout.SyncAlways, CompressAbove: compressAbove})
	damaged := bytes.Clone(roll)
	for _, at := range []int{len(roll) / 7, len(roll) / 3, len(roll) / 2, len(roll) - len(roll)/5} {
		damaged[at] ^= 0xff
	}
	st, err := resumeBothWays(t, damaged, Options{ThreadID: "bench"})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Report.Skipped) == 0 || len(st.Turns) < 1490 {
		t.Fatalf("%d skipped, %d turns", len(st.Report.Skipped), len(st.Turns))
	}
	// A torn tail is reported both ways too.
	if st, _ = resumeBothWays(t, roll[:len(roll)-7], Options{ThreadID: "bench"}); !st.Report.TornTail {
		t.Fatal("torn tail not reported")
	}
	resumeBothWays(t, roll, Options{ThreadID: "bench", SkipHistory: true})
}

// An identity conflict late in a long rollout stops the reading goroutine:
// Resume returns the error, and no goroutine is left reading the file.
func TestPipelinedDrainStopsOnConflict(t *testing.T) {
	roll, _, _, _ := benchThread(t, 3000, 0)
	path := t.TempDir() + "/conflict.rollout"
	if err := os.WriteFile(path, roll, 0o644); err != nil {
		t.Fatal(err)
	}
	w, _, err := rollout.Open(ctx, path, "bench", rollout.Options{Sync: rollout.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	intruder, _ := rollout.NewRecord(rollout.KindThreadOpened, "", rollout.ThreadOpened{ThreadID: "intruder", WorkspaceID: "ws"})
	if _, err := w.Append(ctx, []rollout.Record{intruder}, rollout.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	// Many batches after the conflict, so the reader is still going when
	// the applier stops.
	text := strings.Repeat("x", 1000)
	for i := range 2000 {
		id := fmt.Sprintf("late%d", i)
		start, _ := rollout.NewRecord(rollout.KindTurnStarted, id, rollout.TurnStarted{})
		item, _ := rollout.NewRecord(rollout.KindItemAppended, id, rollout.Item{ID: id, Type: rollout.ItemUserMessage, Text: text})
		if _, err := w.Append(ctx, []rollout.Record{start, item}, rollout.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	data, _ := os.ReadFile(path)
	before := runtime.NumGoroutine()
	if _, err := resumeBothWays(t, data, Options{ThreadID: "bench"}); !errors.Is(err, ErrIdentity) {
		t.Fatalf("got %v, want an identity conflict", err)
	}
	waitGoroutines(t, before)

	// A cancelled context stops it too.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	old := pipelineMin
	pipelineMin = -1
	defer func() { pipelineMin = old }()
	if _, err := Resume(cctx, bytes.NewReader(roll), int64(len(roll)), Options{ThreadID: "bench"}); err == nil {
		t.Fatal("a cancelled resume succeeded")
	}
	waitGoroutines(t, before)
}

func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before", runtime.NumGoroutine(), want)
		}
		time.Sleep(time.Millisecond)
	}
}
