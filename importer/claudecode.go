package importer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// Claude Code writes one JSON object a line. The fields read here (from
// public descriptions of the format: there is no official schema):
//
//	{"type": "user"|"assistant"|"summary"|"system"|..., "uuid", "parentUuid",
//	 "sessionId", "timestamp", "isSidechain", "agentId", "isMeta",
//	 "isCompactSummary", "subtype", "compactMetadata": {"preTokens", "postTokens"},
//	 "message": {"role", "model", "content": "text" | [blocks], "usage": {...}},
//	 "summary"}
//
// A compaction is a system line of subtype "compact_boundary" and then a
// user line with isCompactSummary whose message is the summary: a
// checkpoint after the turn before it, whose replacement history is that
// message. Each user and assistant line's "message" is also kept as the
// turn's exact model history (the Anthropic messages as Claude Code
// stored them). Sidechain lines are a subagent's: grouped by agentId into
// subagent sessions (source id "<session>/<agent>").
//
// Content blocks: {"type": "text", "text"}, {"type": "thinking",
// "thinking"}, {"type": "tool_use", "id", "name", "input"}, {"type":
// "tool_result", "tool_use_id", "content": "text" | [blocks], "is_error"}.
// A user line whose content is text (not only tool results) starts a turn;
// assistant lines and tool results belong to the turn open then.

type ccLine struct {
	Type       string          `json:"type"`
	Subtype    string          `json:"subtype"`
	UUID       string          `json:"uuid"`
	ParentUUID *string         `json:"parentUuid"`
	SessionID  string          `json:"sessionId"`
	AgentID    string          `json:"agentId"`
	Timestamp  string          `json:"timestamp"`
	IsMeta     bool            `json:"isMeta"`
	Sidechain  bool            `json:"isSidechain"`
	Compact    bool            `json:"isCompactSummary"`
	Summary    string          `json:"summary"`
	Message    json.RawMessage `json:"message"`
	CompactMD  *struct {
		PreTokens  int64 `json:"preTokens"`
		PostTokens int64 `json:"postTokens"`
	} `json:"compactMetadata"`
}

type ccMessage struct {
	ID         string          `json:"id"`
	Role       string          `json:"role"`
	Model      string          `json:"model"`
	StopReason string          `json:"stop_reason"`
	Content    json.RawMessage `json:"content"`
	Usage      *ccUsage        `json:"usage"`
}

type ccUsage struct {
	Input       int64 `json:"input_tokens"`
	Output      int64 `json:"output_tokens"`
	CacheRead   int64 `json:"cache_read_input_tokens"`
	CacheCreate int64 `json:"cache_creation_input_tokens"`
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

// ReadClaudeCode reads one Claude Code session transcript, with its
// subagents: the sidechain lines in the file (older versions), and the
// files <session id>/subagents/agent-<id>.jsonl beside it (newer ones; the
// internal agent-acompact-* files are not conversation and are left out).
func ReadClaudeCode(path string) (Session, error) {
	s, err := readFile(path, readClaudeCode)
	if err != nil {
		return s, err
	}
	// The directory is named by the session id, which is the file's name
	// as Claude Code writes it (a name, not a pattern: no glob).
	var files []string
	for _, name := range []string{strings.TrimSuffix(filepath.Base(path), ".jsonl"), s.SourceID} {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
			continue
		}
		dir := filepath.Join(filepath.Dir(path), name, "subagents")
		ents, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			s.Skips = append(s.Skips, Skip{Reason: fmt.Sprintf("subagents directory %s not read: %v", dir, err)})
		}
		for _, e := range ents {
			if n := e.Name(); e.Type().IsRegular() && strings.HasPrefix(n, "agent-") && strings.HasSuffix(n, ".jsonl") {
				files = append(files, filepath.Join(dir, n))
			}
		}
		if len(files) > 0 {
			break
		}
	}
	sort.Strings(files)
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "agent-"), ".jsonl")
		if strings.HasPrefix(name, "acompact") {
			continue
		}
		sub, err := readFile(f, func(r io.Reader, p string) (Session, error) { return readClaudeCodeAgent(r, p, s.SourceID, name) })
		if err != nil {
			s.Skips = append(s.Skips, Skip{Line: 0, Reason: fmt.Sprintf("subagent file %s not read: %v", f, err)})
			continue
		}
		s.Subagents = append(s.Subagents, sub)
	}
	return s, nil
}

