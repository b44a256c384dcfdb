package importer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// Claude Code writes ~/.claude/projects/<dir>/<session id>.jsonl, one JSON
// object a line (from public descriptions of the format: there is no
// official schema). Lines by type:
//
//	user, assistant  {"uuid", "parentUuid", "sessionId", "timestamp",
//	                 "isSidechain", "agentId", "isMeta", "isCompactSummary",
//	                 "message": {"id", "role", "model", "stop_reason",
//	                 "content": "text" | [blocks], "usage": {...}}}
//	system           subtype "compact_boundary" (compactMetadata:
//	                 {preTokens, postTokens}) starts a compaction; the other
//	                 subtypes (turn_duration, local_command, api_error, ...)
//	                 are ignored
//	custom-title     customTitle: the name the user gave the session
//	agent-name       agentName: the name of an agent session
//	ai-title         aiTitle: the name Claude Code made
//	summary          summary, leafUuid: the name older versions made
//	permission-mode, mode, last-prompt, file-history-snapshot,
//	queue-operation, progress, attachment, pr-link: ignored (settings,
//	                 undo snapshots, the input box, hook and tool progress,
//	                 context Claude Code adds for the model)
//
// The name is the last custom-title, else the last agent-name, else the
// last ai-title, else the summary of a message in the file (else the last
// summary). A compaction is a compact_boundary line and then a user line
// with isCompactSummary whose message is the summary: a checkpoint after
// the turn before it, whose replacement history is that message. Each user
// and assistant line's "message" is also kept as the turn's exact model
// history (the Anthropic messages as Claude Code stored them).
//
// Content blocks: text, thinking (reasoning), tool_use (a tool call:
// id, name, input), tool_result (tool_use_id, content: text or blocks,
// is_error), server_tool_use and mcp_tool_use (a call the server made: a
// web search, an MCP tool), web_search_tool_result and the other
// *_tool_result blocks (their result: the pages found, or the error);
// image, document and redacted_thinking hold no text. A user line whose
// content is text (not only tool results) starts a turn; assistant lines
// and tool results belong to the turn open then.
//
// The session id is the file's name when it is one (Claude Code names the
// file by it; a resumed session keeps writing the same file with lines of
// a new sessionId, all of them the one transcript), else the first
// sessionId. Sidechain lines are a subagent's: grouped by agentId into
// subagent sessions (source id "<session>/<agent>"); newer versions write
// a subagent in <session id>/subagents/agent-<id>.jsonl beside the file
// instead (the internal agent-acompact-* files are not conversation).
// A line whose parentUuid names no line of the file is kept and reported
// as damaged: a line before it is missing.

// ReadClaudeCode reads one Claude Code session transcript, with its
// subagents.
func ReadClaudeCode(path string) (Session, error) { return Read("claude-code", path) }

// ccDecoder reads the lines of one Claude Code file: the main session's,
// and its inline subagents'.
type ccDecoder struct {
	r      *Reader
	path   string
	main   *ccSession
	agents map[string]*ccSession // inline sidechains by agent id
	order  []string
	known  uuidSet // uuids in the file
	// agent is set for a subagent's own file: every line is its.
	agent     bool
	confirmed bool // a line with a type and a sessionId was read
	// names the session was given, by kind.
	customTitle, agentName, aiTitle string
	summaries                       []ccSummary
}

type ccSummary struct{ text, leaf string }

// ccSession builds one session (the main one, or a subagent's) from its
// lines.
type ccSession struct {
	s       *Session
	emit    func(Turn)
	cur     *Turn
	compact *Checkpoint        // a compaction boundary whose summary line is to come
	counted map[string]ccUsage // usage counted per message id (a message is written once per content block)
	damaged bool               // the line before could not be read: a missing parent may be it
	seen    bool               // a line with a uuid was read
}

type ccUsage struct{ input, output, cacheRead, cacheCreate int64 }

func newClaudeCode(r *Reader, path string) *ccDecoder {
	d := &ccDecoder{r: r, path: path, agents: map[string]*ccSession{}, known: uuidSet{}}
	d.main = &ccSession{s: &r.s, emit: r.emit}
	if name := strings.TrimSuffix(filepath.Base(path), ".jsonl"); isUUID(name) {
		r.s.SourceID = name
	}
	return d
}

