package importer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// Codex (the OpenAI CLI) writes ~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl,
// one RolloutLine a line (codex-rs/protocol: RolloutItem, ResponseItem,
// EventMsg, TurnContextItem):
//
//	{"timestamp", "type": "session_meta"|"response_item"|"event_msg"|"turn_context"|"compacted"|..., "payload": {...}}
//
// Older files have no wrapper: a first line {"id", "timestamp",
// "instructions"}, then the response items themselves, and
// {"record_type": "state"} lines. What is read, by type:
//
//	session_meta   id (newer: session_id), timestamp, and a subagent's
//	               parent: source.subagent.thread_spawn.parent_thread_id
//	               (or parent_thread_id beside it)
//	turn_context   the turn's settings: model, and as the turn's metadata
//	               cwd, approval_policy, sandbox_policy, effort, summary
//	               (the reasoning-summary setting: reasoning_summary),
//	               personality and collaboration_mode, each a name or an
//	               object that names it ({"type": "workspace-write", ...});
//	               the other fields (truncation_policy, user_instructions,
//	               developer_instructions, current_date, timezone, ...)
//	               are not kept
//	response_item  message (a user's starts a turn, unless it is Codex's
//	               own context: <environment_context>, AGENTS.md, ...;
//	               an assistant's is an agent message), reasoning (its
//	               summary, or its content), function_call (arguments a
//	               string or an object), custom_tool_call (input),
//	               local_shell_call (action) and their outputs
//	               (function_call_output, custom_tool_call_output: a
//	               string, {content, success}, or content items),
//	               web_search_call (action), tool_search_call (arguments)
//	               and tool_search_output (tools), image_generation_call:
//	               tool calls and results; ghost_snapshot, compaction
//	               markers, additional_tools, configuration_update:
//	               ignored
//	event_msg      token_count (info.last_token_usage: the turn's usage),
//	               task_started/turn_started (turn_id),
//	               task_complete/turn_complete (the turn's end),
//	               turn_aborted (the turn is aborted, with its reason),
//	               error (an error item), thread_rolled_back (num_turns:
//	               the last turns are dropped); the events that repeat response items or show
//	               progress (user_message, agent_message, agent_reasoning,
//	               exec_command_end, patch_apply_end, mcp_tool_call_end,
//	               web_search_end, entered_review_mode, exited_review_mode,
//	               context_compacted, ...) are ignored
//	compacted      a checkpoint after the turn before it: its
//	               replacement_history, or its message as Codex's summary
//	               user message
//
// Each response item of a turn is also kept as the turn's exact model
// history. A turn's id comes from its prompt's line: its number and a
// digest of its bytes, so that a copy of the session has the same turns
// and a session that went another way does not.

// ReadCodex reads one Codex session rollout.
func ReadCodex(path string) (Session, error) { return Read("codex", path) }

// cxDecoder reads a Codex rollout's lines into turns.
type cxDecoder struct {
	r   *Reader
	s   *Session
	cur *Turn
	// settings are those of the last turn_context; srcTurn the turn id of
	// the last task_started, curTurn the one of the turn being read.
	model            string
	settings         map[string]string
	srcTurn, curTurn string
	lastSearch       string // the last tool_search_call's id, for an output without one
}

func newCodex(r *Reader) *cxDecoder { return &cxDecoder{r: r, s: &r.s} }

func (d *cxDecoder) subagents() []*Reader { return nil }

