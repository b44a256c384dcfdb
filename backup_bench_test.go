package rolloutdb_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// BenchmarkBackup: a workspace of ROLLOUTDB_BENCH_BACKUP_MB megabytes of
// rollouts (default 256; the figure in docs/BENCHMARKS.md is 1024), 64
// threads of 4 KiB items, backed up into a fresh directory while one host
// goroutine appends 1 KiB items (SyncAlways). Reported: the backup's
// MB/s, and the append rate during it against the rate just before it, in
// the same run.
func BenchmarkBackup(b *testing.B) {
	mb := 256
	if v, err := strconv.Atoi(os.Getenv("ROLLOUTDB_BENCH_BACKUP_MB")); err == nil && v > 0 {
		mb = v
	}
	dir := b.TempDir()
	root := filepath.Join(dir, ".craft")
	if err := os.MkdirAll(filepath.Join(root, rollout.ActiveDir), 0o755); err != nil {
		b.Fatal(err)
	}
	// The rollouts, written directly (no projection yet: Open builds it).
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := db.Close(); err != nil { // it wrote workspace.json
		b.Fatal(err)
	}
	wsID := wsIDOf(b, root)
	r := rand.New(rand.NewPCG(1, 2))
	raw := make([]byte, 3072)
	perThread := int64(mb) << 20 / 64
	for t := range 64 {
		tid := fmt.Sprintf("bk-%02d", t)
		path, _ := rollout.ActivePath(root, tid)
		w, err := rollout.Create(ctx, path, rollout.ThreadOpened{ThreadID: tid, WorkspaceID: wsID, Source: rollout.Source{Kind: rollout.SourceUser}, Created: time.Now()},
			rollout.Options{Sync: rollout.SyncNever, CompressAbove: -1})
		if err != nil {
			b.Fatal(err)
		}
		for turn := 0; w.End() < perThread; turn++ {
			tn := fmt.Sprintf("t%d", turn)
			recs := []rollout.Record{mustRec(b, rollout.KindTurnStarted, tn, rollout.TurnStarted{Model: "m"})}
			for range 8 {
				for i := range raw {
					raw[i] = byte(r.Uint32())
				}
				recs = append(recs, mustRec(b, rollout.KindItemAppended, tn, rollout.Item{ID: rollout.NewID(), Type: rollout.ItemToolResult, Status: rollout.ItemCompleted, Text: base64.StdEncoding.EncodeToString(raw)}))
			}
			recs = append(recs, mustRec(b, rollout.KindTurnCompleted, tn, rollout.TurnCompleted{Status: rollout.TurnStatusCompleted}))
			if _, err := w.Append(ctx, recs, rollout.AppendOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		w.Close()
	}
	db, err = rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if err := db.Settle(ctx); err != nil {
		b.Fatal(err)
	}
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "host"})
	if err != nil {
		b.Fatal(err)
	}
	turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "go"})
	if err != nil {
		b.Fatal(err)
	}
	item := rollout.Item{Type: rollout.ItemReasoning, Text: string(make([]byte, 1024))}
	appendFor := func(stop func() bool) float64 {
		n, t0 := 0, time.Now()
		for !stop() {
			if _, err := turn.Add(ctx, item); err != nil {
				b.Fatal(err)
			}
			n++
		}
		return float64(n) / time.Since(t0).Seconds()
	}
	b.ResetTimer()
	var mbps, during, before float64
	for i := range b.N {
		deadline := time.Now().Add(3 * time.Second)
		before += appendFor(func() bool { return time.Now().After(deadline) })
		done := make(chan rolloutdb.BackupReport, 1)
		dest := filepath.Join(b.TempDir(), fmt.Sprint("b", i))
		go func() {
			rep, err := db.Backup(ctx, dest, rolloutdb.BackupOptions{})
			if err != nil {
				b.Error(err)
			}
			done <- rep
		}()
		var rep rolloutdb.BackupReport
		finished := false
		during += appendFor(func() bool {
			select {
			case rep = <-done:
				finished = true
			default:
			}
			return finished
		})
		mbps += float64(rep.BytesCopied) / rep.Elapsed.Seconds() / 1e6
	}
	b.ReportMetric(mbps/float64(b.N), "backup-MB/s")
	b.ReportMetric(before/float64(b.N), "appends/s-before")
	b.ReportMetric(during/before, "x-appends-during")
}

func mustRec(b *testing.B, kind rollout.Kind, turn string, body any) rollout.Record {
	r, err := rollout.NewRecord(kind, turn, body)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

func wsIDOf(b *testing.B, root string) string {
	data, err := os.ReadFile(filepath.Join(root, "workspace.json"))
	if err != nil {
		b.Fatal(err)
	}
	var ws struct {
		ID string `json:"workspace_id"`
	}
	if err := json.Unmarshal(data, &ws); err != nil {
		b.Fatal(err)
	}
	return ws.ID
}
