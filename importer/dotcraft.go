package importer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// DotCraft keeps a thread in .craft/threads/active/{threadId}.jsonl
// (threads/archived/ once archived), from DotCraft's own sources
// (DotCraftDev/dotcraft and DotHarness/dotcraft: ThreadRolloutStore.cs,
// SessionJsonOptions.cs, the Session* domain types). Each line is
//
//	{"kind": "thread_opened"|"turn_started"|"item_appended"|..., "timestamp",
//	 "<camelCase of kind>": {...}}
//
// with camelCase properties, nulls written, PascalCase enum names. The
// file is a log DotCraft replays, and so is it here: a repeated
// turn_started resets that turn; an item_appended whose item id the turn
// has replaces that item; turn_state_replaced (newer files) replaces the
// whole turn; thread_rolled_back drops the last turns (by start time, then
// id). Kinds read:
//
//	thread_opened        threadId, createdAt, configuration.model, and the
//	                     parent of a subagent: source.subAgent.parentThreadId
//	                     (newer files) or originChannel "subagent" with the
//	                     parent id in channelContext (older ones)
//	thread_name_updated  displayName
//	thread_status_changed, thread_rolled_back, turn_started, item_appended,
//	turn_completed (status, error, tokenUsage), turn_state_replaced
//	context_compacted    a checkpoint after coveredThroughTurnId; its
//	                     replacementHistory is the replacement history
//	model_history_messages_appended  the turn's exact model history
//
// Queue, world-state and provider-history records are not conversation and
// are passed over. Items: UserMessage, AgentMessage, ReasoningContent,
// ToolCall and ToolResult (paired by callId), Error; the single-item calls
// (PluginFunctionCall, DynamicToolCall, McpToolCall,
// ExternalChannelToolCall, ImageGeneration) are a call and its result.
// CommandExecution and ToolExecution repeat a ToolCall's run for display,
// and approvals, user-input requests and Sleep are not conversation: passed
// over, and so is a SystemNotice (older files' compaction notice among
// them: the compacted history is in DotCraft's state.db, not here). The
// turns a rollback dropped are in Session.RolledBack.
// A turn DotCraft ended Failed or Cancelled is imported aborted; a last
// turn still running is left for a later import, once it has ended. Files
// of the older whole-thread layout ({id}.json, before v0.1.4) are not read.

type dcLine struct {
	Kind      string `json:"kind"`
	Timestamp string `json:"timestamp"`
	Opened    *struct {
		ThreadID       string `json:"threadId"`
		CreatedAt      string `json:"createdAt"`
		OriginChannel  string `json:"originChannel"`
		ChannelContext string `json:"channelContext"`
		Source         *struct {
			SubAgent *struct {
				ParentThreadID string `json:"parentThreadId"`
				TaskName       string `json:"taskName"`
			} `json:"subAgent"`
		} `json:"source"`
		Configuration *struct {
			Model string `json:"model"`
		} `json:"configuration"`
	} `json:"threadOpened"`
	TurnStarted *struct {
		Turn dcTurn `json:"turn"`
	} `json:"turnStarted"`
	ItemAppended *struct {
		TurnID string `json:"turnId"`
		Item   dcItem `json:"item"`
	} `json:"itemAppended"`
	TurnCompleted *struct {
		TurnID     string   `json:"turnId"`
		Status     string   `json:"status"`
		Completed  string   `json:"completedAt"`
		TokenUsage *dcUsage `json:"tokenUsage"`
		Error      string   `json:"error"`
	} `json:"turnCompleted"`
	TurnReplaced *struct {
		Turn        dcTurn  `json:"turn"`
		DisplayName *string `json:"displayName"`
	} `json:"turnStateReplaced"`
	StatusChanged *struct {
		Status string `json:"status"`
	} `json:"threadStatusChanged"`
	NameUpdated *struct {
		DisplayName *string `json:"displayName"`
	} `json:"threadNameUpdated"`
	RolledBack *struct {
		NumTurns int `json:"numTurns"`
	} `json:"threadRolledBack"`
	Compacted *struct {
		Covered      string            `json:"coveredThroughTurnId"`
		CheckpointID string            `json:"checkpointId"`
		TokensBefore int64             `json:"tokensBefore"`
		TokensAfter  int64             `json:"tokensAfter"`
		History      []json.RawMessage `json:"replacementHistory"`
	} `json:"contextCompacted"`
	ModelHistory *struct {
		TurnID   string            `json:"turnId"`
		Messages []json.RawMessage `json:"messages"`
	} `json:"modelHistoryMessagesAppended"`
}