func (d *cxDecoder) line(n int, b []byte) {
	if b == nil {
		return
	}
	if err := checkJSON(b); err != nil {
		d.s.Report.damaged(n, "", "not JSON: %v", err)
		return
	}
	if kind(b) != '{' {
		d.s.Report.damaged(n, "", "not a JSON object")
		return
	}
	var ts, typ, payload, id, recordType []byte
	eachField(b, func(k, v []byte) {
		switch string(k) {
		case "timestamp":
			ts = v
		case "type":
			typ = v
		case "payload":
			payload = v
		case "id":
			id = v
		case "record_type":
			recordType = v
		}
	})
	at := sourceTime(text(ts))
	top := text(typ)
	if payload == nil {
		// The older format: the line is the item, or the first line.
		switch {
		case typ == nil && id != nil && d.s.SourceID == "":
			d.s.SourceID, d.s.Created = text(id), at
		case recordType != nil:
			d.s.Report.ignore("record_type:" + text(recordType))
		case typ == nil:
			d.s.Report.damaged(n, "type", "a line with neither a type nor a payload")
		default:
			var f cxFields
			f.read(b)
			d.item(n, b, &f, at)
		}
		return
	}
	if kind(payload) != '{' {
		d.s.Report.damaged(n, "payload", "not a JSON object")
		return
	}
	switch top {
	case "session_meta":
		d.meta(n, payload, at)
	case "response_item":
		var f cxFields
		f.read(payload)
		d.item(n, payload, &f, at)
	case "event_msg":
		d.event(n, payload)
	case "turn_context":
		d.turnContext(n, payload)
	case "compacted":
		d.compacted(n, payload)
	case "inter_agent_communication", "inter_agent_communication_metadata", "world_state":
		d.s.Report.ignore(top)
	case "":
		d.s.Report.damaged(n, "type", "a line without a type")
	default:
		d.s.Report.unknown(n, top)
	}
}

func (d *cxDecoder) meta(n int, p []byte, at time.Time) {
	if d.s.SourceID != "" {
		d.s.Report.ignore("session_meta") // a resumed or forked session's again
		return
	}
	var id, sid, metaTS, parent []byte
	var source []byte
	eachField(p, func(k, v []byte) {
		switch string(k) {
		case "id":
			id = v
		case "session_id":
			sid = v
		case "timestamp":
			metaTS = v
		case "source":
			source = v
		case "parent_thread_id":
			parent = v
		}
	})
	if d.s.SourceID = text(sid); d.s.SourceID == "" {
		d.s.SourceID = text(id)
	}
	if d.s.SourceID == "" {
		d.s.Report.damaged(n, "payload.id", "a session_meta without a session id")
		return
	}
	if d.s.Created = at; at.IsZero() {
		d.s.Created = sourceTime(text(metaTS))
	}
	if d.s.Created.IsZero() {
		d.s.Created = time.Now()
	}
	d.s.Parent = text(field(field(field(source, "subagent"), "thread_spawn"), "parent_thread_id"))
	if d.s.Parent == "" {
		d.s.Parent = text(parent)
	}
	if d.s.Parent == d.s.SourceID {
		d.s.Report.note(n, "the session names itself as its parent: imported without a parent")
		d.s.Parent = ""
	}
}

func (d *cxDecoder) turnContext(n int, p []byte) {
	meta := map[string]string{}
	model, turn := "", ""
	bad := ""
	eachField(p, func(k, v []byte) {
		key := string(k)
		switch key {
		case "model", "turn_id", "cwd":
			if isNull(v) {
				return
			}
			s, ok := str(v)
			if !ok {
				bad = key
				return
			}
			switch key {
			case "model":
				model = s
			case "turn_id":
				turn = s
			default:
				meta[key] = s
			}
		case "approval_policy", "sandbox_policy", "effort", "summary", "personality", "collaboration_mode":
			// Settings whose shape grows from a name to an object with the
			// name in it: the name.
			if s := settingName(v); s != "" {
				if key == "summary" {
					key = "reasoning_summary"
				}
				meta[key] = s
			}
		}
	})
	if bad != "" {
		d.s.Report.damaged(n, "payload."+bad, "not a string")
		return
	}
	if model != "" {
		d.model = model
	}
	d.settings = meta
	if cur := d.cur; cur != nil && !cur.ended && (turn == "" || d.curTurn == "" || turn == d.curTurn) {
		// Older versions write it after the prompt (the turn it is of),
		// newer ones before it (after the previous turn's end).
		cur.Model, cur.Metadata = d.model, meta
	}
}

