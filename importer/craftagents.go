package importer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// craft-agents keeps a session in {workspace}/sessions/{id}/session.jsonl
// (packages/shared/src/sessions/jsonl.ts and types.ts, and StoredMessage in
// packages/core/src/types/message.ts of craft-agents-oss). The first line
// is the SessionHeader, every later line one StoredMessage. The file is
// rewritten whole on every save (write to .tmp, rename), so a grown
// session is the same lines with more after them. Paths inside the
// session directory are stored as the token {{SESSION_PATH}}, expanded
// here as craft-agents does when it reads.
//
// Header fields read: id, name, createdAt (Unix ms), labels, isFlagged,
// sessionStatus, isArchived, model, tokenUsage {inputTokens, outputTokens,
// totalTokens, cacheReadTokens}; older versions name the status todoState
// and the labels labelIds, and both are read. StoredMessage fields read: id, type
// (user, assistant, tool, error, status, info, warning, plan,
// auth-request), content, timestamp (Unix ms), toolName, toolUseId,
// toolInput, toolResult, toolStatus, isError, parentToolUseId, statusType,
// errorTitle.
//
// A user message starts a turn. A tool message holds a call and, once
// done, its result: both items. A tool message with parentToolUseId ran
// inside the Task (or Agent) tool call of that id: those are the subagent's,
// written as a subagent thread (source id "<session>/<tool use id>") whose
// one turn is the Task's prompt, its tools and its result. A message with
// statusType "compaction_complete" is only a notice: craft-agents keeps the
// model's own history, and the summary, in its SDK's files, so there is no
// checkpoint to make. Token usage is kept for the whole session only
// (Session.Usage).

type caHeader struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	CreatedAt *float64 `json:"createdAt"`
	Labels    []string `json:"labels"`
	IsFlagged bool     `json:"isFlagged"`
	Status    string   `json:"sessionStatus"`
	// Older versions' names of the status and the labels.
	TodoState    string   `json:"todoState"`
	LabelIDs     []string `json:"labelIds"`
	IsArchived   bool     `json:"isArchived"`
	Model        string   `json:"model"`
	MessageCount *int     `json:"messageCount"`
	Workspace    *string  `json:"workspaceRootPath"`
	TokenUsage   *struct {
		Input     int64 `json:"inputTokens"`
		Output    int64 `json:"outputTokens"`
		Total     int64 `json:"totalTokens"`
		CacheRead int64 `json:"cacheReadTokens"`
	} `json:"tokenUsage"`
}

type caMessage struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	Role        string          `json:"role"` // the runtime Message's name of type
	Content     string          `json:"content"`
	Timestamp   float64         `json:"timestamp"`
	ToolName    string          `json:"toolName"`
	ToolUseID   string          `json:"toolUseId"`
	ToolInput   json.RawMessage `json:"toolInput"`
	ToolResult  *string         `json:"toolResult"`
	ToolStatus  string          `json:"toolStatus"`
	IsError     bool            `json:"isError"`
	ParentTool  string          `json:"parentToolUseId"`
	Interim     bool            `json:"isIntermediate"`
	StatusType  string          `json:"statusType"`
	ErrorTitle  string          `json:"errorTitle"`
	ErrorDetail []string        `json:"errorDetails"`
}

// ReadCraftAgents reads one craft-agents session.jsonl.
func ReadCraftAgents(path string) (Session, error) { return Read("craft-agents", path) }

