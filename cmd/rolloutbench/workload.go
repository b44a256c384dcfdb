package main

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// maxToolResult keeps every tool result under the facade's default spill
// threshold (32 KiB), so every system keeps the same bytes in its log.
const maxToolResult = 24 << 10

// workload generates agent turns deterministically from a seed.
type workload struct {
	r     *rand.Rand
	words []string
	files []string
}

// newWorkload draws from seed; each use (appends, replay, list) has its own
// stream, so that what one scenario draws does not depend on which others
// ran.
func newWorkload(seed, stream uint64) *workload {
	vr := rand.New(rand.NewPCG(seed, 0x5eed))
	words := make([]string, 5000)
	for i := range words {
		var b strings.Builder
		for range 2 + vr.IntN(8) {
			b.WriteByte(byte('a' + vr.IntN(26)))
		}
		words[i] = b.String()
	}
	files := make([]string, 200)
	for i := range files {
		files[i] = fmt.Sprintf("%s/%s/%s.go", words[vr.IntN(300)], words[vr.IntN(1000)], words[vr.IntN(5000)])
	}
	return &workload{r: rand.New(rand.NewPCG(seed, stream)), words: words, files: files}
}

// word draws from a skewed (roughly Zipf) distribution: prose repeats its
// common words, which is what makes it compress as it does.
func (w *workload) word() string {
	f := w.r.Float64()
	return w.words[int(float64(len(w.words))*f*f*f)]
}

func (w *workload) sentence(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w.word())
	}
	return b.String()
}

func (w *workload) between(lo, hi int) int { return lo + w.r.IntN(hi-lo+1) }

// toolResultSize is log-normal around 1 KiB: most outputs are short, a few
// are whole files or long logs.
func (w *workload) toolResultSize() int {
	s := math.Exp(math.Log(1024) + 1.3*w.r.NormFloat64())
	return int(min(max(s, 40), maxToolResult))
}

// toolResult is code, grep output or a test log of about n bytes.
func (w *workload) toolResult(n int) string {
	var b strings.Builder
	style := w.r.IntN(3)
	for line := 1; b.Len() < n; line++ {
		switch style {
		case 0:
			fmt.Fprintf(&b, "%s%s := %s.%s(ctx, %s)\n", strings.Repeat("\t", 1+w.r.IntN(3)), w.word(), w.word(), w.word(), w.word())
			if w.r.IntN(4) == 0 {
				fmt.Fprintf(&b, "%sif err != nil {\n%s\treturn %s\n%s}\n", "\t", "\t", w.word(), "\t")
			}
		case 1:
			fmt.Fprintf(&b, "%s:%d: %s\n", w.files[w.r.IntN(len(w.files))], w.between(1, 900), w.sentence(w.between(3, 12)))
		default:
			fmt.Fprintf(&b, "=== RUN   Test%s\n--- PASS: Test%s (0.%02ds)\n", w.word(), w.word(), w.r.IntN(100))
		}
	}
	return b.String()[:n]
}

// turn is one agent turn: the user's input, what the agent did, the exact
// model history and the usage.
type turn struct {
	id      string
	model   string
	user    rollout.Item
	items   []rollout.Item // reasoning, tool calls and results, the final answer
	history [][]byte       // provider messages, JSON
	usage   rollout.Usage
}

func (w *workload) turn(i int) turn {
	t := turn{id: fmt.Sprintf("turn-%06d", i), model: "model-1"}
	text := w.sentence(w.between(5, 60))
	if w.r.IntN(10) == 0 {
		text += "\n\n" + w.toolResult(w.between(200, 2000)) // a pasted snippet
	}
	t.user = rollout.Item{ID: t.id + "-u", Type: rollout.ItemUserMessage, Status: rollout.ItemCompleted, Text: text}
	msg := func(m map[string]any) []byte {
		b, err := json.Marshal(m)
		if err != nil {
			panic(err) // maps of strings always marshal
		}
		return b
	}
	t.history = append(t.history, msg(map[string]any{"role": "user", "content": text}))
	for s := range w.between(1, 4) {
		if w.r.IntN(2) == 0 {
			t.items = append(t.items, rollout.Item{ID: fmt.Sprintf("%s-r%d", t.id, s), Type: rollout.ItemReasoning, Status: rollout.ItemCompleted, Text: w.sentence(w.between(20, 150))})
		}
		call := fmt.Sprintf("%s-c%d", t.id, s)
		name := [...]string{"shell", "read_file", "apply_patch", "grep", "list_dir"}[w.r.IntN(5)]
		args := string(msg(map[string]any{"path": w.files[w.r.IntN(len(w.files))], "query": w.sentence(w.between(1, 8))}))
		out := w.toolResult(w.toolResultSize())
		t.items = append(t.items,
			rollout.Item{ID: call + "-call", Type: rollout.ItemToolCall, Status: rollout.ItemCompleted, CallID: call, Name: name, Arguments: args},
			rollout.Item{ID: call + "-out", Type: rollout.ItemToolResult, Status: rollout.ItemCompleted, CallID: call, Text: out})
		t.history = append(t.history,
			msg(map[string]any{"role": "assistant", "tool_calls": []map[string]string{{"id": call, "name": name, "arguments": args}}}),
			msg(map[string]any{"role": "tool", "tool_call_id": call, "content": out}))
	}
	answer := w.sentence(w.between(10, 300))
	t.items = append(t.items, rollout.Item{ID: t.id + "-a", Type: rollout.ItemAgentMessage, Status: rollout.ItemCompleted, Text: answer})
	t.history = append(t.history, msg(map[string]any{"role": "assistant", "content": answer}))
	t.usage = rollout.Usage{InputTokens: int64(w.between(2000, 90000)), OutputTokens: int64(w.between(50, 3000))}
	t.usage.TotalTokens = t.usage.InputTokens + t.usage.OutputTokens
	return t
}

// records is the number of records a turn makes: turn_started, the user
// message, the items, the model history and turn_completed.
func (t *turn) records() int { return 4 + len(t.items) }

// itemStream flattens turns into the items an agent appends one by one:
// the user message, then everything the agent did.
func (w *workload) itemStream(n int) []rollout.Item {
	var out []rollout.Item
	for i := 0; len(out) < n; i++ {
		t := w.turn(i)
		out = append(out, t.user)
		out = append(out, t.items...)
	}
	return out[:n]
}

// bigThread is the thread replayed and archived by every system.
type bigThread struct {
	id      string
	title   string
	turns   []turn
	records int // the header included
}

func (w *workload) bigThread(turns int) *bigThread {
	bt := &bigThread{id: "big-thread", title: "replay benchmark thread", records: 1}
	for i := range turns {
		t := w.turn(i)
		bt.turns = append(bt.turns, t)
		bt.records += t.records()
	}
	return bt
}