func (d *cxDecoder) event(n int, p []byte) {
	var typ, info, turnID, reason, message, numTurns []byte
	eachField(p, func(k, v []byte) {
		switch string(k) {
		case "type":
			typ = v
		case "info":
			info = v
		case "turn_id":
			turnID = v
		case "reason":
			reason = v
		case "message":
			message = v
		case "num_turns":
			numTurns = v
		}
	})
	switch typ := text(typ); typ {
	case "token_count":
		last := field(info, "last_token_usage")
		if d.cur == nil || isNull(last) {
			return
		}
		u := &d.cur.Usage
		eachField(last, func(k, v []byte) {
			x, _ := integer(v)
			switch string(k) {
			case "input_tokens":
				u.InputTokens += x
			case "cached_input_tokens":
				u.CachedInputTokens += x
			case "output_tokens":
				u.OutputTokens += x
			case "reasoning_output_tokens":
				u.ReasoningTokens += x
			case "total_tokens":
				u.TotalTokens += x
			}
		})
	case "task_started", "turn_started":
		d.srcTurn = text(turnID)
	case "task_complete", "turn_complete":
		if d.cur != nil {
			d.cur.ended = true
		}
	case "turn_aborted":
		if d.cur != nil {
			d.cur.ended = true
			if d.cur.Aborted = text(reason); d.cur.Aborted == "" {
				d.cur.Aborted = "aborted"
			}
		}
	case "error":
		if d.cur == nil {
			d.s.Report.lost(n, "an error before the first prompt: %s", text(message))
			return
		}
		d.cur.Items = append(d.cur.Items, rollout.Item{ID: fmt.Sprintf("e-l%d", n), Type: rollout.ItemError, Status: rollout.ItemFailed, Text: text(message)})
	case "thread_rolled_back":
		k, _ := integer(numTurns)
		d.rollback(n, int(k))
	case "user_message", "agent_message", "agent_message_delta", "agent_reasoning", "agent_reasoning_delta",
		"agent_reasoning_raw_content", "agent_reasoning_raw_content_delta", "agent_reasoning_section_break",
		"context_compacted", "entered_review_mode", "exited_review_mode", "exec_command_begin", "exec_command_end",
		"exec_command_output_delta", "terminal_interaction", "patch_apply_begin", "patch_apply_end", "patch_apply_updated",
		"mcp_tool_call_begin", "mcp_tool_call_end", "web_search_begin", "web_search_end", "image_generation_begin",
		"image_generation_end", "view_image_tool_call", "turn_diff", "plan_update", "plan_delta", "item_started",
		"item_completed", "thread_goal_updated", "sub_agent_activity", "background_event", "stream_error", "warning",
		"deprecation_notice", "session_configured", "mcp_startup_update", "mcp_startup_complete", "raw_response_item",
		"shutdown_complete", "undo_started", "undo_completed", "exec_approval_request", "apply_patch_approval_request",
		"elicitation_request", "request_user_input", "request_permissions", "dynamic_tool_call_request",
		"dynamic_tool_call_response", "guardian_assessment", "guardian_warning", "model_reroute", "thread_settings_applied",
		"hook_started", "hook_completed", "reasoning_content_delta", "reasoning_raw_content_delta",
		"agent_message_content_delta", "get_history_entry_response", "mcp_list_tools_response", "list_custom_prompts_response",
		"list_skills_response", "skills_update_available", "conversation_path", "turn_moderation_metadata", "safety_buffering":
		d.s.Report.ignore("event_msg/" + typ)
	default:
		if strings.HasPrefix(typ, "collab_") || strings.HasPrefix(typ, "realtime_conversation") {
			d.s.Report.ignore("event_msg/" + typ)
			return
		}
		if typ == "" {
			d.s.Report.damaged(n, "payload.type", "an event without a type")
			return
		}
		d.s.Report.unknown(n, "event_msg/"+typ)
	}
}