type dcTurn struct {
	ID         string   `json:"id"`
	Status     string   `json:"status"`
	Items      []dcItem `json:"items"`
	StartedAt  string   `json:"startedAt"`
	Completed  string   `json:"completedAt"`
	TokenUsage *dcUsage `json:"tokenUsage"`
	Error      string   `json:"error"`
}

type dcItem struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	CreatedAt   string          `json:"createdAt"`
	CompletedAt string          `json:"completedAt"`
	Payload     json.RawMessage `json:"payload"`
}

type dcUsage struct {
	Input     int64 `json:"inputTokens"`
	Output    int64 `json:"outputTokens"`
	Cached    int64 `json:"cachedInputTokens"`
	Reasoning int64 `json:"reasoningOutputTokens"`
	Total     int64 `json:"totalTokens"`
}

// dcPayload holds the item payload fields read, of every item type.
type dcPayload struct {
	Text         string          `json:"text"`
	ToolName     string          `json:"toolName"`
	FunctionName string          `json:"functionName"`
	Server       string          `json:"server"`
	Namespace    string          `json:"namespace"`
	Arguments    json.RawMessage `json:"arguments"`
	CallID       string          `json:"callId"`
	Result       json.RawMessage `json:"result"`
	Structured   json.RawMessage `json:"structuredResult"`
	Content      []struct {
		Text string `json:"text"`
	} `json:"contentItems"`
	Success      *bool  `json:"success"`
	IsError      bool   `json:"isError"`
	ErrorMessage string `json:"errorMessage"`
	Message      string `json:"message"`
	Kind         string `json:"kind"`
	RevisedPrmpt string `json:"revisedPrompt"`
	SavedPath    string `json:"savedPath"`
	TokensBefore int64  `json:"tokensBefore"`
	TokensAfter  int64  `json:"tokensAfter"`
}

// dcState is a thread as replayed so far.
type dcState struct {
	turns  map[string]*dcTurnState
	order  []string // turn ids, first seen first
	model  string   // the configuration's model now
	rolled []string // turn ids (ours) a rollback dropped
}

type dcTurnState struct {
	turn    dcTurn
	items   []dcItem
	at      map[string]int // item id: index in items
	line    int
	model   string // the model when the turn started
	history [][]byte
	cp      *Checkpoint
}

// ReadDotCraft reads one DotCraft thread rollout.
func ReadDotCraft(path string) (Session, error) { return Read("dotcraft", path) }

