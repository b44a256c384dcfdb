package recovery

import (
	"encoding/json"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// HistoryBuilder rebuilds a turn's model contribution from its items, when
// its exact history cannot be used. A host plugs in its own to produce its
// provider's message format.
type HistoryBuilder func(turnID string, items []rollout.Item) [][]byte

// message is the default builder's provider-neutral message, as JSON.
type message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content,omitempty"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// DefaultHistory builds chat-style JSON messages from completed items: user
// and agent messages as user/assistant messages, and each tool call that has
// a completed result as an assistant tool call followed by the tool's
// result. A call without a result (or a result without its call) is left
// out: a provider would reject an unpaired call. Reasoning, file changes,
// terminals and errors are not model input.
func DefaultHistory(_ string, items []rollout.Item) [][]byte {
	results := map[string]rollout.Item{}
	for _, it := range items {
		if it.Status == rollout.ItemCompleted && it.CallID != "" && it.Type == rollout.ItemToolResult {
			results[it.CallID] = it
		}
	}
	var out [][]byte
	add := func(m message) {
		b, err := json.Marshal(m)
		if err == nil {
			out = append(out, b)
		}
	}
	for _, it := range items {
		if it.Status != rollout.ItemCompleted {
			continue
		}
		switch it.Type {
		case rollout.ItemUserMessage:
			add(message{Role: "user", Content: it.Text})
		case rollout.ItemAgentMessage:
			add(message{Role: "assistant", Content: it.Text})
		case rollout.ItemToolCall:
			if res, ok := results[it.CallID]; ok && it.CallID != "" {
				add(message{Role: "assistant", ToolCalls: []toolCall{{ID: it.CallID, Name: it.Name, Arguments: it.Arguments}}})
				add(message{Role: "tool", ToolCallID: it.CallID, Content: res.Text})
			}
		}
	}
	return out
}