// rollback drops the last k turns (Codex's rollback of the thread).
func (d *cxDecoder) rollback(n, k int) {
	if d.cur != nil {
		d.r.emit(*d.cur)
		d.cur = nil
	}
	q := d.r.queue
	for ; k > 0 && len(q) > 0; k-- {
		d.s.RolledBack = append(d.s.RolledBack, q[len(q)-1].ID)
		q = q[:len(q)-1]
	}
	d.r.queue = q
	if k > 0 {
		d.s.Report.lost(n, "a rollback of %d more turns than this read still held (the file grew while it was read): not applied", k)
	}
}

func (d *cxDecoder) compacted(n int, p []byte) {
	if d.cur == nil {
		d.s.Report.lost(n, "a compaction before the first prompt")
		return
	}
	cp := &Checkpoint{ID: fmt.Sprintf("k-l%d", n), Line: n}
	eachElem(field(p, "replacement_history"), func(v []byte) {
		cp.History = append(cp.History, bytes.Clone(v))
	})
	if msg := text(field(p, "message")); len(cp.History) == 0 && msg != "" {
		// Older files keep only the summary: as the user message Codex
		// itself makes of it.
		b, _ := json.Marshal(map[string]any{"type": "message", "role": "user",
			"content": []map[string]string{{"type": "input_text", "text": msg}}})
		cp.History = [][]byte{b}
	}
	if len(cp.History) == 0 {
		d.s.Report.damaged(n, "payload.replacement_history", "a compaction with no summary")
		return
	}
	d.cur.Checkpoint = cp
}

// settingName is a setting's name: the string, or an object's "type" or
// "mode" (a sandbox policy {"type": "workspace-write", ...}; older
// {"mode": ...}), or the one key of an object ({"reject": {...}}).
func settingName(v []byte) string {
	switch kind(v) {
	case '"':
		return text(v)
	case '{':
		if t := text(field(v, "type")); t != "" {
			return t
		}
		if m := text(field(v, "mode")); m != "" {
			return m
		}
		var keys []string
		eachField(v, func(k, _ []byte) { keys = append(keys, string(k)) })
		if len(keys) == 1 {
			return keys[0]
		}
	}
	return ""
}

// cxIgnored are response items that carry nothing a thread keeps.
var cxIgnored = map[string]bool{"ghost_snapshot": true, "compaction_trigger": true, "additional_tools": true, "configuration_update": true}

