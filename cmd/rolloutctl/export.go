package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/spf13/cobra"
)

// exportItem is an item as exported: with --artifacts, the full content of
// the artifact it references (checked against its size and digest).
type exportItem struct {
	rollout.Item
	Content string `json:"content,omitempty"`
}

type exportTurn struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	// Model and Metadata are the turn's settings (an imported Codex
	// turn's cwd, effort, approval and sandbox policy).
	Model    string            `json:"model,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Usage    rollout.Usage     `json:"usage"`
	Items    []exportItem      `json:"items"`
}

// exportDoc is the shape of export --format json. Turns is streamed, not
// held: export fills the other fields and writes each turn as it is made.
type exportDoc struct {
	Thread   rollout.ThreadOpened `json:"thread"`
	Status   string               `json:"status"` // active or archived
	Metadata recovery.Metadata    `json:"metadata"`
	Turns    []exportTurn         `json:"turns"`
	Report   recovery.Report      `json:"report"`
}

func newExportCmd(g *globals) *cobra.Command {
	var format string
	var withArtifacts bool
	cmd := &cobra.Command{
		Use:   "export THREAD",
		Short: "Print a thread's visible turns as JSON, JSON lines or Markdown",
		Long: `export prints the visible turns of a thread (after rollbacks, the way a
host resumes it) without taking its lock or writing anything:

  --format json      one document: {"thread", "status", "metadata", "turns", "report"}
  --format jsonl     one line per thread, turn and item: {"kind": "thread"|"turn"|"item", ...}
  --format markdown  a transcript for people