func readDotCraft(f io.Reader, path string) (Session, error) {
	s := Session{Format: "dotcraft", SourcePath: path}
	st := &dcState{turns: map[string]*dcTurnState{}}
	sc := lineScanner(f)
	for sc.Scan() {
		n := sc.n
		if sc.long {
			s.Report.damaged(n, "", "a line longer than %d MiB: not read", maxLine>>20)
			continue
		}
		raw := bytes.TrimSpace(bytes.TrimPrefix(sc.Bytes(), []byte("\xef\xbb\xbf")))
		if len(raw) == 0 {
			continue
		}
		var l dcLine
		if err := json.Unmarshal(raw, &l); err != nil {
			s.Report.damaged(n, "", "not JSON: %v", err)
			continue
		}
		if s.SourceID == "" && l.Kind != "thread_opened" {
			s.Report.damaged(n, "kind", "a %q record before the thread_opened header", l.Kind)
			continue
		}
		switch l.Kind {
		case "thread_opened":
			o := l.Opened
			if o == nil || o.ThreadID == "" {
				s.Report.damaged(n, "threadOpened.threadId", "a thread_opened record without a thread id")
				continue
			}
			if s.SourceID != "" && o.ThreadID != s.SourceID {
				s.Report.damaged(n, "threadOpened.threadId", "a header of another thread (%s)", o.ThreadID)
				continue
			}
			s.SourceID = o.ThreadID
			if c := dcTime(o.CreatedAt); !c.IsZero() {
				s.Created = c
			}
			if o.Configuration != nil && o.Configuration.Model != "" {
				st.model = o.Configuration.Model
			}
			s.Parent = dcParent(l)
			if o.Source != nil && o.Source.SubAgent != nil && s.Name == "" {
				s.Name = o.Source.SubAgent.TaskName
			}
			if s.Parent == s.SourceID {
				s.Report.note(n, "the header names the thread as its own parent: imported without a parent")
				s.Parent = ""
			}
		case "thread_name_updated":
			if l.NameUpdated != nil && l.NameUpdated.DisplayName != nil {
				s.Name = *l.NameUpdated.DisplayName
			}
		case "thread_status_changed":
			if l.StatusChanged != nil && strings.EqualFold(l.StatusChanged.Status, "Archived") && !slices.ContainsFunc(s.Report.Notes, func(k Note) bool { return strings.HasPrefix(k.Reason, "archived") }) {
				s.Report.note(n, "archived in DotCraft: imported as an active thread")
			}
		case "turn_started":
			if l.TurnStarted == nil || l.TurnStarted.Turn.ID == "" {
				s.Report.damaged(n, "turnStarted.turn.id", "a turn_started record without a turn id")
				continue
			}
			t := l.TurnStarted.Turn
			if t.StartedAt == "" {
				t.StartedAt = l.Timestamp
			}
			st.reset(t, n)
		case "turn_state_replaced":
			if l.TurnReplaced == nil || l.TurnReplaced.Turn.ID == "" {
				s.Report.damaged(n, "turnStateReplaced.turn.id", "a turn_state_replaced record without a turn id")
				continue
			}
			ts := st.reset(l.TurnReplaced.Turn, n)
			for _, it := range l.TurnReplaced.Turn.Items {
				ts.put(it)
			}
			if d := l.TurnReplaced.DisplayName; d != nil {
				s.Name = *d
			}
		case "item_appended":
			a := l.ItemAppended
			if a == nil || a.TurnID == "" || a.Item.ID == "" {
				s.Report.damaged(n, "itemAppended", "an item_appended record without a turn or item id")
				continue
			}
			ts := st.turns[a.TurnID]
			if ts == nil {
				// DotCraft makes the turn a running one.
				ts = st.reset(dcTurn{ID: a.TurnID, Status: "Running", StartedAt: l.Timestamp}, n)
			}
			ts.put(a.Item)
		case "turn_completed":
			c := l.TurnCompleted
			if c == nil || st.turns[c.TurnID] == nil {
				s.Report.damaged(n, "turnCompleted.turnId", "a turn_completed record of a turn not in the file")
				continue
			}
			t := &st.turns[c.TurnID].turn
			t.Status, t.Error, t.TokenUsage = c.Status, c.Error, c.TokenUsage
			if t.Completed = c.Completed; t.Completed == "" {
				t.Completed = l.Timestamp
			}
		case "thread_rolled_back":
			if l.RolledBack != nil {
				st.rollBack(l.RolledBack.NumTurns)
			}
		case "context_compacted":
			c := l.Compacted
			if c == nil || st.turns[c.Covered] == nil || len(c.History) == 0 {
				s.Report.damaged(n, "contextCompacted", "a compaction of a turn not in the file, or without a replacement history")
				continue
			}
			cp := &Checkpoint{ID: "k-" + c.CheckpointID, TokensBefore: c.TokensBefore, TokensAfter: c.TokensAfter, Line: n}
			if c.CheckpointID == "" {
				cp.ID = fmt.Sprintf("k-line-%d", n)
			}
			for _, h := range c.History {
				cp.History = append(cp.History, append([]byte(nil), h...))
			}
			st.turns[c.Covered].cp = cp
		case "model_history_messages_appended":
			m := l.ModelHistory
			if m == nil || st.turns[m.TurnID] == nil {
				s.Report.damaged(n, "modelHistoryMessagesAppended.turnId", "model history of a turn not in the file")
				continue
			}
			for _, msg := range m.Messages {
				st.turns[m.TurnID].history = append(st.turns[m.TurnID].history, append([]byte(nil), msg...))
			}
		case "queued_input_added", "queued_input_removed", "queued_input_updated", "queued_input_reordered",
			"world_state", "provider_history_items_appended", "provider_history_replaced", "provider_history_attempt_aborted":
			s.Report.ignore(l.Kind) // not conversation
		default:
			s.Report.unknown(n, l.Kind)
		}
	}
	if err := sc.Err(); err != nil {
		return s, errors.Wrapf(err, "read %s", path)
	}
	if s.SourceID == "" {
		return s, errors.Wrapf(ErrWrongFormat, "%s is not a DotCraft thread rollout (no thread_opened record)", path)
	}
	if filepath.Base(filepath.Dir(path)) == "archived" && !slices.ContainsFunc(s.Report.Notes, func(k Note) bool { return strings.HasPrefix(k.Reason, "archived") }) {
		s.Report.note(0, "archived in DotCraft: imported as an active thread")
	}
	st.build(&s)
	// A turn rolled back whose id a surviving turn has (the same number
	// and start time) was not rolled back.
	for _, t := range s.Turns {
		st.rolled = slices.DeleteFunc(st.rolled, func(id string) bool { return id == t.ID })
	}
	s.RolledBack = st.rolled
	return s, nil
}