// newClaudeCodeAgent reads a subagent's own file.
func newClaudeCodeAgent(r *Reader, path string) *ccDecoder {
	d := newClaudeCode(r, path)
	d.agent, d.confirmed = true, true
	return d
}

// isUUID reports whether s is a UUID in its text form.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case !isHex(c):
			return false
		}
	}
	return true
}

func (d *ccDecoder) identified() bool { return d.confirmed && d.r.s.SourceID != "" }

// ccLine are the fields of a line that the reader uses.
type ccLine struct {
	typ, subtype, uuid, parent, sessionID, agentID, timestamp string
	isMeta, sidechain, compactSummary                         bool
	message, compactMD                                        []byte
	summary, leaf, customTitle, agentName, aiTitle            string
}

func (l *ccLine) read(b []byte) {
	eachField(b, func(k, v []byte) {
		switch string(k) {
		case "type":
			l.typ = text(v)
		case "subtype":
			l.subtype = text(v)
		case "uuid":
			l.uuid = text(v)
		case "parentUuid":
			l.parent = text(v)
		case "sessionId":
			l.sessionID = text(v)
		case "agentId":
			l.agentID = text(v)
		case "timestamp":
			l.timestamp = text(v)
		case "isMeta":
			l.isMeta = boolean(v)
		case "isSidechain":
			l.sidechain = boolean(v)
		case "isCompactSummary":
			l.compactSummary = boolean(v)
		case "message":
			l.message = v
		case "compactMetadata":
			l.compactMD = v
		case "summary":
			l.summary = text(v)
		case "leafUuid":
			l.leaf = text(v)
		case "customTitle":
			l.customTitle = text(v)
		case "agentName":
			l.agentName = text(v)
		case "aiTitle":
			l.aiTitle = text(v)
		}
	})
}

func (d *ccDecoder) line(n int, b []byte) {
	rep := &d.r.s.Report
	if b == nil {
		d.damagedLine()
		return
	}
	if err := checkJSON(b); err != nil {
		rep.damaged(n, "", "not JSON: %v", err)
		d.damagedLine()
		return
	}
	if kind(b) != '{' {
		rep.damaged(n, "", "not a JSON object")
		d.damagedLine()
		return
	}
	var l ccLine
	l.read(b)
	if l.typ == "" {
		rep.damaged(n, "type", "a line without a type")
		return
	}
	if l.sessionID != "" {
		d.confirmed = true
		if d.r.s.SourceID == "" {
			d.r.s.SourceID = l.sessionID
		}
	}
	if l.uuid != "" {
		// Known even if the line is passed over: its descendants are not
		// orphans of it.
		d.known.add(l.uuid)
	}
	switch l.typ {
	case "custom-title":
		if l.customTitle != "" {
			d.customTitle = l.customTitle
		}
		return
	case "agent-name":
		if l.agentName != "" {
			d.agentName = l.agentName
		}
		return
	case "ai-title":
		if l.aiTitle != "" {
			d.aiTitle = l.aiTitle
		}
		return
	case "summary":
		if l.summary != "" {
			d.summaries = append(d.summaries, ccSummary{l.summary, l.leaf})
		}
		return
	case "user", "assistant", "system":
	case "permission-mode", "mode", "last-prompt", "file-history-snapshot", "queue-operation", "progress", "attachment", "pr-link":
		rep.ignore(l.typ)
		return
	default:
		rep.unknown(n, l.typ)
		return
	}
	cs := d.main
	if l.sidechain && !d.agent {
		// A subagent's line, inline: its own thread.
		key := l.agentID
		if key == "" {
			key = "sidechain"
		}
		if cs = d.agents[key]; cs == nil {
			sub := &Session{Format: "claude-code", SourcePath: d.path}
			cs = &ccSession{s: sub}
			cs.emit = func(t Turn) { sub.Turns = append(sub.Turns, t) }
			d.agents[key] = cs
			d.order = append(d.order, key)
		}
	}
	cs.line(n, l, d.known, rep)
}

// damagedLine marks that a line could not be read: a line after it whose
// parent is missing is likely its child.
func (d *ccDecoder) damagedLine() {
	d.main.damaged = true
	for _, a := range d.agents {
		a.damaged = true
	}
}