A spilled tool output keeps its preview; --artifacts puts the full content
in its place (read from tool-results/ and checked against its digest). A
missing or damaged artifact is said in the output and on stderr, and makes
the exit code 1.`,
		Args: cobra.ExactArgs(1),
		PreRunE: func(*cobra.Command, []string) error {
			switch format {
			case "json", "jsonl", "markdown", "md":
				return nil
			}
			return usageError("--format must be json, jsonl or markdown, not %q", format)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			// The turns only, located: each is read back from the
			// rollout when it is written.
			st, loc, f, done, err := resumeLocated(cmd.Context(), g, args[0], recovery.Options{})
			if err != nil {
				return err
			}
			defer done()
			doc := exportDoc{Thread: st.Header, Status: "active", Metadata: st.Metadata, Report: reportJSON(st.Report)}
			if f.Archived {
				doc.Status = "archived"
			}
			arts := artifacts.New(dataDir(g.workspace), artifacts.Options{})
			var bad []string
			var readErr error // the first item that could not be read back
			// Each turn is read back for the output when it is written,
			// and the thread's state lets go of it: the output is streamed.
			turn := func(i int) exportTurn {
				t := st.Turns[i]
				st.Turns[i] = nil
				items, err := loc.Items(t)
				if err != nil && readErr == nil {
					readErr = err
				}
				et := exportTurn{ID: t.ID, Status: t.Status, Model: t.Model, Metadata: t.Metadata, Usage: t.Usage, Items: make([]exportItem, 0, len(items))}
				for _, it := range items {
					ei := exportItem{Item: it}
					if withArtifacts && it.Ref != nil {
						b, err := arts.Read(artifacts.Ref{Path: it.Ref.Path, Size: it.Ref.Size, SHA256: it.Ref.SHA256})
						if err != nil {
							bad = append(bad, fmt.Sprintf("item %s of turn %s: %v", it.ID, t.ID, err))
							ei.Content = fmt.Sprintf("[artifact %s unreadable: %v]", it.Ref.Path, err)
						} else {
							ei.Content = string(b)
						}
					}
					et.Items = append(et.Items, ei)
				}
				return et
			}
			n := len(st.Turns)
			switch format {
			case "json":
				js := newJSONStream(g.stdout)
				js.field("thread", doc.Thread)
				js.field("status", doc.Status)
				js.field("metadata", doc.Metadata)
				js.array("turns", n, func(i int) any { return turn(i) })
				js.field("report", doc.Report)
				err = js.close()
			case "jsonl":
				err = exportJSONL(g.stdout, doc, n, turn)
			default:
				err = exportMarkdown(g.stdout, doc, n, turn)
			}
			if err = errors.CombineErrors(readErr, err); err != nil {
				return err
			}
			for _, b := range bad {
				fmt.Fprintln(g.stderr, "warning:", b)
			}
			if len(bad) > 0 {
				return errors.WithHint(errors.Newf("%d artifact(s) of %s could not be read", len(bad), f.ID),
					"rolloutctl gc --dry-run lists what the workspace's artifacts hold")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "markdown", "json, jsonl or markdown")
	cmd.Flags().BoolVar(&withArtifacts, "artifacts", false, "inline the full content of spilled tool outputs")
	return cmd
}

func exportJSONL(w io.Writer, doc exportDoc, n int, turn func(int) exportTurn) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(map[string]any{"kind": "thread", "thread": doc.Thread, "status": doc.Status, "metadata": doc.Metadata}); err != nil {
		return err
	}
	for i := range n {
		t := turn(i)
		if err := enc.Encode(map[string]any{"kind": "turn", "turn": t.ID, "index": i + 1, "status": t.Status, "usage": t.Usage}); err != nil {
			return err
		}
		for _, it := range t.Items {
			if err := enc.Encode(map[string]any{"kind": "item", "turn": t.ID, "item": it}); err != nil {
				return err
			}
		}
	}
	return bw.Flush()
}

func exportMarkdown(w io.Writer, doc exportDoc, n int, turn func(int) exportTurn) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	var b strings.Builder
	title := doc.Thread.ThreadID
	if doc.Metadata.Name != "" {
		title = doc.Metadata.Name + " (" + doc.Thread.ThreadID + ")"
	}
	fmt.Fprintf(&b, "# %s\n\n", mdEscape(title))
	h := doc.Thread
	fmt.Fprintf(&b, "- status: %s\n- source: %s", doc.Status, h.Source.Kind)
	if h.Source.Parent != "" {
		fmt.Fprintf(&b, " of `%s`", h.Source.Parent)
	}
	fmt.Fprintf(&b, "\n- created: %s by %s\n- workspace: `%s`\n", h.Created.Format(time.RFC3339), mdEscape(h.Host), h.WorkspaceID)
	if h.ForkedFrom != nil {
		fmt.Fprintf(&b, "- forked from: `%s` at turn `%s`\n", h.ForkedFrom.Thread, h.ForkedFrom.Turn)
	}
	if len(doc.Metadata.Labels) > 0 {
		fmt.Fprintf(&b, "- labels: %s\n", mdEscape(strings.Join(doc.Metadata.Labels, ", ")))
	}
	if n := len(doc.Report.Skipped); n > 0 {
		fmt.Fprintf(&b, "- damaged records skipped: %d (run `rolloutctl verify`)\n", n)
	}
	for i := range n {
		t := turn(i)
		fmt.Fprintf(&b, "\n## Turn %d · %s", i+1, t.Status)
		if t.Usage.TotalTokens > 0 {
			fmt.Fprintf(&b, " · %d tokens", t.Usage.TotalTokens)
		}
		b.WriteString("\n")
		if len(t.Metadata) > 0 { // an imported turn's settings (the model alone is not news)
			b.WriteString("\n- settings: " + mdEscape(turnSettings(t.Model, t.Metadata)) + "\n")
		}
		for _, it := range t.Items {
			writeMarkdownItem(&b, it)
		}
		// A turn at a time: the transcript is never whole in memory.
		if _, err := bw.WriteString(b.String()); err != nil {
			return err
		}
		b.Reset()
	}
	if _, err := bw.WriteString(b.String()); err != nil {
		return err
	}
	return bw.Flush()
}

func writeMarkdownItem(b *strings.Builder, it exportItem) {
	switch it.Type {
	case rollout.ItemUserMessage:
		fmt.Fprintf(b, "\n**User**\n\n%s\n", closeFences(it.Text))
	case rollout.ItemAgentMessage:
		fmt.Fprintf(b, "\n**Agent**\n\n%s\n", closeFences(it.Text))
	case rollout.ItemReasoning:
		b.WriteString("\n<details><summary>Reasoning</summary>\n\n")
		b.WriteString(fenced("text", it.Text))
		b.WriteString("</details>\n")
	case rollout.ItemToolCall:
		fmt.Fprintf(b, "\n**Tool call** `%s` (%s)\n\n", it.Name, it.CallID)
		lang := "text"
		if json.Valid([]byte(it.Arguments)) {
			lang = "json"
		}
		b.WriteString(fenced(lang, it.Arguments))
	case rollout.ItemToolResult:
		fmt.Fprintf(b, "\n**Tool result** (%s)\n\n", it.CallID)
		text := it.Text
		if it.Content != "" {
			text = it.Content
		}
		b.WriteString(fenced("text", text))
		if it.Ref != nil && it.Content == "" {
			fmt.Fprintf(b, "\nFull output: `%s` (%d bytes; `--artifacts` inlines it)\n", filepath.ToSlash(it.Ref.Path), it.Ref.Size)
		}
	default:
		fmt.Fprintf(b, "\n**%s**", strings.ReplaceAll(string(it.Type), "_", " "))
		if it.Name != "" {
			fmt.Fprintf(b, " `%s`", it.Name)
		}
		b.WriteString("\n\n")
		if it.Text != "" {
			b.WriteString(fenced("text", it.Text))
		}
	}
}

// closeFences closes a code fence a message leaves open (a reply cut off
// at the token limit inside a code block), so that it cannot swallow the
// rest of the transcript. Fences are CommonMark's: a line of three or more
// backticks or tildes opens one; a line of at least as many of the same
// character, and nothing else, closes it.
func closeFences(s string) string {
	var open string
	for _, line := range strings.Split(s, "\n") {
		l := strings.TrimSpace(line)
		for _, c := range []string{"`", "~"} {
			n := len(l) - len(strings.TrimLeft(l, c))
			switch {
			case n < 3:
				continue
			case open == "":
				open = strings.Repeat(c, n)
			case strings.HasPrefix(open, c) && n >= len(open) && strings.Trim(l, c) == "":
				open = ""
			}
			break
		}
	}
	if open != "" {
		return strings.TrimRight(s, "\n") + "\n" + open
	}
	return s
}

// fenced puts s in a code fence longer than any run of backticks in it, so
// the content can never close the fence.
func fenced(lang, s string) string {
	longest, run := 0, 0
	for _, r := range s {
		if r == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", max(3, longest+1))
	return fence + lang + "\n" + strings.TrimRight(s, "\n") + "\n" + fence + "\n"
}

// mdEscape keeps a one-line value from starting Markdown structure.
func mdEscape(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.NewReplacer("*", `\*`, "_", `\_`, "`", "\\`", "[", `\[`, "<", "&lt;").Replace(s)
}
