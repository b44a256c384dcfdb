package rollout

import "time"

// The typed bodies of the known kinds. Field names on disk are the msgpack
// tags; fields are added, never renamed or reused, so that older readers keep
// decoding newer bodies (unknown fields are ignored).

// FormatVersion is the version of the record schema written in
// ThreadOpened.FormatVersion (the frame format has its own version in the
// file header).
const FormatVersion = 1

// ThreadOpened is the header record, always seq 1: who the thread is and
// where it belongs. Recovery refuses to continue a rollout whose header does
// not match the thread and workspace it is opened for.
type ThreadOpened struct {
	ThreadID      string            `msgpack:"thread_id" json:"thread_id"`
	WorkspaceID   string            `msgpack:"workspace_id" json:"workspace_id"`
	WorkspacePath string            `msgpack:"workspace_path,omitempty" json:"workspace_path,omitempty"`
	Source        Source            `msgpack:"source" json:"source"`
	ForkedFrom    *ForkRef          `msgpack:"forked_from,omitempty" json:"forked_from,omitempty"`
	Created       time.Time         `msgpack:"created" json:"created"`
	Host          string            `msgpack:"host,omitempty" json:"host,omitempty"`         // host program and version
	FormatVersion int               `msgpack:"format_version" json:"format_version"`         // FormatVersion when written
	Metadata      map[string]string `msgpack:"metadata,omitempty" json:"metadata,omitempty"` // host-defined
}

// Source says where a thread came from.
type Source struct {
	Kind   string `msgpack:"kind" json:"kind"`                         // SourceUser, SourceSubagent, or a host's own
	Client string `msgpack:"client,omitempty" json:"client,omitempty"` // the client that started it
	Parent string `msgpack:"parent,omitempty" json:"parent,omitempty"` // subagent: the thread that spawned it
	Root   string `msgpack:"root,omitempty" json:"root,omitempty"`     // subagent: the root of its tree
	Depth  int    `msgpack:"depth,omitempty" json:"depth,omitempty"`   // subagent: 1 for a child of the root
}

// Source kinds the library knows; hosts may use others.
const (
	SourceUser     = "user"
	SourceSubagent = "subagent"
)

// ForkRef names the thread and turn a forked thread was copied from.
type ForkRef struct {
	Thread string `msgpack:"thread" json:"thread"`
	Turn   string `msgpack:"turn" json:"turn"` // last turn included
}

// TurnStarted opens a turn. The user input follows as an item.
type TurnStarted struct {
	Model    string            `msgpack:"model,omitempty" json:"model,omitempty"`
	Metadata map[string]string `msgpack:"metadata,omitempty" json:"metadata,omitempty"`
}

// ItemType is the type of a client-visible item.
type ItemType string

// Item types.
const (
	ItemUserMessage  ItemType = "user_message"
	ItemAgentMessage ItemType = "agent_message"
	ItemReasoning    ItemType = "reasoning"
	ItemToolCall     ItemType = "tool_call"
	ItemToolResult   ItemType = "tool_result"
	ItemFileChange   ItemType = "file_change"
	ItemTerminal     ItemType = "terminal"
	ItemError        ItemType = "error"
)

// Item statuses.
const (
	ItemCompleted  = "completed"
	ItemInProgress = "in_progress"
	ItemFailed     = "failed"
)

// Item is one client-visible thing in a turn; it is the body of
// item_appended. An item may be appended more than once with the same ID
// (in progress, then final): the last one wins.
type Item struct {
	ID     string   `msgpack:"id" json:"id"`
	Type   ItemType `msgpack:"type" json:"type"`
	Status string   `msgpack:"status,omitempty" json:"status,omitempty"`
	Text   string   `msgpack:"text,omitempty" json:"text,omitempty"` // message, reasoning, tool output preview, error text
	// Tool calls and results: CallID pairs a result with its call.
	CallID    string `msgpack:"call_id,omitempty" json:"call_id,omitempty"`
	Name      string `msgpack:"name,omitempty" json:"name,omitempty"`
	Arguments string `msgpack:"arguments,omitempty" json:"arguments,omitempty"`
	// Ref points at an artifact holding the full content when it was too
	// large for the log (a spilled tool output, an attachment, a log).
	Ref  *ArtifactRef      `msgpack:"ref,omitempty" json:"ref,omitempty"`
	Data map[string]string `msgpack:"data,omitempty" json:"data,omitempty"` // host-defined
}