// line reads one user, assistant or system line of the session.
func (cs *ccSession) line(n int, l ccLine, known uuidSet, rep *Report) {
	s := cs.s
	at := sourceTime(l.timestamp)
	if s.Created.IsZero() && !at.IsZero() {
		s.Created = at
	}
	damaged := cs.damaged
	cs.damaged = false
	if l.parent != "" && !known.has(l.parent) && cs.seen && !damaged {
		// Kept: a missing line is lost, this one need not be.
		rep.damaged(n, "parentUuid", "its parent %s is not in the file: a line before it is missing", l.parent)
	}
	if l.uuid != "" {
		cs.seen = true
	}
	if l.typ == "system" {
		if l.subtype != "compact_boundary" {
			rep.ignore("system/" + l.subtype)
			return
		}
		cs.compact = &Checkpoint{ID: "k-" + l.uuid, Line: n}
		if l.uuid == "" {
			cs.compact.ID = fmt.Sprintf("k-line-%d", n)
		}
		cs.compact.TokensBefore, _ = integer(field(l.compactMD, "preTokens"))
		cs.compact.TokensAfter, _ = integer(field(l.compactMD, "postTokens"))
		return
	}
	if kind(l.message) != '{' {
		rep.damaged(n, "message", "a %s line without a message object", l.typ)
		return
	}
	var m ccMessage
	m.read(l.message)
	txt, blocks, bad := ccContent(m.content)
	if bad != "" {
		rep.damaged(n, "message.content", "%s", bad)
		return
	}
	if l.compactSummary {
		// The summary a compaction left: the model's history from here on.
		cp := cs.compact
		if cp == nil {
			cp = &Checkpoint{ID: "k-" + l.uuid, Line: n}
		}
		cs.compact = nil
		cp.History = [][]byte{bytes.Clone(l.message)}
		if cs.cur == nil {
			rep.lost(n, "a compaction summary before the first prompt")
			return
		}
		cs.cur.Checkpoint = cp
		return
	}
	if l.typ == "user" && !l.isMeta && (txt != "" || hasText(blocks)) {
		// A prompt: a new turn.
		if cs.cur != nil {
			cs.emit(*cs.cur)
		}
		id := l.uuid
		if id == "" {
			id = fmt.Sprintf("line-%d", n)
		}
		cs.cur = &Turn{ID: turnID(id), Started: at, Ended: at, Line: n}
		cs.counted = map[string]ccUsage{}
		if txt == "" {
			txt = joinText(blocks)
		}
		cs.cur.Items = append(cs.cur.Items, rollout.Item{ID: "u-" + id, Type: rollout.ItemUserMessage, Text: txt})
		cs.cur.ModelHistory = append(cs.cur.ModelHistory, bytes.Clone(l.message))
		return
	}
	cur := cs.cur
	if cur == nil {
		if !l.isMeta {
			rep.lost(n, "a %s message before the first prompt", l.typ)
		}
		return
	}
	if at.After(cur.Ended) {
		cur.Ended = at
	}
	if m.model != "" && m.model != "<synthetic>" {
		cur.Model = m.model
	}
	if u := m.usage; u != nil {
		// A message's lines repeat its usage, growing as it streams: what
		// it adds over the most counted for that message so far.
		prev := cs.counted[m.id]
		if m.id == "" {
			prev = ccUsage{}
		}
		dlt := ccUsage{max(u.input-prev.input, 0), max(u.output-prev.output, 0), max(u.cacheRead-prev.cacheRead, 0), max(u.cacheCreate-prev.cacheCreate, 0)}
		if m.id != "" {
			cs.counted[m.id] = ccUsage{max(u.input, prev.input), max(u.output, prev.output), max(u.cacheRead, prev.cacheRead), max(u.cacheCreate, prev.cacheCreate)}
		}
		cur.Usage.InputTokens += dlt.input + dlt.cacheRead + dlt.cacheCreate
		cur.Usage.CachedInputTokens += dlt.cacheRead
		cur.Usage.OutputTokens += dlt.output
		cur.Usage.TotalTokens += dlt.input + dlt.cacheRead + dlt.cacheCreate + dlt.output
	}
	if l.typ == "assistant" {
		switch m.stopReason {
		case "end_turn", "stop_sequence", "max_tokens", "refusal":
			cur.ended = true
		case "tool_use":
			cur.ended = false
		}
	}
	msg := bytes.Clone(l.message)
	cur.ModelHistory = append(cur.ModelHistory, msg)
	if cur.Checkpoint != nil {
		// After a compaction inside the turn: the checkpoint stands for
		// the whole turn, so what followed it belongs to its history.
		cur.Checkpoint.History = append(cur.Checkpoint.History, msg)
	}
	if txt != "" && l.typ == "assistant" {
		cur.Items = append(cur.Items, rollout.Item{ID: "a-" + l.uuid, Type: rollout.ItemAgentMessage, Text: txt})
	}
	for i, b := range blocks {
		id := fmt.Sprintf("%s-%d", l.uuid, i)
		switch {
		case b.typ == "text":
			if l.typ == "assistant" && b.text != "" {
				cur.Items = append(cur.Items, rollout.Item{ID: "a-" + id, Type: rollout.ItemAgentMessage, Text: b.text})
			}
		case b.typ == "thinking":
			if b.thinking != "" {
				cur.Items = append(cur.Items, rollout.Item{ID: "r-" + id, Type: rollout.ItemReasoning, Text: b.thinking})
			}
		case b.typ == "tool_use" || b.typ == "server_tool_use" || b.typ == "mcp_tool_use":
			cur.Items = append(cur.Items, rollout.Item{ID: "c-" + b.id, Type: rollout.ItemToolCall, CallID: b.id, Name: b.name, Arguments: string(b.input)})
		case b.typ == "tool_result" || strings.HasSuffix(b.typ, "_tool_result"):
			out, failed := b.result()
			it := rollout.Item{ID: "o-" + b.toolUseID, Type: rollout.ItemToolResult, CallID: b.toolUseID, Text: out}
			if failed {
				it.Status = rollout.ItemFailed
			}
			cur.Items = append(cur.Items, it)
		case b.typ == "image" || b.typ == "document" || b.typ == "redacted_thinking" || b.typ == "container_upload" || b.typ == "search_result" || b.typ == "tool_reference":
			// Not text: nothing to keep but that it was there.
		default:
			rep.unknown(n, "content/"+b.typ)
		}
	}
}