func readCraftAgents(f io.Reader, path string) (Session, error) {
	s := Session{Format: "craft-agents", SourcePath: path}
	dir := filepath.Dir(path)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs // craft-agents expands to the absolute session directory
	}
	sc := lineScanner(f)
	var cur *Turn
	header := false
	tools := map[string]*caMessage{} // tool messages by tool use id
	subs := map[string]*Session{}    // subagents by their Task's tool use id
	var order []string
	model := ""
	for sc.Scan() {
		n := sc.n
		if sc.long {
			s.Report.damaged(n, "", "a line longer than %d MiB: not read", maxLine>>20)
			continue
		}
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		raw = bytes.ReplaceAll(raw, []byte("{{SESSION_PATH}}"), jsonPath(dir))
		if !header {
			var h caHeader
			if err := json.Unmarshal(raw, &h); err != nil || h.ID == "" || h.CreatedAt == nil || h.MessageCount == nil && h.Workspace == nil {
				return s, errors.Wrapf(ErrWrongFormat, "%s is not a craft-agents session (its first line is not a session header with id, createdAt and messageCount)", path)
			}
			header = true
			s.SourceID, s.Name, s.Created, s.State, model = h.ID, h.Name, caTime(*h.CreatedAt), h.Status, h.Model
			s.Labels = h.Labels
			if s.Labels == nil {
				s.Labels = h.LabelIDs
			}
			if s.State == "" {
				s.State = h.TodoState
			}
			// Always: an unflagged session clears the flag a former import set.
			s.Flags = map[string]bool{"flagged": h.IsFlagged}
			if u := h.TokenUsage; u != nil {
				s.Usage = &rollout.Usage{InputTokens: u.Input, CachedInputTokens: u.CacheRead, OutputTokens: u.Output, TotalTokens: u.Total}
			}
			if h.IsArchived {
				s.Report.note(n, "the session is archived in craft-agents: imported as an active thread")
			}
			continue
		}
		var m caMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			s.Report.damaged(n, "", "not JSON: %v", err)
			continue
		}
		if m.Type == "" {
			m.Type = m.Role
		}
		at := caTime(m.Timestamp)
		id := m.ID
		if id == "" {
			id = fmt.Sprintf("line-%d", n)
		}
		if m.ParentTool != "" {
			// Inside a subagent.
			parent := tools[m.ParentTool]
			if parent == nil {
				s.Report.damaged(n, "parentToolUseId", "its parent tool call %s is not in the file", m.ParentTool)
				continue
			}
			sub := subs[m.ParentTool]
			if sub == nil {
				sub = caSubagent(&s, parent, model)
				subs[m.ParentTool] = sub
				order = append(order, m.ParentTool)
			}
			st := &sub.Turns[0]
			if m.Type == "tool" && m.ToolUseID != "" {
				tools[m.ToolUseID] = &m // a Task inside the subagent
			}
			if !caItems(st, m, id) {
				s.Report.unknown(n, "message/"+m.Type)
			}
			if at.After(st.Ended) {
				st.Ended = at
			}
			continue
		}
		switch m.Type {
		case "user":
			if cur != nil {
				s.Turns = append(s.Turns, *cur)
			}
			cur = &Turn{ID: turnID(id), Started: at, Ended: at, Model: model, Line: n}
			cur.Items = append(cur.Items, rollout.Item{ID: "u-" + id, Type: rollout.ItemUserMessage, Text: m.Content})
			continue
		case "status", "info", "warning", "auth-request":
			// Progress, notices (a compaction's too: it holds no summary,
			// which craft-agents' SDK keeps in its own files) and
			// credential prompts: not conversation.
			s.Report.ignore("message/" + m.Type)
			continue
		}
		if cur == nil {
			s.Report.lost(n, "a %s message before the first prompt", m.Type)
			continue
		}
		if m.Type == "tool" && m.ToolUseID != "" {
			tools[m.ToolUseID] = &m
		}
		if !caItems(cur, m, id) {
			s.Report.unknown(n, "message/"+m.Type)
			continue
		}
		// A final (not intermediate) answer ends the turn, until a tool
		// runs after it.
		cur.ended = m.Type == "assistant" && !m.Interim || m.Type == "error" || cur.ended && m.Type != "tool"
		if at.After(cur.Ended) {
			cur.Ended = at
		}
	}
	if err := sc.Err(); err != nil {
		return s, errors.Wrapf(err, "read %s", path)
	}
	if !header {
		return s, errors.Wrapf(ErrWrongFormat, "%s is empty", path)
	}
	if cur != nil {
		s.Turns = append(s.Turns, *cur)
	}
	for _, k := range order {
		sub := subs[k]
		if t := tools[k]; t.ToolResult != nil && *t.ToolResult != "" {
			st := &sub.Turns[0]
			st.Items = append(st.Items, rollout.Item{ID: "a-" + k, Type: rollout.ItemAgentMessage, Text: *t.ToolResult})
			st.ended = true // the Task returned
		}
		s.Subagents = append(s.Subagents, *sub)
	}
	return s, nil
}

// caItems appends the items of one assistant, tool, plan or error message
// to the turn; false for a type it does not know.
func caItems(t *Turn, m caMessage, id string) bool {
	switch m.Type {
	case "assistant", "plan":
		if m.Content != "" {
			t.Items = append(t.Items, rollout.Item{ID: "a-" + id, Type: rollout.ItemAgentMessage, Text: m.Content})
		}
	case "tool":
		call := m.ToolUseID
		if call == "" {
			call = id
		}
		args := ""
		if len(m.ToolInput) > 0 && string(m.ToolInput) != "null" {
			args = string(m.ToolInput)
		}
		t.Items = append(t.Items, rollout.Item{ID: "c-" + call, Type: rollout.ItemToolCall, CallID: call, Name: m.ToolName, Arguments: args})
		if m.ToolResult != nil || m.ToolStatus == "completed" || m.ToolStatus == "error" {
			res := rollout.Item{ID: "o-" + call, Type: rollout.ItemToolResult, CallID: call}
			if m.ToolResult != nil {
				res.Text = *m.ToolResult
			}
			if m.IsError || m.ToolStatus == "error" {
				res.Status = rollout.ItemFailed
			}
			t.Items = append(t.Items, res)
		}
	case "error":
		text := m.Content
		if m.ErrorTitle != "" && !strings.Contains(text, m.ErrorTitle) {
			text = m.ErrorTitle + ": " + text
		}
		t.Items = append(t.Items, rollout.Item{ID: "e-" + id, Type: rollout.ItemError, Text: text, Status: rollout.ItemFailed})
	default:
		return false
	}
	return true
}

// caSubagent starts the subagent session of a Task tool call: one turn,
// its prompt the call's input.
func caSubagent(s *Session, task *caMessage, model string) *Session {
	var in struct {
		Prompt      string `json:"prompt"`
		Description string `json:"description"`
	}
	_ = json.Unmarshal(task.ToolInput, &in)
	prompt := in.Prompt
	if prompt == "" {
		prompt = string(task.ToolInput)
	}
	at := caTime(task.Timestamp)
	sub := &Session{Format: s.Format, SourcePath: s.SourcePath, SourceID: s.SourceID + "/" + task.ToolUseID, Parent: s.SourceID,
		Name: in.Description, Created: at}
	sub.Turns = []Turn{{ID: turnID(task.ToolUseID), Started: at, Ended: at, Model: model,
		Items: []rollout.Item{{ID: "u-" + task.ToolUseID, Type: rollout.ItemUserMessage, Text: prompt}}}}
	return sub
}

// caTime is a craft-agents timestamp (Unix milliseconds).
func caTime(ms float64) time.Time {
	if ms <= 0 || ms > 1e14 {
		return time.Time{}
	}
	return plausible(time.UnixMilli(int64(ms)))
}

// jsonPath is dir as it appears inside a JSON string.
func jsonPath(dir string) []byte {
	b, _ := json.Marshal(filepath.ToSlash(dir))
	return b[1 : len(b)-1]
}
