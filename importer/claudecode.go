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

// Claude Code writes one JSON object a line. The fields read here (from
// public descriptions of the format: there is no official schema):
//
//	{"type": "user"|"assistant"|"summary"|"system"|..., "uuid", "parentUuid",
//	 "sessionId", "timestamp", "isSidechain", "isMeta",
//	 "message": {"role", "model", "content": "text" | [blocks], "usage": {...}},
//	 "summary"}
//
// Content blocks: {"type": "text", "text"}, {"type": "thinking",
// "thinking"}, {"type": "tool_use", "id", "name", "input"}, {"type":
// "tool_result", "tool_use_id", "content": "text" | [blocks], "is_error"}.
// A user line whose content is text (not only tool results) starts a turn;
// assistant lines and tool results belong to the turn open then.

type ccLine struct {
	Type       string          `json:"type"`
	UUID       string          `json:"uuid"`
	ParentUUID *string         `json:"parentUuid"`
	SessionID  string          `json:"sessionId"`
	Timestamp  string          `json:"timestamp"`
	IsMeta     bool            `json:"isMeta"`
	Sidechain  bool            `json:"isSidechain"`
	Summary    string          `json:"summary"`
	Message    json.RawMessage `json:"message"`
}

type ccMessage struct {
	Role    string          `json:"role"`
	Model   string          `json:"model"`
	Content json.RawMessage `json:"content"`
	Usage   *struct {
		Input       int64 `json:"input_tokens"`
		Output      int64 `json:"output_tokens"`
		CacheRead   int64 `json:"cache_read_input_tokens"`
		CacheCreate int64 `json:"cache_creation_input_tokens"`
	} `json:"usage"`
}

type ccBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// ReadClaudeCode reads one Claude Code session transcript.
func ReadClaudeCode(path string) (Session, error) { return readFile(path, readClaudeCode) }