// end closes the session's last turn.
func (cs *ccSession) end() {
	if cs.cur != nil {
		cs.emit(*cs.cur)
		cs.cur = nil
	}
}

func (d *ccDecoder) end() {
	d.main.end()
	s := &d.r.s
	switch {
	case d.customTitle != "":
		s.Name = d.customTitle
	case d.agentName != "":
		s.Name = d.agentName
	case d.aiTitle != "":
		s.Name = d.aiTitle
	case len(d.summaries) > 0:
		s.Name = d.summaries[len(d.summaries)-1].text
		for _, sm := range d.summaries {
			if d.known.has(sm.leaf) {
				s.Name = sm.text
			}
		}
	}
}

// subagents are the inline sidechains' sessions, then the subagent files
// beside the transcript: <session id>/subagents/agent-<id>.jsonl.
func (d *ccDecoder) subagents() []*Reader {
	s := &d.r.s
	var out []*Reader
	for _, key := range d.order {
		cs := d.agents[key]
		cs.end()
		cs.s.SourceID, cs.s.Parent = s.SourceID+"/"+key, s.SourceID
		out = append(out, sessionReader(*cs.s, d.r.recent))
	}
	if d.agent {
		return out
	}
	// The directory is named by the session id, which is the file's name
	// as Claude Code writes it (a name, not a pattern: no glob).
	var files []string
	for _, name := range []string{strings.TrimSuffix(filepath.Base(d.path), ".jsonl"), s.SourceID} {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
			continue
		}
		dir := filepath.Join(filepath.Dir(d.path), name, "subagents")
		ents, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			s.Report.lost(0, "subagents directory %s not read: %v", dir, err)
		}
		for _, e := range ents {
			if n := e.Name(); e.Type().IsRegular() && strings.HasPrefix(n, "agent-") && strings.HasSuffix(n, ".jsonl") && !strings.HasPrefix(n, "agent-acompact") {
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
		sub := &Reader{s: Session{Format: "claude-code", SourcePath: f, SourceID: s.SourceID + "/" + name, Parent: s.SourceID}}
		sub.opened = func(r *Reader) error {
			if err := r.open(f); err != nil {
				return err
			}
			r.dec = newClaudeCodeAgent(r, f)
			return nil
		}
		out = append(out, sub)
	}
	return out
}