// ccReader builds one session (the main one, or a subagent's) from its
// lines.
type ccReader struct {
	s       *Session
	known   map[string]bool // uuids read
	cur     *Turn
	compact *Checkpoint        // a compaction boundary whose summary line is to come
	counted map[string]ccUsage // usage counted per message id (Claude Code writes a message once per content block)
	damaged bool               // the line before could not be read: a missing parent may be it
}

func newCCReader(s *Session) *ccReader { return &ccReader{s: s, known: map[string]bool{}} }

func readClaudeCode(f io.Reader, path string) (Session, error) {
	s := Session{Format: "claude-code", SourcePath: path}
	main := newCCReader(&s)
	agents := map[string]*ccReader{} // inline sidechains by agent id
	var order []string
	sc := lineScanner(f)
	parsed, lines := 0, 0
	for n := 1; sc.Scan(); n++ {
		raw := strings.TrimSpace(sc.Text())
		if raw == "" {
			if k := len(sc.long); k > 0 && sc.long[k-1] == n { // a line too long to read
				main.damaged = true
			}
			continue
		}
		lines++
		var l ccLine
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			s.skip(n, "not JSON: %v", err)
			main.damaged = true
			for _, r := range agents {
				r.damaged = true
			}
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
		if l.Sidechain {
			// A subagent's line, inline: its own thread.
			key := l.AgentID
			if key == "" {
				key = "sidechain"
			}
			r := agents[key]
			if r == nil {
				sub := &Session{Format: "claude-code", SourcePath: path, Parent: s.SourceID}
				r = newCCReader(sub)
				agents[key] = r
				order = append(order, key)
			}
			r.line(n, l)
			continue
		}
		main.line(n, l)
	}
	if err := sc.Err(); err != nil {
		return s, errors.Wrapf(err, "read %s", path)
	}
	main.end()
	s.finish(sc)
	if lines > 0 && (parsed == 0 || s.SourceID == "") {
		return s, errors.Wrapf(ErrWrongFormat, "%s is not a Claude Code transcript (no line has a type and a sessionId)", path)
	}
	if s.SourceID == "" {
		return s, errors.Wrapf(ErrWrongFormat, "%s is empty", path)
	}
	for _, key := range order {
		r := agents[key]
		r.end()
		r.s.SourceID, r.s.Parent = s.SourceID+"/"+key, s.SourceID
		s.Subagents = append(s.Subagents, *r.s)
	}
	return s, nil
}

// readClaudeCodeAgent reads a subagent's own file: every line is a
// sidechain line of the parent session.
func readClaudeCodeAgent(f io.Reader, path, parent, agent string) (Session, error) {
	s := Session{Format: "claude-code", SourcePath: path, SourceID: parent + "/" + agent, Parent: parent}
	r := newCCReader(&s)
	sc := lineScanner(f)
	for n := 1; sc.Scan(); n++ {
		raw := strings.TrimSpace(sc.Text())
		if raw == "" {
			if k := len(sc.long); k > 0 && sc.long[k-1] == n {
				r.damaged = true
			}
			continue
		}
		var l ccLine
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			s.skip(n, "not JSON: %v", err)
			r.damaged = true
			continue
		}
		if l.Type == "" {
			s.skip(n, "no type")
			continue
		}
		if l.SessionID != "" && l.SessionID != parent {
			s.skip(n, "of another session (%s)", l.SessionID)
			continue
		}
		r.line(n, l)
	}
	if err := sc.Err(); err != nil {
		return s, errors.Wrapf(err, "read %s", path)
	}
	r.end()
	s.finish(sc)
	return s, nil
}

