package importer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/rollout"
	"pgregory.net/rapid"
)

// The property tests write a session generated with every record type a
// format has, read it back, and expect the same turns, items and name, and
// no line reported damaged or unknown.

// wantItem is what an item must read as.
type wantItem struct {
	typ                  rollout.ItemType
	text, name, args, id string
	failed               bool
}

type wantTurn struct {
	model   string
	meta    map[string]string
	items   []wantItem
	aborted string
}

// genText is text with what JSON escapes: quotes, backslashes, line ends,
// non-ASCII.
func genText(t *rapid.T, label string) string {
	return rapid.StringMatching(`[A-Za-z][A-Za-z0-9 "\\é€\n\t.?]{0,24}`).Draw(t, label)
}

func jsonLine(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func checkTurns(t *rapid.T, s Session, want []wantTurn, name string) {
	if len(s.Report.Damaged) != 0 || len(s.Report.Unknown) != 0 {
		t.Fatalf("damaged %+v, unknown %+v", s.Report.Damaged, s.Report.Unknown)
	}
	if s.Name != name {
		t.Fatalf("name %q, want %q", s.Name, name)
	}
	if len(s.Turns) != len(want) {
		t.Fatalf("%d turns, want %d", len(s.Turns), len(want))
	}
	for i, w := range want {
		got := s.Turns[i]
		if got.Model != w.model || !maps.Equal(got.Metadata, w.meta) || got.Aborted != w.aborted {
			t.Fatalf("turn %d: model %q meta %v aborted %q, want %q %v %q", i, got.Model, got.Metadata, got.Aborted, w.model, w.meta, w.aborted)
		}
		if len(got.Items) != len(w.items) {
			t.Fatalf("turn %d: %d items %+v, want %d %+v", i, len(got.Items), got.Items, len(w.items), w.items)
		}
		for j, wi := range w.items {
			gi := got.Items[j]
			if gi.Type != wi.typ || gi.Text != wi.text || gi.Name != wi.name || gi.Arguments != wi.args || (wi.id != "" && gi.CallID != wi.id) ||
				(gi.Status == rollout.ItemFailed) != wi.failed {
				t.Fatalf("turn %d item %d: %+v, want %+v", i, j, gi, wi)
			}
		}
	}
}

func TestPropertyCodex(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		var lines []string
		put := func(typ string, payload any) {
			at = at.Add(time.Second)
			lines = append(lines, jsonLine(map[string]any{"timestamp": at.Format(time.RFC3339Nano), "type": typ, "payload": payload}))
		}
		msg := func(role, ctype, text string) map[string]any {
			return map[string]any{"type": "message", "role": role, "content": []map[string]any{{"type": ctype, "text": text}}}
		}
		put("session_meta", map[string]any{"id": "019a0000-0000-7000-8000-00000000000a", "cwd": "/w", "cli_version": "0.98.0"})
		var want []wantTurn
		model, meta := "", map[string]string(nil)
		n := rapid.IntRange(1, 5).Draw(t, "turns")
		for i := range n {
			if rapid.Bool().Draw(t, "context") {
				model = rapid.SampledFrom([]string{"gpt-5.1-codex", "gpt-5-mini"}).Draw(t, "model")
				meta = map[string]string{"cwd": "/w/" + fmt.Sprint(i), "approval_policy": rapid.SampledFrom([]string{"never", "on-request"}).Draw(t, "approval"),
					"sandbox_policy": "workspace-write", "effort": "medium", "reasoning_summary": "auto"}
				put("turn_context", map[string]any{"turn_id": fmt.Sprint("turn-", i), "cwd": meta["cwd"], "approval_policy": meta["approval_policy"],
					"sandbox_policy": map[string]any{"type": "workspace-write", "network_access": false}, "model": model, "effort": "medium", "summary": "auto",
					"truncation_policy": map[string]any{"mode": "bytes", "limit": 1000}, "realtime_active": false})
			}
			prompt := genText(t, "prompt")
			put("response_item", msg("user", "input_text", prompt))
			put("event_msg", map[string]any{"type": "user_message", "message": prompt})
			w := wantTurn{model: model, meta: meta, items: []wantItem{{typ: rollout.ItemUserMessage, text: prompt}}}
			k := rapid.IntRange(0, 6).Draw(t, "items")
			for j := range k {
				call := fmt.Sprintf("call_%d_%d", i, j)
				switch rapid.IntRange(0, 8).Draw(t, "kind") {
				case 0:
					r := genText(t, "reasoning")
					put("response_item", map[string]any{"type": "reasoning", "summary": []map[string]any{{"type": "summary_text", "text": r}}, "encrypted_content": "e"})
					w.items = append(w.items, wantItem{typ: rollout.ItemReasoning, text: r})
				case 1, 2:
					args := jsonLine(map[string]any{"command": genText(t, "cmd")})
					var a any = args
					if rapid.Bool().Draw(t, "object") {
						a = json.RawMessage(args)
					}
					out := genText(t, "out")
					put("response_item", map[string]any{"type": "function_call", "name": "shell", "arguments": a, "call_id": call})
					put("event_msg", map[string]any{"type": "exec_command_end", "call_id": call, "exit_code": 0})
					put("response_item", map[string]any{"type": "function_call_output", "call_id": call, "output": out})
					w.items = append(w.items, wantItem{typ: rollout.ItemToolCall, name: "shell", args: args, id: call}, wantItem{typ: rollout.ItemToolResult, text: out, id: call})
				case 3:
					in, out := genText(t, "patch"), genText(t, "out")
					put("response_item", map[string]any{"type": "custom_tool_call", "status": "completed", "call_id": call, "name": "apply_patch", "input": in})
					put("response_item", map[string]any{"type": "custom_tool_call_output", "call_id": call, "output": out})
					w.items = append(w.items, wantItem{typ: rollout.ItemToolCall, name: "apply_patch", args: in, id: call}, wantItem{typ: rollout.ItemToolResult, text: out, id: call})
				case 4:
					action := map[string]any{"type": "search", "query": genText(t, "query")}
					put("response_item", map[string]any{"type": "web_search_call", "id": call, "status": "completed", "action": action})
					w.items = append(w.items, wantItem{typ: rollout.ItemToolCall, name: "web_search", args: jsonLine(action), id: call}, wantItem{typ: rollout.ItemToolResult, text: "completed", id: call})
				case 5:
					args := map[string]any{"query": genText(t, "q"), "limit": 1}
					tools := []map[string]any{{"name": genText(t, "tool")}}
					put("response_item", map[string]any{"type": "tool_search_call", "call_id": call, "execution": "client", "arguments": args})
					put("response_item", map[string]any{"type": "tool_search_output", "call_id": call, "status": "completed", "execution": "client", "tools": tools})
					w.items = append(w.items, wantItem{typ: rollout.ItemToolCall, name: "tool_search", args: jsonLine(args), id: call}, wantItem{typ: rollout.ItemToolResult, text: jsonLine(tools), id: call})
				case 6:
					a := genText(t, "answer")
					put("response_item", msg("assistant", "output_text", a))
					put("event_msg", map[string]any{"type": "agent_message", "message": a})
					w.items = append(w.items, wantItem{typ: rollout.ItemAgentMessage, text: a})
				case 7:
					e := genText(t, "error")
					put("event_msg", map[string]any{"type": "error", "message": e})
					w.items = append(w.items, wantItem{typ: rollout.ItemError, text: e, failed: true})
				case 8:
					put("response_item", map[string]any{"type": "ghost_snapshot", "ghost_commit": map[string]any{"id": "c"}})
					put("event_msg", map[string]any{"type": "token_count", "info": map[string]any{"last_token_usage": map[string]any{"input_tokens": 10}}})
					put("world_state", map[string]any{})
				}
			}
			if rapid.Bool().Draw(t, "aborted") {
				put("event_msg", map[string]any{"type": "turn_aborted", "reason": "interrupted"})
				w.aborted = "interrupted"
			} else {
				put("event_msg", map[string]any{"type": "task_complete"})
			}
			want = append(want, w)
		}
		data := []byte(joinLines(lines))
		s, err := readBytes("codex", data, "rollout.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		checkTurns(t, s, want, "")
	})
}