func (d *cxDecoder) item(n int, p []byte, f *cxFields, at time.Time) {
	typ := f.typ
	if typ == "" {
		d.s.Report.damaged(n, "payload.type", "a response item without a type")
		return
	}
	if cxIgnored[typ] {
		d.s.Report.ignore("response_item/" + typ)
		return
	}
	if d.s.SourceID == "" {
		d.s.Report.lost(n, "a response item before the session's metadata")
		return
	}
	id := fmt.Sprintf("l%d", n)
	if typ == "message" && f.role == "user" {
		if t := f.text(); t != "" && !cxBoilerplate(t) {
			if d.cur != nil {
				d.r.emit(*d.cur)
			}
			sum := fnv.New64a()
			sum.Write(p)
			d.cur = &Turn{ID: turnID(fmt.Sprintf("%s-%x", id, sum.Sum64())), Started: at, Ended: at, Model: d.model, Metadata: d.settings, Line: n}
			d.curTurn = d.srcTurn
			d.cur.Items = append(d.cur.Items, rollout.Item{ID: "u-" + id, Type: rollout.ItemUserMessage, Text: t})
			d.history(p)
			return
		}
	}
	cur := d.cur
	if cur == nil {
		switch typ {
		case "message", "reasoning", "compaction", "compaction_summary", "context_compaction":
			// Codex's instructions and context before the first prompt.
		default:
			d.s.Report.lost(n, "a %s before the first prompt", typ)
		}
		return
	}
	d.history(p)
	if at.After(cur.Ended) {
		cur.Ended = at
	}
	call := func(callID, name, args string) {
		cur.Items = append(cur.Items, rollout.Item{ID: "c-" + callID, Type: rollout.ItemToolCall, CallID: callID, Name: name, Arguments: args})
	}
	result := func(callID, out string, failed bool) {
		it := rollout.Item{ID: "o-" + callID, Type: rollout.ItemToolResult, CallID: callID, Text: out}
		if failed {
			it.Status = rollout.ItemFailed
		}
		cur.Items = append(cur.Items, it)
	}
	switch typ {
	case "message", "agent_message":
		if t := f.text(); t != "" && f.role != "user" && f.role != "developer" && f.role != "system" {
			cur.Items = append(cur.Items, rollout.Item{ID: "a-" + id, Type: rollout.ItemAgentMessage, Text: t})
		}
	case "reasoning":
		if t := f.reasoning(); t != "" {
			cur.Items = append(cur.Items, rollout.Item{ID: "r-" + id, Type: rollout.ItemReasoning, Text: t})
		}
	case "function_call", "custom_tool_call":
		args := f.arguments
		if typ == "custom_tool_call" {
			args = f.input
		}
		call(f.callOr(id), f.name, args)
	case "local_shell_call":
		call(f.callOr(id), "shell", f.action)
	case "function_call_output", "custom_tool_call_output":
		out, failed := cxOutput(f.output)
		result(f.callOr(id), out, failed)
	case "web_search_call":
		c := f.callOr("ws-" + id)
		call(c, "web_search", f.action)
		result(c, f.status, f.status == "failed")
	case "tool_search_call":
		c := f.callOr("ts-" + id)
		d.lastSearch = c
		call(c, "tool_search", f.arguments)
	case "tool_search_output":
		c := f.callID
		if c == "" {
			c = d.lastSearch
		}
		if c == "" {
			c = "ts-" + id
		}
		result(c, f.tools, f.status == "failed")
	case "image_generation_call":
		c := f.callOr("ig-" + id)
		call(c, "image_generation", f.revisedPrompt)
		result(c, "[image generated: "+f.status+"]", f.status == "failed")
	case "compaction", "compaction_summary", "context_compaction":
		// The model's own compaction, opaque: in the model history only.
	default:
		d.s.Report.unknown(n, "response_item/"+typ)
	}
}

// history keeps a response item as the turn's exact model history; after
// a compaction inside the turn, in the checkpoint's too (it stands for the
// whole turn).
func (d *cxDecoder) history(p []byte) {
	b := bytes.Clone(p)
	d.cur.ModelHistory = append(d.cur.ModelHistory, b)
	if d.cur.Checkpoint != nil {
		d.cur.Checkpoint.History = append(d.cur.Checkpoint.History, b)
	}
}

func (d *cxDecoder) end() {
	if d.cur != nil {
		d.r.emit(*d.cur)
		d.cur = nil
	}
}

func (d *cxDecoder) identified() bool { return d.s.SourceID != "" }

// cxFields are the fields of a response item that the reader uses.
type cxFields struct {
	typ, role, name, callID, id, status, input, arguments, action, tools, revisedPrompt string
	content, summary, reasoningContent, output                                          []byte
}

func (f *cxFields) read(p []byte) {
	eachField(p, func(k, v []byte) {
		switch string(k) {
		case "type":
			f.typ = text(v)
		case "role":
			f.role = text(v)
		case "name":
			f.name = text(v)
		case "call_id":
			f.callID = text(v)
		case "id":
			f.id = text(v)
		case "status":
			f.status = text(v)
		case "input":
			f.input = rawOrText(v)
		case "arguments":
			// A JSON string holding JSON, or (some versions) the object.
			f.arguments = rawOrText(v)
		case "action":
			f.action = rawOrText(v)
		case "tools":
			f.tools = rawOrText(v)
		case "revised_prompt":
			f.revisedPrompt = text(v)
		case "content":
			f.content = v
		case "summary":
			f.summary = v
		case "output":
			f.output = v
		}
	})
	f.reasoningContent = f.content
}

// rawOrText is a string's text, or another value's JSON (nothing for
// null).
func rawOrText(v []byte) string {
	if s, ok := str(v); ok {
		return s
	}
	if isNull(v) {
		return ""
	}
	return string(v)
}

