package rolloutdb_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// words is a vocabulary with a skewed use, as in the state.db benchmarks.
var words = func() []string {
	r := rand.New(rand.NewPCG(7, 7))
	out := make([]string, 5000)
	for i := range out {
		var b strings.Builder
		for range 3 + r.IntN(6) {
			b.WriteByte(byte('a' + r.IntN(26)))
		}
		out[i] = b.String()
	}
	return out
}()

func sentence(r *rand.Rand, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[int(float64(len(words))*r.Float64()*r.Float64()*r.Float64())])
	}
	return b.String()
}

// bigThread writes a thread of n turns: a user message, reasoning, a tool
// call and its result, an agent message, the exact model history (the
// provider messages, JSON) and the commit.
func bigThread(b *testing.B, db *rolloutdb.DB, id string, n int) {
	b.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: id})
	if err != nil {
		b.Fatal(err)
	}
	defer th.Close()
	for i := range n {
		user := sentence(r, 20)
		tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: user, Model: "model-1"})
		if err != nil {
			b.Fatal(err)
		}
		args := `{"cmd":"` + sentence(r, 4) + `"}`
		out, answer := sentence(r, 60), sentence(r, 40)
		hist, _ := json.Marshal([]map[string]string{{"role": "user", "content": user}, {"role": "assistant", "tool": "shell", "arguments": args},
			{"role": "tool", "content": out}, {"role": "assistant", "content": answer}})
		if _, err := tu.Commit(ctx, rolloutdb.Commit{
			Items: []rollout.Item{
				{Type: rollout.ItemReasoning, Text: sentence(r, 30)},
				{Type: rollout.ItemToolCall, CallID: fmt.Sprint("c", i), Name: "shell", Arguments: args},
				{Type: rollout.ItemToolResult, CallID: fmt.Sprint("c", i), Text: out},
				{Type: rollout.ItemAgentMessage, Text: answer},
			},
			ModelHistory: [][]byte{hist},
			Usage:        rollout.Usage{InputTokens: 1200, OutputTokens: 300, TotalTokens: 1500},
		}); err != nil {
			b.Fatal(err)
		}
	}
}

// jsonlSize is the same history as JSON lines, one record a line with its
// body as JSON: what an agent tool writing JSONL keeps.
func jsonlSize(b *testing.B, path string) int64 {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	r, err := rollout.NewReader(f, fi.Size(), rollout.ReaderOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for r.Next() {
		rec := r.Record()
		body, err := rec.DecodeBody()
		if err != nil {
			b.Fatal(err)
		}
		line, _ := json.Marshal(map[string]any{"seq": rec.Seq, "kind": rec.Kind, "time": rec.Time, "turn": rec.Turn, "body": body})
		total += int64(len(line)) + 1
	}
	return total
}

// BenchmarkArchiveRestore10kTurns: archive and restore a thread of 10,000
// turns, compress it cold, restore it from cold; and the archived sizes
// against the same history as JSONL.
func BenchmarkArchiveRestore10kTurns(b *testing.B) {
	dir := b.TempDir()
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{Sync: rollout.SyncNever})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	bigThread(b, db, "big", 10000)
	active := filepath.Join(db.DataDir(), "threads/active/big.rollout")
	plain, _ := os.Stat(active)
	jsonl := jsonlSize(b, active)
	// The projector applies the 80,000 records written above first: that
	// is the cost of writing them, not of archiving.
	if err := rolloutdb.StateForTest(db).Flush(ctx); err != nil {
		b.Fatal(err)
	}
	var archive, restore, compress, restoreCold time.Duration
	var coldSize int64
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := db.Archive(ctx, "big", ""); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := db.Restore(ctx, "big"); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := db.Archive(ctx, "big", ""); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		if _, err := db.CompressArchived(ctx, rolloutdb.CompressOptions{}); err != nil {
			b.Fatal(err)
		}
		t4 := time.Now()
		fi, err := os.Stat(filepath.Join(db.DataDir(), "threads/archived/big.rollout.zst"))
		if err != nil {
			b.Fatal(err)
		}
		coldSize = fi.Size()
		if _, err := db.Restore(ctx, "big"); err != nil {
			b.Fatal(err)
		}
		t5 := time.Now()
		archive += t1.Sub(t0)
		restore += t2.Sub(t1)
		compress += t4.Sub(t3)
		restoreCold += t5.Sub(t4)
	}
	n := float64(b.N)
	b.ReportMetric(float64(archive.Milliseconds())/n, "archive-ms")
	b.ReportMetric(float64(restore.Milliseconds())/n, "restore-ms")
	b.ReportMetric(float64(compress.Milliseconds())/n, "compress-ms")
	b.ReportMetric(float64(restoreCold.Milliseconds())/n, "restore-cold-ms")
	b.ReportMetric(float64(plain.Size())/1e6, "rollout-MB")
	b.ReportMetric(float64(coldSize)/1e6, "cold-MB")
	b.ReportMetric(float64(jsonl)/1e6, "jsonl-MB")
	b.ReportMetric(float64(coldSize)/float64(jsonl), "cold/jsonl")
	b.ReportMetric(float64(plain.Size())/float64(jsonl), "rollout/jsonl")
}