// ArtifactRef references bytes kept beside the rollout. Path is relative to
// the workspace data directory.
type ArtifactRef struct {
	Path   string `msgpack:"path" json:"path"`
	Size   int64  `msgpack:"size" json:"size"`
	SHA256 string `msgpack:"sha256" json:"sha256"`
}

// Turn statuses. A turn's status is completed or aborted by its end
// record; TurnStatusOpen (never written) is the one word for a turn with
// no end record, wherever it shows: running, or left by a host that
// stopped (Resume lists those in State.Interrupted, for the host to end).
const (
	TurnStatusCompleted = "completed"
	TurnStatusAborted   = "aborted"
	TurnStatusOpen      = "open"
)

// TurnCompleted ends a turn.
type TurnCompleted struct {
	Status string `msgpack:"status" json:"status"`
	Usage  Usage  `msgpack:"usage" json:"usage"`
}

// Usage is token accounting for a turn.
type Usage struct {
	InputTokens       int64 `msgpack:"input,omitempty" json:"input,omitempty"`
	CachedInputTokens int64 `msgpack:"cached_input,omitempty" json:"cached_input,omitempty"`
	OutputTokens      int64 `msgpack:"output,omitempty" json:"output,omitempty"`
	ReasoningTokens   int64 `msgpack:"reasoning,omitempty" json:"reasoning,omitempty"`
	TotalTokens       int64 `msgpack:"total,omitempty" json:"total,omitempty"`
}

// TurnAborted ends a turn that did not complete.
type TurnAborted struct {
	Reason string `msgpack:"reason,omitempty" json:"reason,omitempty"`
}

// ModelHistory is the exact model history of a turn: the provider-level
// messages the model saw, as opaque bytes (for example JSON).
type ModelHistory struct {
	Messages [][]byte `msgpack:"messages" json:"messages"`
}

// Checkpoint triggers.
const (
	TriggerPreTurn  = "pre_turn"
	TriggerMidTurn  = "mid_turn"
	TriggerPostTurn = "post_turn"
	TriggerManual   = "manual"
)

// Checkpoint is a compaction record: ReplacementHistory stands for the whole
// model history through CoveredTurn.
type Checkpoint struct {
	ID                 string   `msgpack:"id" json:"id"`
	CoveredTurn        string   `msgpack:"covered_turn" json:"covered_turn"`
	ReplacementHistory [][]byte `msgpack:"replacement_history" json:"replacement_history"`
	TokensBefore       int64    `msgpack:"tokens_before" json:"tokens_before"`
	TokensAfter        int64    `msgpack:"tokens_after" json:"tokens_after"`
	Trigger            string   `msgpack:"trigger" json:"trigger"`
}

// ThreadRolledBack drops the last Turns turns from the visible and model
// history. The records stay; replay applies it.
type ThreadRolledBack struct {
	Turns int `msgpack:"turns" json:"turns"`
}

// MetadataUpdated changes the thread's name, labels, flags or status. Nil
// fields are unchanged. Labels is the whole new set: nil leaves the labels
// as they are, an empty (non-nil) list clears them, which is why it is
// encoded even when empty.
type MetadataUpdated struct {
	Name   *string         `msgpack:"name,omitempty" json:"name,omitempty"`
	Labels []string        `msgpack:"labels" json:"labels"`
	Flags  map[string]bool `msgpack:"flags,omitempty" json:"flags,omitempty"`
	Status *string         `msgpack:"status,omitempty" json:"status,omitempty"`
}

// Lifecycle is the body of archived and restored.
type Lifecycle struct {
	Reason string `msgpack:"reason,omitempty" json:"reason,omitempty"`
}

// RecordsLost stands in for records destroyed by damage when repair
// rewrites a rollout: one record per lost seq, so seqs stay gapless. The
// first record of a gap carries the details; the others have an empty body.
type RecordsLost struct {
	Reason   string `msgpack:"reason,omitempty" json:"reason,omitempty"`
	Offset   int64  `msgpack:"offset,omitempty" json:"offset,omitempty"` // in the original file
	Length   int64  `msgpack:"length,omitempty" json:"length,omitempty"`
	FirstSeq uint64 `msgpack:"first_seq,omitempty" json:"first_seq,omitempty"`
	LastSeq  uint64 `msgpack:"last_seq,omitempty" json:"last_seq,omitempty"`
}