// line reads one line of the session.
func (r *ccReader) line(n int, l ccLine) {
	s := r.s
	at := sourceTime(l.Timestamp)
	if s.Created.IsZero() && !at.IsZero() {
		s.Created = at
	}
	seen := len(r.known) > 0
	if l.UUID != "" {
		// Known even if the line is skipped below: its descendants are
		// not orphans of it.
		r.known[l.UUID] = true
	}
	damaged := r.damaged
	r.damaged = false
	if l.ParentUUID != nil && *l.ParentUUID != "" && !r.known[*l.ParentUUID] && seen {
		if !damaged {
			s.skip(n, "its parent %s is not in the file", *l.ParentUUID)
			return
		}
		// Right after a line that could not be read, the parent is likely
		// it: kept, and said.
		s.skip(n, "its parent %s is not in the file (the line before could not be read): kept", *l.ParentUUID)
	}
	switch l.Type {
	case "summary":
		if l.Summary != "" {
			s.Name = l.Summary
		}
		return
	case "user", "assistant":
	case "system":
		if l.Subtype == "compact_boundary" {
			r.compact = &Checkpoint{ID: "k-" + l.UUID, Line: n}
			if l.UUID == "" {
				r.compact.ID = fmt.Sprintf("k-line-%d", n)
			}
			if md := l.CompactMD; md != nil {
				r.compact.TokensBefore, r.compact.TokensAfter = md.PreTokens, md.PostTokens
			}
		}
		return
	case "file-history-snapshot", "queue-operation", "progress", "attachment":
		return // not conversation
	default:
		s.skip(n, "record of unknown type %q", l.Type)
		return
	}
	var m ccMessage
	if err := json.Unmarshal(l.Message, &m); err != nil {
		s.skip(n, "message not readable: %v", err)
		return
	}
	text, blocks, err := ccContent(m.Content)
	if err != nil {
		s.skip(n, "content not readable: %v", err)
		return
	}
	if l.Compact {
		// The summary a compaction left: the model's history from here on.
		cp := r.compact
		if cp == nil {
			cp = &Checkpoint{ID: "k-" + l.UUID, Line: n}
		}
		r.compact = nil
		cp.History = [][]byte{append([]byte(nil), l.Message...)}
		if r.cur == nil {
			s.skip(n, "a compaction summary before the first prompt")
			return
		}
		r.cur.Checkpoint = cp
		return
	}
	if l.Type == "user" && !l.IsMeta && (text != "" || hasText(blocks)) {
		// A prompt: a new turn.
		if r.cur != nil {
			s.Turns = append(s.Turns, *r.cur)
		}
		id := l.UUID
		if id == "" {
			id = fmt.Sprintf("line-%d", n)
		}
		r.cur = &Turn{ID: turnID(id), Started: at, Ended: at, Line: n}
		r.counted = map[string]ccUsage{}
		if text == "" {
			text = joinText(blocks)
		}
		r.cur.Items = append(r.cur.Items, rollout.Item{ID: "u-" + id, Type: rollout.ItemUserMessage, Text: text})
		r.cur.ModelHistory = append(r.cur.ModelHistory, append([]byte(nil), l.Message...))
		return
	}
	cur := r.cur
	if cur == nil {
		s.skip(n, "%s message before the first prompt", l.Type)
		return
	}
	if at.After(cur.Ended) {
		cur.Ended = at
	}
	if m.Model != "" {
		cur.Model = m.Model
	}
	if u := m.Usage; u != nil {
		// A message's lines repeat its usage, growing as it streams:
		// what it adds over the most counted for that message so far.
		prev := r.counted[m.ID]
		if m.ID == "" {
			prev = ccUsage{}
		}
		d := ccUsage{Input: max(u.Input-prev.Input, 0), Output: max(u.Output-prev.Output, 0),
			CacheRead: max(u.CacheRead-prev.CacheRead, 0), CacheCreate: max(u.CacheCreate-prev.CacheCreate, 0)}
		if m.ID != "" {
			r.counted[m.ID] = ccUsage{Input: max(u.Input, prev.Input), Output: max(u.Output, prev.Output),
				CacheRead: max(u.CacheRead, prev.CacheRead), CacheCreate: max(u.CacheCreate, prev.CacheCreate)}
		}
		cur.Usage.InputTokens += d.Input + d.CacheRead + d.CacheCreate
		cur.Usage.CachedInputTokens += d.CacheRead
		cur.Usage.OutputTokens += d.Output
		cur.Usage.TotalTokens += d.Input + d.CacheRead + d.CacheCreate + d.Output
	}
	if l.Type == "assistant" {
		switch m.StopReason {
		case "end_turn", "stop_sequence", "max_tokens", "refusal":
			cur.ended = true
		case "tool_use":
			cur.ended = false
		}
	}
	cur.ModelHistory = append(cur.ModelHistory, append([]byte(nil), l.Message...))
	if cur.Checkpoint != nil {
		// After a compaction inside the turn: the checkpoint stands for
		// the whole turn, so what followed it belongs to its history.
		cur.Checkpoint.History = append(cur.Checkpoint.History, append([]byte(nil), l.Message...))
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
			out, sub, _ := ccContent(b.Content)
			if out == "" {
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

// end closes the session's last turn.
func (r *ccReader) end() {
	if r.cur != nil {
		r.s.Turns = append(r.s.Turns, *r.cur)
		r.cur = nil
	}
}

// ccContent reads a message's content: text, or blocks.
func ccContent(raw json.RawMessage) (string, []ccBlock, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, nil
	}
	if raw[0] == '"' {
		var text string
		err := json.Unmarshal(raw, &text)
		return text, nil, err
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