// uuidSet is the uuids of a file, by a 64-bit digest: a quarter of the
// memory of the strings, for the parent check of every line (two uuids
// of one digest would only spare a line its report of a missing parent).
type uuidSet map[uint64]struct{}

func (u uuidSet) add(id string) { u[digest(id)] = struct{}{} }

func (u uuidSet) has(id string) bool {
	_, ok := u[digest(id)]
	return ok
}

// digest is FNV-1a of s.
func digest(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

// ccMessage are the fields of a message that the reader uses.
type ccMessage struct {
	id, model, stopReason string
	content               []byte
	usage                 *ccUsage
}

func (m *ccMessage) read(b []byte) {
	eachField(b, func(k, v []byte) {
		switch string(k) {
		case "id":
			m.id = text(v)
		case "model":
			m.model = text(v)
		case "stop_reason":
			m.stopReason = text(v)
		case "content":
			m.content = v
		case "usage":
			if kind(v) != '{' {
				return
			}
			u := &ccUsage{}
			eachField(v, func(k, v []byte) {
				x, _ := integer(v)
				switch string(k) {
				case "input_tokens":
					u.input = x
				case "output_tokens":
					u.output = x
				case "cache_read_input_tokens":
					u.cacheRead = x
				case "cache_creation_input_tokens":
					u.cacheCreate = x
				}
			})
			m.usage = u
		}
	})
}

// ccBlock are the fields of a content block that the reader uses.
type ccBlock struct {
	typ, text, thinking, id, name, toolUseID string
	input, content                           []byte
	isError                                  bool
}

// ccContent reads a message's content: text, or blocks; bad says why it
// does not read.
func ccContent(v []byte) (txt string, blocks []ccBlock, bad string) {
	switch kind(v) {
	case 0, 'n':
		return "", nil, ""
	case '"':
		return text(v), nil, ""
	case '[':
	default:
		return "", nil, "neither text nor a list of blocks"
	}
	eachElem(v, func(e []byte) {
		if kind(e) != '{' {
			bad = "a content block that is not an object"
			return
		}
		var b ccBlock
		eachField(e, func(k, v []byte) {
			switch string(k) {
			case "type":
				b.typ = text(v)
			case "text":
				b.text = text(v)
			case "thinking":
				b.thinking = text(v)
			case "id":
				b.id = text(v)
			case "name":
				b.name = text(v)
			case "tool_use_id":
				b.toolUseID = text(v)
			case "input":
				b.input = v
			case "content":
				b.content = v
			case "is_error":
				b.isError = boolean(v)
			}
		})
		blocks = append(blocks, b)
	})
	return "", blocks, bad
}

// result is a tool result block's text: its text or text blocks, or, for
// a server tool's result, the pages it found (title and address) or its
// error.
func (b ccBlock) result() (string, bool) {
	switch kind(b.content) {
	case '"':
		return text(b.content), b.isError
	case '{':
		if code := text(field(b.content, "error_code")); code != "" {
			return code, true
		}
		return string(b.content), b.isError
	case '[':
		var parts []string
		eachElem(b.content, func(e []byte) {
			switch t := text(field(e, "type")); {
			case t == "text":
				if s := text(field(e, "text")); s != "" {
					parts = append(parts, s)
				}
			case t == "image":
			default:
				title, url := text(field(e, "title")), text(field(e, "url"))
				if title != "" || url != "" {
					parts = append(parts, strings.TrimSpace(title+" "+url))
				}
			}
		})
		return strings.Join(parts, "\n"), b.isError
	}
	return "", b.isError
}

func hasText(blocks []ccBlock) bool {
	for _, b := range blocks {
		if b.typ == "text" && b.text != "" {
			return true
		}
	}
	return false
}

func joinText(blocks []ccBlock) string {
	var parts []string
	for _, b := range blocks {
		if b.typ == "text" && b.text != "" {
			parts = append(parts, b.text)
		}
	}
	return strings.Join(parts, "\n")
}