// dcParent is the parent thread a thread_opened names: source.subAgent's
// (newer files), or the channel context of an origin channel "subagent"
// (older ones).
func dcParent(l dcLine) string {
	o := l.Opened
	switch {
	case o.Source != nil && o.Source.SubAgent != nil && o.Source.SubAgent.ParentThreadID != "":
		return o.Source.SubAgent.ParentThreadID
	case o.OriginChannel == "subagent" && o.ChannelContext != "":
		return o.ChannelContext
	}
	return ""
}

// reset makes t the turn's state (DotCraft: a turn started again starts
// over).
func (st *dcState) reset(t dcTurn, line int) *dcTurnState {
	ts := st.turns[t.ID]
	if ts == nil {
		ts = &dcTurnState{}
		st.turns[t.ID] = ts
		st.order = append(st.order, t.ID)
	}
	ts.turn, ts.items, ts.at, ts.line, ts.model = t, nil, nil, line, st.model
	ts.turn.Items = nil
	return ts
}

// put adds an item, or replaces the turn's item of that id (a turn of
// thousands of streamed items: by index, not by a scan).
func (ts *dcTurnState) put(it dcItem) {
	if i, ok := ts.at[it.ID]; ok {
		ts.items[i] = it
		return
	}
	if ts.at == nil {
		ts.at = map[string]int{}
	}
	ts.at[it.ID] = len(ts.items)
	ts.items = append(ts.items, it)
}

// rollBack drops the last n turns by start time, then id.
func (st *dcState) rollBack(n int) {
	ordered := st.sorted()
	for i := 0; i < n && i < len(ordered); i++ {
		id := ordered[len(ordered)-1-i]
		st.rolled = append(st.rolled, dcTurnID(id, st.turns[id].turn.StartedAt))
		delete(st.turns, id)
		st.order = slices.DeleteFunc(st.order, func(x string) bool { return x == id })
	}
}