func TestPropertyClaudeCode(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const sid = "0f0e0d0c-0b0a-4909-8807-060504030201"
		at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		var lines []string
		parent := any(nil)
		seq := 0
		put := func(typ string, message map[string]any) string {
			at, seq = at.Add(time.Second), seq+1
			uuid := fmt.Sprintf("u%d", seq)
			lines = append(lines, jsonLine(map[string]any{"parentUuid": parent, "isSidechain": false, "sessionId": sid, "type": typ,
				"message": message, "uuid": uuid, "timestamp": at.Format(time.RFC3339Nano)}))
			parent = uuid
			return uuid
		}
		side := func(v map[string]any) { lines = append(lines, jsonLine(v)) }
		names := map[string]string{}
		var want []wantTurn
		n := rapid.IntRange(1, 5).Draw(t, "turns")
		for i := range n {
			prompt := genText(t, "prompt")
			var content any = prompt
			if rapid.Bool().Draw(t, "blocks") {
				content = []map[string]any{{"type": "text", "text": prompt}}
			}
			put("user", map[string]any{"role": "user", "content": content})
			w := wantTurn{items: []wantItem{{typ: rollout.ItemUserMessage, text: prompt}}}
			k := rapid.IntRange(0, 5).Draw(t, "steps")
			for j := range k {
				id := fmt.Sprintf("toolu_%d_%d", i, j)
				switch rapid.IntRange(0, 5).Draw(t, "kind") {
				case 0:
					th, a := genText(t, "thinking"), genText(t, "answer")
					put("assistant", map[string]any{"role": "assistant", "model": "claude-x", "content": []map[string]any{{"type": "thinking", "thinking": th, "signature": "s"}, {"type": "text", "text": a}}})
					w.items = append(w.items, wantItem{typ: rollout.ItemReasoning, text: th}, wantItem{typ: rollout.ItemAgentMessage, text: a})
					w.model = "claude-x"
				case 1:
					input := map[string]any{"command": genText(t, "cmd")}
					out := genText(t, "out")
					failed := rapid.Bool().Draw(t, "failed")
					put("assistant", map[string]any{"role": "assistant", "content": []map[string]any{{"type": "tool_use", "id": id, "name": "Bash", "input": input}}})
					side(map[string]any{"type": "progress", "uuid": fmt.Sprint("pg", i, j), "parentUuid": parent, "sessionId": sid, "data": map[string]any{"type": "bash_progress"}})
					var rc any = out
					if rapid.Bool().Draw(t, "result-blocks") {
						rc = []map[string]any{{"type": "text", "text": out}}
					}
					put("user", map[string]any{"role": "user", "content": []map[string]any{{"type": "tool_result", "tool_use_id": id, "content": rc, "is_error": failed}}})
					w.items = append(w.items, wantItem{typ: rollout.ItemToolCall, name: "Bash", args: jsonLine(input), id: id}, wantItem{typ: rollout.ItemToolResult, text: out, id: id, failed: failed})
				case 2:
					input := map[string]any{"query": genText(t, "query")}
					title := genText(t, "title")
					put("assistant", map[string]any{"role": "assistant", "content": []map[string]any{
						{"type": "server_tool_use", "id": id, "name": "web_search", "input": input},
						{"type": "web_search_tool_result", "tool_use_id": id, "content": []map[string]any{{"type": "web_search_result", "title": title, "url": "https://x.test/" + fmt.Sprint(j)}}}}})
					w.items = append(w.items, wantItem{typ: rollout.ItemToolCall, name: "web_search", args: jsonLine(input), id: id},
						wantItem{typ: rollout.ItemToolResult, text: title + " https://x.test/" + fmt.Sprint(j), id: id})
				case 3:
					side(map[string]any{"type": "file-history-snapshot", "messageId": parent, "snapshot": map[string]any{}, "isSnapshotUpdate": false})
					side(map[string]any{"type": "queue-operation", "operation": "enqueue", "sessionId": sid, "content": "x"})
					side(map[string]any{"type": "permission-mode", "permissionMode": "plan", "sessionId": sid})
					side(map[string]any{"type": "last-prompt", "lastPrompt": prompt, "sessionId": sid})
				case 4:
					side(map[string]any{"type": "attachment", "uuid": fmt.Sprint("at", i, j), "parentUuid": parent, "sessionId": sid, "attachment": map[string]any{"type": "file"}})
					parent = fmt.Sprint("at", i, j)
					side(map[string]any{"type": "system", "subtype": "turn_duration", "uuid": fmt.Sprint("sy", i, j), "parentUuid": parent, "sessionId": sid, "durationMs": 3})
					parent = fmt.Sprint("sy", i, j)
				case 5:
					kind := rapid.SampledFrom([]string{"custom-title", "agent-name", "ai-title", "summary"}).Draw(t, "name kind")
					name := genText(t, "name")
					names[kind] = name
					switch kind {
					case "custom-title":
						side(map[string]any{"type": kind, "customTitle": name, "sessionId": sid})
					case "agent-name":
						side(map[string]any{"type": kind, "agentName": name, "sessionId": sid})
					case "ai-title":
						side(map[string]any{"type": kind, "aiTitle": name, "sessionId": sid})
					default:
						side(map[string]any{"type": kind, "summary": name, "leafUuid": parent})
					}
				}
			}
			want = append(want, w)
		}
		name := ""
		for _, k := range []string{"summary", "ai-title", "agent-name", "custom-title"} {
			if v, ok := names[k]; ok {
				name = v
			}
		}
		s, err := readBytes("claude-code", []byte(joinLines(lines)), sid+".jsonl")
		if err != nil {
			t.Fatal(err)
		}
		checkTurns(t, s, want, name)
	})
}

