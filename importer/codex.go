package importer

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// Codex (the OpenAI CLI) writes ~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl.
// The fields read here (from public descriptions of its protocol types):
//
//	{"timestamp", "type": "session_meta"|"response_item"|"event_msg"|"turn_context"|"compacted", "payload": {...}}
//
// session_meta: {"id", "timestamp", "cwd"}. turn_context: {"model"}.
// response_item: {"type": "message", "role", "content": [{"type":
// "input_text"|"output_text", "text"}]}, {"type": "reasoning", "summary":
// [{"text"}]}, {"type": "function_call"|"custom_tool_call", "name",
// "arguments"|"input", "call_id"}, {"type":
// "function_call_output"|"custom_tool_call_output", "call_id", "output"},
// {"type": "local_shell_call", "call_id", "action"}. event_msg:
// {"type": "token_count", "info": {"last_token_usage": {...}}}; its
// user_message and agent_message repeat response items and are not read.
// Older files have no wrapper: a first line {"id", "timestamp"}, then
// response items themselves. Each response item is also kept as the turn's
// exact model history; a compacted line ({"message", "replacement_history"})
// is a checkpoint after the turn before it. A subagent is a session of its
// own whose session_meta source is {"subagent": {"thread_spawn":
// {"parent_thread_id"}}}: it is imported as that thread's subagent.

type cxLine struct {
	Timestamp string          `json:"timestamp"`
	Type      string          `json:"type"`
	Payload   json.RawMessage `json:"payload"`
	// The unwrapped (older) format's first line.
	ID string `json:"id"`
}

type cxItem struct {
	Type    string `json:"type"`
	Role    string `json:"role"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	Summary []struct {
		Text string `json:"text"`
	} `json:"summary"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Input     string          `json:"input"`
	CallID    string          `json:"call_id"`
	Output    json.RawMessage `json:"output"`
	Action    json.RawMessage `json:"action"`
	// compacted
	Message            string            `json:"message"`
	ReplacementHistory []json.RawMessage `json:"replacement_history"`
	// Source (session_meta) names a subagent's parent thread
	// ({"subagent": {"thread_spawn": {"parent_thread_id"}}}; some versions
	// also write parent_thread_id beside it).
	Source       json.RawMessage `json:"source"`
	ParentThread string          `json:"parent_thread_id"`
	// session_meta, turn_context, event_msg
	ID    string `json:"id"`
	Model string `json:"model"`
	Info  *struct {
		Last *struct {
			Input     int64 `json:"input_tokens"`
			Cached    int64 `json:"cached_input_tokens"`
			Output    int64 `json:"output_tokens"`
			Reasoning int64 `json:"reasoning_output_tokens"`
			Total     int64 `json:"total_tokens"`
		} `json:"last_token_usage"`
	} `json:"info"`
}

// ReadCodex reads one Codex session rollout.
func ReadCodex(path string) (Session, error) { return readFile(path, readCodex) }