// sorted is the turn ids by start time, then id.
func (st *dcState) sorted() []string {
	ids := slices.Clone(st.order)
	slices.SortStableFunc(ids, func(a, b string) int {
		ta, tb := dcTime(st.turns[a].turn.StartedAt), dcTime(st.turns[b].turn.StartedAt)
		if c := ta.Compare(tb); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return ids
}

// dcTurnID is our turn id of a DotCraft turn. Turn numbers can come again
// after a rollback in older files: the start time keeps them apart.
func dcTurnID(id, startedAt string) string {
	// From the time as written, not as judged plausible: an id must not
	// change with the clock.
	t, err := time.Parse(time.RFC3339Nano, startedAt)
	if err != nil {
		return turnID(id + "-" + startedAt)
	}
	return turnID(fmt.Sprintf("%s-%d", id, t.UnixMilli()))
}

// build makes the session's turns from the replayed state.
func (st *dcState) build(s *Session) {
	ids := st.sorted()
	for i, id := range ids {
		ts := st.turns[id]
		t := ts.turn
		t.Status = strings.ToLower(t.Status)
		switch t.Status {
		case "completed", "failed", "cancelled":
		default:
			if i == len(ids)-1 {
				s.Report.Notes = append(s.Report.Notes, Note{Line: ts.line, Later: true, Reason: fmt.Sprintf("turn %s is still running: imported once it has ended", id)})
				continue
			}
			t.Status = "interrupted"
		}
		started := dcTime(t.StartedAt)
		out := Turn{ID: dcTurnID(id, t.StartedAt), Started: started, Ended: dcTime(t.Completed), Model: ts.model, Line: ts.line, ModelHistory: ts.history, Checkpoint: ts.cp, ended: true}
		if out.Ended.Before(started) {
			out.Ended = started
		}
		if out.Ended.IsZero() {
			out.Ended = started
		}
		if u := t.TokenUsage; u != nil {
			out.Usage = rollout.Usage{InputTokens: u.Input, CachedInputTokens: u.Cached, OutputTokens: u.Output, ReasoningTokens: u.Reasoning, TotalTokens: u.Total}
		}
		switch t.Status {
		case "failed":
			out.Aborted = "failed: " + t.Error
		case "cancelled":
			out.Aborted = "cancelled"
		case "interrupted":
			out.Aborted = "interrupted: it never ended in DotCraft"
		}
		for _, it := range ts.items {
			dcItems(s, &out, id, it, ts.line)
		}
		if len(out.Items) == 0 || out.Items[0].Type != rollout.ItemUserMessage {
			s.Report.lost(ts.line, "turn %s has no user message: not imported", id)
			if ts.cp != nil {
				s.Report.lost(ts.cp.Line, "a compaction of turn %s, which is not imported", id)
			}
			continue
		}
		s.Turns = append(s.Turns, out)
	}
}

// dcItems appends the items one DotCraft item makes.
func dcItems(s *Session, t *Turn, turnID string, it dcItem, line int) {
	var p dcPayload
	if len(it.Payload) > 0 && string(it.Payload) != "null" {
		if err := json.Unmarshal(it.Payload, &p); err != nil {
			s.Report.damaged(line, "item.payload", "item %s of turn %s: %v", it.ID, turnID, err)
			return
		}
	}
	id := turnID + "-" + it.ID
	failed := func() string {
		if p.IsError || p.Success != nil && !*p.Success {
			return rollout.ItemFailed
		}
		return ""
	}
	args := func() string {
		if len(p.Arguments) == 0 || string(p.Arguments) == "null" {
			return ""
		}
		return string(p.Arguments)
	}
	add := func(x rollout.Item) { t.Items = append(t.Items, x) }
	typ := strings.ToLower(it.Type)
	if typ == "imagegeneration" {
		// Its result is the image, in base64: the prompt and where it
		// was saved are the text.
		p.Result, p.Text = nil, p.RevisedPrmpt
		if p.Text != "" {
			p.Content = append(p.Content, struct {
				Text string `json:"text"`
			}{p.Text})
		}
	}
	switch typ {
	case "usermessage":
		add(rollout.Item{ID: "u-" + id, Type: rollout.ItemUserMessage, Text: p.Text})
	case "agentmessage":
		add(rollout.Item{ID: "a-" + id, Type: rollout.ItemAgentMessage, Text: p.Text})
	case "reasoningcontent":
		add(rollout.Item{ID: "r-" + id, Type: rollout.ItemReasoning, Text: p.Text})
	case "toolcall":
		add(rollout.Item{ID: "c-" + id, Type: rollout.ItemToolCall, CallID: p.CallID, Name: p.ToolName, Arguments: args()})
	case "toolresult":
		add(rollout.Item{ID: "o-" + id, Type: rollout.ItemToolResult, CallID: p.CallID, Text: dcResult(p), Status: failed()})
	case "pluginfunctioncall", "dynamictoolcall", "mcptoolcall", "externalchanneltoolcall", "imagegeneration":
		name := p.ToolName
		switch {
		case typ == "pluginfunctioncall":
			name = p.FunctionName
		case typ == "imagegeneration":
			name = "image_generation"
		case p.Server != "" && name != "":
			name = p.Server + "." + name
		}
		call := p.CallID
		if call == "" {
			call = id
		}
		add(rollout.Item{ID: "c-" + id, Type: rollout.ItemToolCall, CallID: call, Name: name, Arguments: args()})
		add(rollout.Item{ID: "o-" + id, Type: rollout.ItemToolResult, CallID: call, Text: dcResult(p), Status: failed()})
	case "error":
		add(rollout.Item{ID: "e-" + id, Type: rollout.ItemError, Text: p.Message, Status: rollout.ItemFailed})
	case "systemnotice", "commandexecution", "toolexecution", "approvalrequest", "approvalresponse", "userinputrequest", "userinputresponse", "sleep":
		// Notices (a compaction's in older files too: the history it
		// made is in DotCraft's state.db), a display of a tool call's
		// run, or not conversation.
		s.Report.ignore("item/" + typ)
	default:
		s.Report.unknown(line, "item/"+it.Type)
	}
}

// dcResult is a tool result's text: its result (a string or JSON), its
// content items' text, or its error.
func dcResult(p dcPayload) string {
	var parts []string
	if r := p.Result; len(r) > 0 && string(r) != "null" {
		var str string
		if json.Unmarshal(r, &str) == nil {
			parts = append(parts, str)
		} else {
			parts = append(parts, string(r))
		}
	}
	for _, c := range p.Content {
		if c.Text != "" {
			parts = append(parts, c.Text)
		}
	}
	if len(parts) == 0 && len(p.Structured) > 0 && string(p.Structured) != "null" {
		parts = append(parts, string(p.Structured))
	}
	if p.SavedPath != "" {
		parts = append(parts, "saved to "+p.SavedPath)
	}
	if p.ErrorMessage != "" {
		parts = append(parts, p.ErrorMessage)
	}
	return strings.Join(parts, "\n")
}

// dcTime is a DotCraft time (ISO 8601 with an offset); DotCraft's unset
// value (year 1) is zero.
func dcTime(s string) time.Time { return sourceTime(s) }