func (f *cxFields) callOr(fallback string) string {
	if f.callID != "" {
		return f.callID
	}
	if f.id != "" {
		return f.id
	}
	return fallback
}

// text is a message's text: its text content items, joined.
func (f *cxFields) text() string {
	if s, ok := str(f.content); ok {
		return s
	}
	var parts []string
	eachElem(f.content, func(c []byte) {
		var typ, t string
		eachField(c, func(k, v []byte) {
			switch string(k) {
			case "type":
				typ = text(v)
			case "text":
				t = text(v)
			}
		})
		if (typ == "input_text" || typ == "output_text" || typ == "text") && t != "" {
			parts = append(parts, t)
		}
	})
	return strings.Join(parts, "\n")
}

// reasoning is a reasoning item's summary, or its content where it has no
// summary.
func (f *cxFields) reasoning() string {
	var parts []string
	each := func(v []byte) {
		eachElem(v, func(c []byte) {
			if t := text(field(c, "text")); t != "" {
				parts = append(parts, t)
			}
		})
	}
	each(f.summary)
	if len(parts) == 0 {
		each(f.reasoningContent)
	}
	return strings.Join(parts, "\n")
}

// cxOutput is a tool's output: a string, {"content", "success"} (older
// {"output"}), or content items; failed when success is false.
func cxOutput(v []byte) (string, bool) {
	switch kind(v) {
	case '"':
		return text(v), false
	case '{':
		var out string
		failed := false
		eachField(v, func(k, val []byte) {
			switch string(k) {
			case "content", "output":
				out += rawOrText(val)
			case "success":
				failed = kind(val) == 'f'
			}
		})
		return out, failed
	case '[':
		var parts []string
		eachElem(v, func(c []byte) {
			switch text(field(c, "type")) {
			case "input_text", "output_text", "text":
				parts = append(parts, text(field(c, "text")))
			case "input_image":
				parts = append(parts, "[image]")
			}
		})
		return strings.Join(parts, "\n"), false
	}
	return rawOrText(v), false
}

// cxBoilerplate reports whether text is what Codex sends as a user message
// of its own (the environment, the instructions), not a prompt.
func cxBoilerplate(text string) bool {
	t := strings.TrimSpace(text)
	for _, p := range []string{"<environment_context>", "<user_instructions>", "# AGENTS.md", "<INSTRUCTIONS>", "<user_shell_command>", "<turn_aborted>", "<permissions instructions>"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

// codexRollsBack reports whether the file has a thread_rolled_back event:
// such a file is read whole (a rollback takes back turns already read).
func codexRollsBack(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	needle := []byte(`"thread_rolled_back"`)
	buf := make([]byte, 1<<20+len(needle))
	keep := 0
	for {
		n, err := io.ReadFull(f, buf[keep:])
		if bytes.Contains(buf[:keep+n], needle) {
			return true, nil
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		keep = copy(buf, buf[keep+n-len(needle):keep+n])
	}
}

// readCodexWhole reads a Codex rollout whole (one that rolls turns back).
func readCodexWhole(f io.Reader, path string) (Session, error) {
	r := &Reader{s: Session{Format: "codex", SourcePath: path}, sc: lineScanner(f)}
	d := newCodex(r)
	r.dec = d
	for r.scanAll() {
	}
	if r.err != nil {
		return r.s, r.err
	}
	d.end()
	s := r.s
	s.Turns = r.queue
	// A turn rolled back whose id a surviving turn has is not rolled back.
	live := map[string]bool{}
	for _, t := range s.Turns {
		live[t.ID] = true
	}
	var rolled []string
	for _, id := range s.RolledBack {
		if !live[id] {
			rolled = append(rolled, id)
		}
	}
	s.RolledBack = rolled
	if s.SourceID == "" {
		return s, errors.Wrapf(ErrWrongFormat, "%s is not a %s", path, formatNoun["codex"])
	}
	return s, nil
}