func readCodex(f io.Reader, path string) (Session, error) {
	s := Session{Format: "codex", SourcePath: path}
	sc := lineScanner(f)
	var cur *Turn
	model := ""
	for n := 1; sc.Scan(); n++ {
		raw := strings.TrimSpace(sc.Text())
		if raw == "" {
			continue
		}
		var l cxLine
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			s.skip(n, "not JSON: %v", err)
			continue
		}
		at := sourceTime(l.Timestamp)
		payload := l.Payload
		kind := l.Type
		if len(payload) == 0 {
			// The older format: the line is the item (or the first line).
			if l.ID != "" && s.SourceID == "" && l.Type == "" {
				s.SourceID, s.Created = l.ID, at
				continue
			}
			payload, kind = json.RawMessage(raw), "response_item"
		}
		var it cxItem
		if err := json.Unmarshal(payload, &it); err != nil {
			s.skip(n, "payload not readable: %v", err)
			continue
		}
		switch kind {
		case "session_meta":
			if s.SourceID == "" {
				s.SourceID = it.ID
				if s.Created = at; at.IsZero() {
					s.Created = time.Now()
				}
				s.Parent = cxParent(it)
				if s.Parent == s.SourceID {
					s.skip(n, "the session names itself as its parent: imported without a parent")
					s.Parent = ""
				}
			}
			continue
		case "turn_context":
			if it.Model != "" {
				model = it.Model
				if cur != nil {
					cur.Model = model
				}
			}
			continue
		case "event_msg":
			if (it.Type == "task_complete" || it.Type == "turn_aborted") && cur != nil {
				cur.ended = true // the turn's end
			}
			if it.Type == "token_count" && cur != nil && it.Info != nil && it.Info.Last != nil {
				u := it.Info.Last
				cur.Usage.InputTokens += u.Input
				cur.Usage.CachedInputTokens += u.Cached
				cur.Usage.OutputTokens += u.Output
				cur.Usage.ReasoningTokens += u.Reasoning
				cur.Usage.TotalTokens += u.Total
			}
			continue
		case "compacted":
			// Codex's compaction: a checkpoint after the turn before it.
			if cur == nil {
				s.skip(n, "a compaction before the first prompt")
				continue
			}
			cp := &Checkpoint{ID: fmt.Sprintf("k-l%d", n), Line: n}
			for _, h := range it.ReplacementHistory {
				cp.History = append(cp.History, append([]byte(nil), h...))
			}
			if len(cp.History) == 0 && it.Message != "" {
				// Older files keep only the summary: as the user message
				// Codex itself makes of it.
				msg, _ := json.Marshal(map[string]any{"type": "message", "role": "user",
					"content": []map[string]string{{"type": "input_text", "text": it.Message}}})
				cp.History = [][]byte{msg}
			}
			if len(cp.History) == 0 {
				s.skip(n, "a compaction with no summary")
				continue
			}
			cur.Checkpoint = cp
			continue
		case "response_item":
		default:
			s.skip(n, "record of unknown type %q", kind)
			continue
		}
		if s.SourceID == "" {
			s.skip(n, "before the session's metadata")
			continue
		}
		id := fmt.Sprintf("l%d", n)
		if it.Type == "message" && it.Role == "user" && cxText(it) != "" && !cxBoilerplate(cxText(it)) {
			if cur != nil {
				s.Turns = append(s.Turns, *cur)
			}
			cur = &Turn{ID: "t-" + id, Started: at, Ended: at, Model: model, Line: n}
		}
		if cur != nil && it.Type != "" {
			// Every response item is what the model saw or said; after a
			// compaction inside the turn, also the checkpoint's (it stands
			// for the whole turn).
			cur.ModelHistory = append(cur.ModelHistory, append([]byte(nil), payload...))
			if cur.Checkpoint != nil {
				cur.Checkpoint.History = append(cur.Checkpoint.History, append([]byte(nil), payload...))
			}
		}
		switch it.Type {
		case "message":
			text := cxText(it)
			switch {
			case it.Role == "user" && text != "" && !cxBoilerplate(text):
				cur.Items = append(cur.Items, rollout.Item{ID: "u-" + id, Type: rollout.ItemUserMessage, Text: text})
				continue
			case it.Role == "assistant" && cur != nil && text != "":
				cur.Items = append(cur.Items, rollout.Item{ID: "a-" + id, Type: rollout.ItemAgentMessage, Text: text})
			}
		case "reasoning":
			var parts []string
			for _, p := range it.Summary {
				parts = append(parts, p.Text)
			}
			if text := strings.Join(parts, "\n"); cur != nil && text != "" {
				cur.Items = append(cur.Items, rollout.Item{ID: "r-" + id, Type: rollout.ItemReasoning, Text: text})
			}
		case "function_call", "custom_tool_call", "local_shell_call":
			if cur == nil {
				s.skip(n, "a tool call before the first prompt")
				continue
			}
			args := it.Arguments
			if args == "" {
				args = it.Input
			}
			name := it.Name
			if it.Type == "local_shell_call" {
				name, args = "shell", string(it.Action)
			}
			cur.Items = append(cur.Items, rollout.Item{ID: "c-" + it.CallID, Type: rollout.ItemToolCall, CallID: it.CallID, Name: name, Arguments: args})
		case "function_call_output", "custom_tool_call_output":
			if cur == nil {
				s.skip(n, "a tool result before the first prompt")
				continue
			}
			cur.Items = append(cur.Items, rollout.Item{ID: "o-" + it.CallID, Type: rollout.ItemToolResult, CallID: it.CallID, Text: cxOutput(it.Output)})
		case "":
			if !strings.Contains(raw, `"record_type"`) { // the older format's state lines
				s.skip(n, "an item without a type")
			}
			continue
		default:
			// web_search_call, ghost snapshots, ...: nothing to keep.
			continue
		}
		if cur != nil && at.After(cur.Ended) {
			cur.Ended = at
		}
	}
	if err := sc.Err(); err != nil {
		return s, errors.Wrapf(err, "read %s", path)
	}
	if cur != nil {
		s.Turns = append(s.Turns, *cur)
	}
	s.finish(sc)
	if s.SourceID == "" {
		return s, errors.Wrapf(ErrWrongFormat, "%s is not a Codex session (no session_meta, no id line)", path)
	}
	return s, nil
}

func cxText(it cxItem) string {
	var parts []string
	for _, c := range it.Content {
		if (c.Type == "input_text" || c.Type == "output_text" || c.Type == "text") && c.Text != "" {
			parts = append(parts, c.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// cxBoilerplate reports whether text is what Codex sends as a user message
// of its own (the environment, the instructions), not a prompt.
func cxBoilerplate(text string) bool {
	for _, p := range []string{"<environment_context>", "<user_instructions>", "# AGENTS.md", "<INSTRUCTIONS>"} {
		if strings.HasPrefix(strings.TrimSpace(text), p) {
			return true
		}
	}
	return false
}

// cxOutput is a tool's output: a string, or {"output"|"content": ...}.
func cxOutput(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Output  string `json:"output"`
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &o) == nil && (o.Output != "" || o.Content != "") {
		return o.Output + o.Content
	}
	return string(raw)
}

// cxParent is the parent thread a subagent session names, if any.
func cxParent(it cxItem) string {
	var src struct {
		SubAgent json.RawMessage `json:"subagent"`
	}
	if json.Unmarshal(it.Source, &src) == nil && len(src.SubAgent) > 0 {
		var sub struct {
			Spawn *struct {
				Parent string `json:"parent_thread_id"`
			} `json:"thread_spawn"`
		}
		if json.Unmarshal(src.SubAgent, &sub) == nil && sub.Spawn != nil && sub.Spawn.Parent != "" {
			return sub.Spawn.Parent
		}
	}
	return it.ParentThread
}