func joinLines(lines []string) string {
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestPropertyCraftAgents(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		name := genText(t, "name")
		ms := int64(1763632800000)
		lines := []string{jsonLine(map[string]any{"id": "260101-gen", "name": name, "createdAt": ms, "messageCount": 0, "workspaceRootPath": "/w",
			"labels": []string{"bug"}, "isFlagged": false, "sessionStatus": "todo"})}
		seq := 0
		put := func(m map[string]any) {
			ms, seq = ms+1000, seq+1
			m["id"], m["timestamp"] = fmt.Sprint("m", seq), ms
			lines = append(lines, jsonLine(m))
		}
		var want []wantTurn
		for i := range rapid.IntRange(1, 5).Draw(t, "turns") {
			prompt := genText(t, "prompt")
			put(map[string]any{"type": "user", "content": prompt})
			w := wantTurn{items: []wantItem{{typ: rollout.ItemUserMessage, text: prompt}}}
			for j := range rapid.IntRange(0, 5).Draw(t, "messages") {
				switch rapid.IntRange(0, 3).Draw(t, "kind") {
				case 0:
					a := genText(t, "answer")
					put(map[string]any{"type": "assistant", "content": a, "isIntermediate": rapid.Bool().Draw(t, "interim")})
					w.items = append(w.items, wantItem{typ: rollout.ItemAgentMessage, text: a})
				case 1:
					id := fmt.Sprintf("toolu_%d_%d", i, j)
					input := map[string]any{"pattern": genText(t, "pattern")}
					out := genText(t, "out")
					failed := rapid.Bool().Draw(t, "failed")
					put(map[string]any{"type": "tool", "toolName": "Grep", "toolUseId": id, "toolInput": input, "toolResult": out, "toolStatus": "completed", "isError": failed})
					w.items = append(w.items, wantItem{typ: rollout.ItemToolCall, name: "Grep", args: jsonLine(input), id: id}, wantItem{typ: rollout.ItemToolResult, text: out, id: id, failed: failed})
				case 2:
					e := genText(t, "error")
					put(map[string]any{"type": "error", "content": e})
					w.items = append(w.items, wantItem{typ: rollout.ItemError, text: e, failed: true})
				case 3:
					put(map[string]any{"type": rapid.SampledFrom([]string{"status", "info", "warning"}).Draw(t, "notice"), "content": "working"})
				}
			}
			want = append(want, w)
		}
		s, err := readBytes("craft-agents", []byte(joinLines(lines)), "sessions/260101-gen/session.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		checkTurns(t, s, want, name)
	})
}