func readClaudeCode(f io.Reader, path string) (Session, error) {
	s := Session{Format: "claude-code", SourcePath: path}
	sc := lineScanner(f)
	known := map[string]bool{} // uuids read
	var cur *Turn
	parsed, lines := 0, 0
	for n := 1; sc.Scan(); n++ {
		raw := strings.TrimSpace(sc.Text())
		if raw == "" {
			continue
		}
		lines++
		var l ccLine
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			s.skip(n, "not JSON: %v", err)
			continue
		}
		if l.Type == "" {
			s.skip(n, "no type")
			continue
		}
		parsed++
		if s.SourceID == "" && l.SessionID != "" {
			s.SourceID = l.SessionID
		}
		if l.SessionID != "" && l.SessionID != s.SourceID {
			s.skip(n, "of another session (%s)", l.SessionID)
			continue
		}
		at, _ := time.Parse(time.RFC3339Nano, l.Timestamp)
		if s.Created.IsZero() && !at.IsZero() {
			s.Created = at
		}
		if l.Sidechain && (l.Type == "user" || l.Type == "assistant") {
			// A subagent's line (its own transcript, or inline): subagent
			// threads are not imported yet, and its turns must not mix
			// with the session's.
			s.skip(n, "a subagent (sidechain) line: subagents are not imported yet")
			continue
		}
		switch l.Type {
		case "summary":
			if l.Summary != "" {
				s.Name = l.Summary
			}
			continue
		case "user", "assistant":
		case "system", "file-history-snapshot", "queue-operation", "progress":
			continue // not conversation
		default:
			s.skip(n, "record of unknown type %q", l.Type)
			continue
		}
		if l.ParentUUID != nil && *l.ParentUUID != "" && !known[*l.ParentUUID] && len(known) > 0 {
			s.skip(n, "its parent %s is not in the file", *l.ParentUUID)
			continue
		}
		if l.UUID != "" {
			known[l.UUID] = true
		}
		var m ccMessage
		if err := json.Unmarshal(l.Message, &m); err != nil {
			s.skip(n, "message not readable: %v", err)
			continue
		}
		text, blocks, err := ccContent(m.Content)
		if err != nil {
			s.skip(n, "content not readable: %v", err)
			continue
		}
		if l.Type == "user" && !l.IsMeta && (text != "" || hasText(blocks)) {
			// A prompt: a new turn.
			if cur != nil {
				s.Turns = append(s.Turns, *cur)
			}
			id := l.UUID
			if id == "" {
				id = fmt.Sprintf("line-%d", n)
			}
			cur = &Turn{ID: "t-" + id, Started: at, Ended: at, Line: n}
			if text == "" {
				text = joinText(blocks)
			}
			cur.Items = append(cur.Items, rollout.Item{ID: "u-" + id, Type: rollout.ItemUserMessage, Text: text})
			continue
		}
		if cur == nil {
			s.skip(n, "%s message before the first prompt", l.Type)
			continue
		}
		if !at.IsZero() {
			cur.Ended = at
		}
		if m.Model != "" {
			cur.Model = m.Model
		}
		if u := m.Usage; u != nil {
			cur.Usage.InputTokens += u.Input + u.CacheRead + u.CacheCreate
			cur.Usage.CachedInputTokens += u.CacheRead
			cur.Usage.OutputTokens += u.Output
			cur.Usage.TotalTokens += u.Input + u.CacheRead + u.CacheCreate + u.Output
		}
		if text != "" && l.Type == "assistant" {
			cur.Items = append(cur.Items, rollout.Item{ID: "a-" + l.UUID, Type: rollout.ItemAgentMessage, Text: text})
		}
		for i, b := range blocks {
			id := fmt.Sprintf("%s-%d", l.UUID, i)
			switch b.Type {
			case "text":
				if l.Type == "assistant" && b.Text != "" {
					cur.Items = append(cur.Items, rollout.Item{ID: "a-" + id, Type: rollout.ItemAgentMessage, Text: b.Text})
				}
			case "thinking":
				if b.Thinking != "" {
					cur.Items = append(cur.Items, rollout.Item{ID: "r-" + id, Type: rollout.ItemReasoning, Text: b.Thinking})
				}
			case "tool_use":
				cur.Items = append(cur.Items, rollout.Item{ID: "c-" + b.ID, Type: rollout.ItemToolCall, CallID: b.ID, Name: b.Name, Arguments: string(b.Input)})
			case "tool_result":
				out, _, _ := ccContent(b.Content)
				if out == "" {
					_, sub, _ := ccContent(b.Content)
					out = joinText(sub)
				}
				it := rollout.Item{ID: "o-" + b.ToolUseID, Type: rollout.ItemToolResult, CallID: b.ToolUseID, Text: out}
				if b.IsError {
					it.Status = rollout.ItemFailed
				}
				cur.Items = append(cur.Items, it)
			case "image", "document", "redacted_thinking", "server_tool_use", "web_search_tool_result":
				// Not text: nothing to keep but that it was there.
			default:
				s.skip(n, "content block of unknown type %q", b.Type)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return s, errors.Wrapf(err, "read %s", path)
	}
	if cur != nil {
		s.Turns = append(s.Turns, *cur)
	}
	if lines > 0 && (parsed == 0 || s.SourceID == "") {
		return s, errors.Wrapf(ErrWrongFormat, "%s is not a Claude Code transcript (no line has a type and a sessionId)", path)
	}
	if s.SourceID == "" {
		return s, errors.Wrapf(ErrWrongFormat, "%s is empty", path)
	}
	return s, nil
}

// ccContent reads a message's content: text, or blocks.
func ccContent(raw json.RawMessage) (string, []ccBlock, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, nil
	}
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return text, nil, nil
	}
	var blocks []ccBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", nil, err
	}
	return "", blocks, nil
}

func hasText(blocks []ccBlock) bool {
	for _, b := range blocks {
		if b.Type == "text" && b.Text != "" {
			return true
		}
	}
	return false
}

func joinText(blocks []ccBlock) string {
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" && b.Text != "" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}
