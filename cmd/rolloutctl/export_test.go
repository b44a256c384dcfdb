package main

import (
	"context"
	"strings"
	"testing"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// `export --format markdown` of an agent message cut off inside a code
// block (a reply truncated at max tokens: "```go" and no closing fence)
// leaves no fence open: the later "## Turn N" headings, user messages and
// tool calls do not render as code. (Tool output is fenced safely by
// fenced(); message text must not leave a fence open either.)
// From a review: the message was written as is and its fence swallowed the rest.
func TestExportMarkdownMessageCannotSwallowLaterTurns(t *testing.T) {
	ws := t.TempDir()
	ctx := context.Background()
	db, err := rolloutdb.Open(ctx, ws, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "md"})
	if err != nil {
		t.Fatal(err)
	}
	for i, answer := range []string{"Here is the fix:\n\n```go\nfunc load() {\n\tm := map[string]int{}", "Done."} {
		turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "question " + string(rune('1'+i))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := turn.Commit(ctx, rolloutdb.Commit{Items: []rollout.Item{{Type: rollout.ItemAgentMessage, Text: answer}}}); err != nil {
			t.Fatal(err)
		}
	}
	th.Close()
	db.Close()
	out, errs, code := rolloutctl(t, "export", "-w", ws, "md", "--format", "markdown")
	if code != 0 {
		t.Fatalf("export: %s", errs)
	}
	// CommonMark fences: a line of >= 3 backticks opens; one of at least
	// as many backticks and nothing else closes.
	open := 0
	for _, line := range strings.Split(out, "\n") {
		l := strings.TrimSpace(line)
		n := len(l) - len(strings.TrimLeft(l, "`"))
		switch {
		case open == 0 && n >= 3:
			open = n
		case open > 0 && n >= open && strings.Trim(l, "`") == "":
			open = 0
		case open > 0 && strings.HasPrefix(line, "## Turn 2"):
			t.Fatalf("turn 2's heading is inside a code block opened by turn 1's message:\n%s", out)
		}
	}
}
