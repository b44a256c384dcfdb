package recovery

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// Benchmarks for issue 3, each beside its baseline in the same run (see
// docs/BENCHMARKS.md): replay against JSON decoding of the same history,
// and resume from a checkpoint near the end against a full replay.

// benchThread writes a thread of `turns` turns (a start frame with the user
// message, a commit frame with a tool call and result, an agent message,
// exact model history and turn_completed), with a post-turn checkpoint at
// turn cpAt (0: none). It returns the rollout bytes, the same records as
// JSONL, the record count and the checkpoint's frame offset.
func benchThread(b testing.TB, turns, cpAt int) (roll, jsonl []byte, records int, cpOff int64) {
	return benchThreadSync(b, turns, cpAt, rollout.SyncNever)
}

// benchThreadSync is benchThread written under the given sync policy
// (SyncAlways: each frame records the durable offset, so that damage
// before a later frame is mid-file damage, not a torn tail).
func benchThreadSync(b testing.TB, turns, cpAt int, sync rollout.SyncPolicy) (roll, jsonl []byte, records int, cpOff int64) {
	return benchThreadOpts(b, turns, cpAt, rollout.Options{Sync: sync})
}

// benchThreadOpts is benchThread written with the given writer options
// (CompressAbove: 64 compresses every frame).
func benchThreadOpts(b testing.TB, turns, cpAt int, wopts rollout.Options) (roll, jsonl []byte, records int, cpOff int64) {
	dir := b.TempDir()
	path := filepath.Join(dir, "bench.rollout")
	w, err := rollout.Create(ctx, path, rollout.ThreadOpened{ThreadID: "bench", WorkspaceID: "ws"}, wopts)
	if err != nil {
		b.Fatal(err)
	}
	var jl bytes.Buffer
	enc := json.NewEncoder(&jl)
	line := func(r rollout.Record, body any) {
		if err := enc.Encode(map[string]any{"seq": r.Seq, "kind": r.Kind, "time": r.Time, "turn": r.Turn, "body": body}); err != nil {
			b.Fatal(err)
		}
	}
	text := strings.Repeat("the handler reads config before the map is made. ", 4)
	records = 1
	for t := 1; t <= turns; t++ {
		id := fmt.Sprintf("t%d", t)
		user := rollout.Item{ID: id + "-u", Type: rollout.ItemUserMessage, Status: rollout.ItemCompleted, Text: "please look at " + id}
		call := rollout.Item{ID: id + "-c", Type: rollout.ItemToolCall, Status: rollout.ItemCompleted, CallID: id, Name: "shell", Arguments: `{"cmd":"cat main.go"}`}
		res := rollout.Item{ID: id + "-r", Type: rollout.ItemToolResult, Status: rollout.ItemCompleted, CallID: id, Text: text}
		msg := rollout.Item{ID: id + "-a", Type: rollout.ItemAgentMessage, Status: rollout.ItemCompleted, Text: text[:80]}
		hist := rollout.ModelHistory{Messages: [][]byte{[]byte(`{"role":"user","content":"please look at ` + id + `"}`), []byte(`{"role":"assistant","content":"` + text[:80] + `"}`)}}
		done := rollout.TurnCompleted{Status: rollout.TurnStatusCompleted, Usage: rollout.Usage{InputTokens: 900, OutputTokens: 40}}
		mk := func(kind rollout.Kind, body any) rollout.Record {
			r, err := rollout.NewRecord(kind, id, body)
			if err != nil {
				b.Fatal(err)
			}
			return r
		}
		start := []rollout.Record{mk(rollout.KindTurnStarted, rollout.TurnStarted{}), mk(rollout.KindItemAppended, user)}
		if _, err := w.Append(ctx, start, rollout.AppendOptions{}); err != nil {
			b.Fatal(err)
		}
		commit := []rollout.Record{mk(rollout.KindItemAppended, call), mk(rollout.KindItemAppended, res), mk(rollout.KindItemAppended, msg), mk(rollout.KindModelHistoryAppended, hist)}
		bodies := []any{rollout.TurnStarted{}, user, call, res, msg, hist}
		if t == cpAt {
			commit = append(commit, mk(rollout.KindCheckpoint, rollout.Checkpoint{ID: "cp", CoveredTurn: id, Trigger: rollout.TriggerPostTurn, ReplacementHistory: [][]byte{[]byte(`{"summary":"..."}`)}}))
			bodies = append(bodies, nil)
		}
		commit = append(commit, mk(rollout.KindTurnCompleted, done))
		bodies = append(bodies, done)
		res2, err := w.Append(ctx, commit, rollout.AppendOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if t == cpAt {
			cpOff = res2.Offset
		}
		for i, r := range append(start, commit...) {
			line(r, bodies[i])
		}
		records += len(start) + len(commit)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	roll, err = os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return roll, jl.Bytes(), records, cpOff
}

var replayCorpus struct {
	once        sync.Once
	roll, jsonl []byte
	records     int
}

// jsonRecord is a JSONL replay's line: the envelope, then the body decoded
// into its kind's struct, as a JSONL-based store would do.
type jsonRecord struct {
	Seq  uint64          `json:"seq"`
	Kind rollout.Kind    `json:"kind"`
	Time time.Time       `json:"time"`
	Turn string          `json:"turn"`
	Body json.RawMessage `json:"body"`
}

var jsonBodies = map[rollout.Kind]func() any{
	rollout.KindTurnStarted:          func() any { return new(rollout.TurnStarted) },
	rollout.KindItemAppended:         func() any { return new(rollout.Item) },
	rollout.KindModelHistoryAppended: func() any { return new(rollout.ModelHistory) },
	rollout.KindTurnCompleted:        func() any { return new(rollout.TurnCompleted) },
	rollout.KindCheckpoint:           func() any { return new(rollout.Checkpoint) },
}

// BenchmarkReplay: Resume (full pass: frames, envelopes, every body decoded,
// turns assembled, model history built) against decoding the same records
// from JSONL with encoding/json into the same typed structs (what a JSONL
// replay must do before it can assemble anything; it assembles nothing
// here, so the baseline is flattered).
func BenchmarkReplay(b *testing.B) {
	replayCorpus.once.Do(func() {
		replayCorpus.roll, replayCorpus.jsonl, replayCorpus.records, _ = benchThread(b, 20000, 0)
	})
	roll, jl, n := replayCorpus.roll, replayCorpus.jsonl, replayCorpus.records
	resume := func(b *testing.B) {
		b.SetBytes(int64(len(roll)))
		for i := 0; i < b.N; i++ {
			st, err := Resume(ctx, bytes.NewReader(roll), int64(len(roll)), Options{ThreadID: "bench"})
			if err != nil || len(st.Turns) != 20000 {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
	}
	b.Run("rollout-resume", resume)
	b.Run("rollout-resume-one-goroutine", func(b *testing.B) {
		// The same, with the reading not pipelined (as on one processor).
		old := pipelineMin
		pipelineMin = 1 << 62
		defer func() { pipelineMin = old }()
		resume(b)
	})
	b.Run("jsonl-encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(jl)))
		for i := 0; i < b.N; i++ {
			sc := bufio.NewScanner(bytes.NewReader(jl))
			sc.Buffer(make([]byte, 1<<20), 16<<20)
			for sc.Scan() {
				var rec jsonRecord
				if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
					b.Fatal(err)
				}
				if mk, ok := jsonBodies[rec.Kind]; ok && len(rec.Body) > 0 && string(rec.Body) != "null" {
					if err := json.Unmarshal(rec.Body, mk()); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		b.ReportMetric(float64((n-1)*b.N)/b.Elapsed().Seconds(), "records/s")
	})
}

// BenchmarkResume100kTurns: a thread of 100,000 turns with a checkpoint 100
// turns from the end. Resuming from the checkpoint's offset (what the
// projection makes possible) against a full replay of the same file, both
// in one run: time and bytes read, and their ratios.
func BenchmarkResume100kTurns(b *testing.B) {
	const turns = 100000
	roll, _, _, cpOff := benchThread(b, turns, turns-100)
	size := int64(len(roll))
	var fullT, fastT time.Duration
	var fullBytes, fastBytes int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		full, err := Resume(ctx, bytes.NewReader(roll), size, Options{ThreadID: "bench"})
		if err != nil || len(full.Turns) != turns {
			b.Fatal(err)
		}
		fullT += time.Since(start)
		fullBytes += full.Report.BytesRead
		start = time.Now()
		fast, err := Resume(ctx, bytes.NewReader(roll), size, Options{ThreadID: "bench", CheckpointOffset: cpOff})
		if err != nil || fast.Report.FromOffset != cpOff || len(fast.Turns) != 100 {
			b.Fatalf("%v %+v", err, fast.Report)
		}
		fastT += time.Since(start)
		fastBytes += fast.Report.BytesRead
	}
	b.StopTimer()
	after := size - cpOff
	b.ReportMetric(float64(size)/1e6, "file-MB")
	b.ReportMetric(float64(after)/1e3, "after-checkpoint-kB")
	b.ReportMetric(float64(fullT.Microseconds())/float64(b.N)/1e3, "full-ms")
	b.ReportMetric(float64(fastT.Microseconds())/float64(b.N)/1e3, "from-checkpoint-ms")
	b.ReportMetric(float64(fastBytes)/float64(b.N)/float64(after), "bytes-read/bytes-after")
	b.ReportMetric(float64(fastT)/float64(fullT), "time-ratio")
	b.ReportMetric(float64(fastBytes)/float64(fullBytes), "bytes-ratio")
	b.ReportMetric(0, "ns/op")
}