func TestPropertyDotCraft(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		at := time.Date(2026, 5, 5, 7, 0, 0, 0, time.UTC)
		now := func() string { at = at.Add(time.Second); return at.Format(time.RFC3339) }
		var lines []string
		put := func(kind, key string, body any) {
			lines = append(lines, jsonLine(map[string]any{"kind": kind, "timestamp": now(), key: body}))
		}
		model := rapid.SampledFrom([]string{"gpt-5", "claude-x"}).Draw(t, "model")
		put("thread_opened", "threadOpened", map[string]any{"threadId": "thread_gen", "createdAt": now(), "configuration": map[string]any{"model": model}})
		name := ""
		if rapid.Bool().Draw(t, "named") {
			name = genText(t, "name")
			put("thread_name_updated", "threadNameUpdated", map[string]any{"displayName": name})
		}
		var want []wantTurn
		for i := range rapid.IntRange(1, 4).Draw(t, "turns") {
			turn := fmt.Sprintf("turn_%03d", i+1)
			put("turn_started", "turnStarted", map[string]any{"turn": map[string]any{"id": turn, "status": "Running", "startedAt": now()}})
			item := 0
			add := func(typ string, payload map[string]any) {
				item++
				put("item_appended", "itemAppended", map[string]any{"turnId": turn, "item": map[string]any{"id": fmt.Sprintf("item_%03d", item), "type": typ, "status": "Completed", "payload": payload}})
			}
			prompt := genText(t, "prompt")
			add("UserMessage", map[string]any{"text": prompt})
			w := wantTurn{model: model, items: []wantItem{{typ: rollout.ItemUserMessage, text: prompt}}}
			for j := range rapid.IntRange(0, 4).Draw(t, "items") {
				switch rapid.IntRange(0, 3).Draw(t, "kind") {
				case 0:
					a := genText(t, "answer")
					add("AgentMessage", map[string]any{"text": a})
					w.items = append(w.items, wantItem{typ: rollout.ItemAgentMessage, text: a})
				case 1:
					r := genText(t, "reasoning")
					add("ReasoningContent", map[string]any{"text": r})
					w.items = append(w.items, wantItem{typ: rollout.ItemReasoning, text: r})
				case 2:
					call := fmt.Sprintf("call_%d_%d", i, j)
					args := map[string]any{"path": genText(t, "path")}
					out := genText(t, "out")
					add("ToolCall", map[string]any{"callId": call, "toolName": "ReadFile", "arguments": args})
					add("ToolResult", map[string]any{"callId": call, "result": out, "success": true})
					w.items = append(w.items, wantItem{typ: rollout.ItemToolCall, name: "ReadFile", args: jsonLine(args), id: call}, wantItem{typ: rollout.ItemToolResult, text: out, id: call})
				case 3:
					add("SystemNotice", map[string]any{"text": "note"})
				}
			}
			put("turn_completed", "turnCompleted", map[string]any{"turnId": turn, "status": "Completed", "completedAt": now()})
			want = append(want, w)
		}
		put("queued_input_added", "queuedInputAdded", map[string]any{})
		s, err := readBytes("dotcraft", []byte(joinLines(lines)), ".craft/threads/active/thread_gen.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		checkTurns(t, s, want, name)
	})
}
