package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/spf13/cobra"
)

// The demo is a simulated host: it drives the library the way an agent host
// does (turns of user input, reasoning, tool calls and results, agent
// messages, exact model history, compaction checkpoints, a subagent) so that
// a new user has a realistic workspace to look at in one command.

var demoTopics = []struct{ name, ask, file string }{
	{"fix-nil-map", "The server panics with 'assignment to entry in nil map' on startup. Fix it.", "server/config.go"},
	{"add-retry", "Add retries with backoff to the HTTP client used by the sync job.", "sync/client.go"},
	{"speed-up-tests", "The test suite takes 9 minutes. Find the slow tests and make them faster.", "store/store_test.go"},
	{"explain-auth", "Explain how session tokens are validated, with the relevant files.", "auth/session.go"},
	{"rename-api", "Rename the Fetch API to Load everywhere, keeping the old name as a deprecated alias.", "api/fetch.go"},
}

type demoOptions struct {
	threads, turns int
	seed           uint64
}

func newDemoCmd(g *globals) *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Make a sample workspace by running a simulated agent host",
		Long: `demo runs a simulated host against the library: several threads with many
turns of user and agent messages, reasoning, tool calls and results, exact
model history, compaction checkpoints and a subagent thread. The same seed
makes the same content. It ends with a look at what it made.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.threads < 1 || o.threads > 1000 || o.turns < 1 || o.turns > 100000 {
				return usageError("--threads must be 1..1000 and --turns 1..100000")
			}
			made, err := runDemo(cmd.Context(), g.workspace, o)
			if err != nil {
				return err
			}
			return printDemo(g, made)
		},
	}
	cmd.Flags().IntVar(&o.threads, "threads", 5, "threads to make (a subagent thread comes on top)")
	cmd.Flags().IntVar(&o.turns, "turns", 40, "turns per thread")
	cmd.Flags().Uint64Var(&o.seed, "seed", 1, "seed: the same seed makes the same content")
	return cmd
}

type demoThread struct {
	ID, Topic, Source string
	Turns             int
}

func runDemo(ctx context.Context, workspace string, o demoOptions) ([]demoThread, error) {
	// Never into a workspace holding threads, active or archived: the
	// demo archives and compresses, and must touch only what it made.
	if files, err := findRollouts(workspace, nil); err == nil && len(files) > 0 {
		return nil, errors.WithHint(errors.Newf("%s already holds %d thread(s)", workspace, len(files)),
			"run the demo in a new directory: rolloutctl demo -w ./demo2")
	}
	db, err := rolloutdb.Open(ctx, workspace, rolloutdb.Options{Host: "rolloutctl-demo"})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rng := rand.New(rand.NewPCG(o.seed, 0x5eed))
	var made []demoThread
	for i := 0; i < o.threads; i++ {
		topic := demoTopics[i%len(demoTopics)]
		id := fmt.Sprintf("demo-%d-%02d-%s", o.seed, i, topic.name)
		th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: id, Source: rollout.Source{Kind: rollout.SourceUser, Client: "demo"}})
		if err != nil {
			return nil, err
		}
		if err := demoTurns(ctx, th, rng, topic.ask, topic.file, o.turns); err != nil {
			return nil, err
		}
		made = append(made, demoThread{ID: id, Topic: topic.name, Source: rollout.SourceUser, Turns: o.turns})
		if i == 0 {
			// The first thread spawns a subagent to investigate one file.
			sub := id + "-sub"
			st, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: sub, Source: rollout.Source{Kind: rollout.SourceSubagent, Parent: id, Root: id, Depth: 1}})
			if err != nil {
				return nil, err
			}
			// The edge is business state: open while the subagent works.
			if err := db.Business().OpenEdge(ctx, id, sub); err != nil {
				return nil, err
			}
			if _, err := db.Business().AddGoal(ctx, sub, "Report every place a map is written in "+topic.file); err != nil {
				return nil, err
			}
			subTurns := max(1, o.turns/4)
			if err := demoTurns(ctx, st, rng, "Read "+topic.file+" and report every place a map is written.", topic.file, subTurns); err != nil {
				return nil, err
			}
			if err := st.Close(); err != nil {
				return nil, err
			}
			made = append(made, demoThread{ID: sub, Topic: topic.name + " (subagent)", Source: rollout.SourceSubagent, Turns: subTurns})
		}
		if i == 0 {
			// A background terminal: its record and capped log under
			// terminals/<thread>/.
			arts := db.Artifacts()
			if _, err := arts.StartTerminal(id, "term-1", "go test ./..."); err != nil {
				return nil, err
			}
			for l := 0; l < 20; l++ {
				if _, err := arts.AppendLog(id, "term-1", []byte(fmt.Sprintf("ok  \texample.com/pkg%d\t0.%03ds\n", l, rng.IntN(999)))); err != nil {
					return nil, err
				}
			}
			if _, err := arts.EndTerminal(id, "term-1", 0); err != nil {
				return nil, err
			}
		}
		if err := th.Close(); err != nil {
			return nil, err
		}
	}
	if o.threads >= 3 {
		// The last thread is done with: archived (rollouts move to
		// threads/archived/, new turns are refused until restored).
		last := made[len(made)-1]
		if _, err := db.Archive(ctx, last.ID, "demo: done"); err != nil {
			return nil, err
		}
		// And compressed cold, as a host's housekeeping would do with old
		// archived threads (readers read both forms).
		// (A fleet's log keeps archived threads as they are.)
		if _, err := db.CompressArchived(ctx, rolloutdb.CompressOptions{}); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			return nil, err
		}
	}
	return made, nil
}

var demoWords = strings.Fields(`the handler reads config before the map is made so the first write panics
we should initialise it in the constructor and add a test that starts the server with an empty file
the retry loop needs jitter and a cap and the context deadline must stop it
tests spend most time in fixtures that rebuild the database for every case share one per package`)

func sentence(rng *rand.Rand, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = demoWords[rng.IntN(len(demoWords))]
	}
	return strings.ToUpper(w[0][:1]) + strings.Join(w, " ")[1:] + "."
}

// demoTurns writes turns the way a host does: start with the user's input,
// stream reasoning and tool calls as they happen, commit the final items
// with the exact model history; every tenth turn carries a post-turn
// checkpoint, and one turn in a while is aborted by the user.
func demoTurns(ctx context.Context, th *rolloutdb.Thread, rng *rand.Rand, ask, file string, turns int) error {
	var tokens int64
	for t := 0; t < turns; t++ {
		input := ask
		if t > 0 {
			input = sentence(rng, 6+rng.IntN(10))
		}
		turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: input, Model: "demo-model-1"})
		if err != nil {
			return err
		}
		if _, err := turn.Add(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: sentence(rng, 20+rng.IntN(30))}); err != nil {
			return err
		}
		if t > 0 && t%17 == 0 {
			if _, err := turn.Cancel(ctx, "user interrupted"); err != nil {
				return err
			}
			continue
		}
		callID := fmt.Sprintf("call-%d", t)
		args, _ := json.Marshal(map[string]string{"cmd": "sed -n 1,80p " + file})
		if _, err := turn.Add(ctx, rollout.Item{Type: rollout.ItemToolCall, CallID: callID, Name: "shell", Arguments: string(args)}); err != nil {
			return err
		}
		var out strings.Builder
		lines := 5 + rng.IntN(40)
		if t%13 == 5 {
			lines = 2000 // a big test log: spilled to tool-results/, the item keeps its head and tail
		}
		for l := 0; l < lines; l++ {
			fmt.Fprintf(&out, "%4d\t%s\n", l+1, sentence(rng, 4+rng.IntN(8)))
		}
		answer := sentence(rng, 15+rng.IntN(40))
		msgs := [][]byte{
			mustJSON(map[string]string{"role": "user", "content": input}),
			mustJSON(map[string]any{"role": "assistant", "tool_calls": []map[string]string{{"id": callID, "name": "shell", "arguments": string(args)}}}),
			mustJSON(map[string]string{"role": "tool", "tool_call_id": callID, "content": out.String()}),
			mustJSON(map[string]string{"role": "assistant", "content": answer}),
		}
		in, outTok := int64(800+rng.IntN(4000)), int64(50+rng.IntN(600))
		tokens += in + outTok
		c := rolloutdb.Commit{
			Items: []rollout.Item{
				{Type: rollout.ItemToolResult, CallID: callID, Name: "shell", Text: out.String()},
				{Type: rollout.ItemAgentMessage, Text: answer},
			},
			ModelHistory: msgs,
			Usage:        rollout.Usage{InputTokens: in, OutputTokens: outTok, TotalTokens: in + outTok},
		}
		if t > 0 && t%10 == 0 {
			c.Checkpoint = &rollout.Checkpoint{
				ReplacementHistory: [][]byte{mustJSON(map[string]string{"role": "system", "content": "Summary so far: " + sentence(rng, 40)})},
				TokensBefore:       tokens, TokensAfter: tokens / 10,
			}
			tokens /= 10
		}
		if _, err := turn.Commit(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // static shapes
	}
	return b
}

func printDemo(g *globals, made []demoThread) error {
	w := g.stdout
	fmt.Fprintf(w, "Made a demo workspace in %s:\n\n", g.workspace)
	fmt.Fprintf(w, "  %-28s %-9s %-20s %6s %8s %9s %7s\n", "THREAD", "SOURCE", "STATUS", "TURNS", "RECORDS", "BYTES", "CHKPTS")
	files, err := findRollouts(g.workspace, nil)
	if err != nil {
		return err
	}
	var total int64
	for _, f := range files {
		res, err := scan(f, false, nil)
		if err != nil {
			return err
		}
		src := "?"
		if res.Header != nil {
			src = res.Header.Source.Kind
		}
		status := "active"
		switch {
		case f.Cold:
			status = "archived, compressed"
		case f.Archived:
			status = "archived"
		}
		total += res.Bytes
		fmt.Fprintf(w, "  %-28s %-9s %-20s %6d %8d %9d %7d\n", f.ID, src, status, res.Turns, res.Records, res.Bytes, len(res.Checkpoints))
	}
	fmt.Fprintf(w, "\n%d threads, %s of rollouts under %s\n", len(files), human(total), dataDir(g.workspace))
	if len(made) > 1 && made[1].Source == rollout.SourceSubagent {
		fmt.Fprintf(w, "%s is a subagent of %s (an open edge and a goal in state.db)\n", made[1].ID, made[0].ID)
	}
	root := dataDir(g.workspace)
	fmt.Fprintf(w, "Large tool outputs spilled to %s (%s); a background terminal's log under %s\n",
		filepath.Join(root, artifacts.ToolResultsDir), human(treeSize(filepath.Join(root, artifacts.ToolResultsDir))), filepath.Join(root, artifacts.TerminalsDir))
	self := "rolloutctl"
	if strings.Contains(os.Args[0], "go-build") {
		self = "go run ./cmd/rolloutctl" // started with go run
	}
	ws := g.workspace
	fmt.Fprintf(w, "\nNext, try:\n")
	for _, c := range []string{
		"list -w " + ws + " --all",
		"show -w " + ws + " " + made[0].ID + "   # header, counts, subagent edge, goal",
		"replay -w " + ws + " " + made[0].ID + "   # resume it as a host would",
		"export -w " + ws + " " + made[0].ID + " --format markdown | less",
		"search -w " + ws + " 'nil map'",
		"verify -w " + ws,
		"stats -w " + ws,
	} {
		fmt.Fprintf(w, "  %s %s\n", self, c)
	}
	return nil
}
