package importer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// ErrWrongFormat is returned when the file is not of the format it was read
// as.
var ErrWrongFormat = errors.New("importer: not a file of this format")

// ErrUnknownFormat is returned for a format name this package does not
// read.
var ErrUnknownFormat = errors.New("importer: unknown format")

// Session is one session of another tool, as a thread to write. A Reader
// fills it as it reads: its identity (Format, SourceID, SourcePath,
// Parent, Created) once Open returns, the rest once Next has returned
// false. Turns and Subagents are filled by Read only (a Reader hands out
// turns one by one).
type Session struct {
	// Format names the source format ("claude-code").
	Format string
	// SourceID is the source's session id; the thread id is derived from
	// it (ThreadID), so importing the same session again finds the same
	// thread.
	SourceID   string
	SourcePath string
	Name       string
	Created    time.Time
	// Labels, Flags and State are the source's labels, flags and status
	// of the session, where it keeps them (craft-agents).
	Labels []string
	Flags  map[string]bool
	State  string
	// Usage is the session's token usage where the source keeps only the
	// total, not each turn's (craft-agents); an import gives the new
	// turns what the thread does not have yet.
	Usage *rollout.Usage
	// Parent is the SourceID of the session this one is a subagent of.
	Parent string
	Turns  []Turn
	// Subagents are the sessions this one spawned (written as subagent
	// threads with an edge from this one).
	Subagents []Session
	// RolledBack are the ids of turns the source rolled back (DotCraft,
	// Codex), none of them a turn the session still has: an import rolls
	// them back in the thread if they are its last turns. It is complete
	// once Next has been called.
	RolledBack []string
	// Report is what the read found besides turns.
	Report Report
}

// Turn is one user input and what the agent did for it.
type Turn struct {
	// ID is derived from the source's id of the turn's first message (or,
	// where the source has none, from that line's place and bytes):
	// stable across imports, and different for a different prompt.
	ID      string
	Started time.Time
	Ended   time.Time
	Model   string
	// Metadata is the turn's settings in the source (Codex's turn
	// context: cwd, effort, approval and sandbox policy), written as the
	// turn's metadata.
	Metadata map[string]string
	Items    []rollout.Item
	Usage    rollout.Usage
	// ModelHistory is the exact model history of the turn where the
	// source keeps it: the provider messages as the source stored them,
	// one JSON value each (Claude Code's "message", Codex's response
	// items).
	ModelHistory [][]byte
	// Checkpoint is a compaction the source recorded after this turn.
	Checkpoint *Checkpoint
	// Aborted is why the turn did not complete in the source ("": it
	// completed): it is written as aborted.
	Aborted string
	// ended says the source marked the turn's end (Claude Code's end_turn,
	// Codex's task_complete, craft-agents' final message): a turn at the
	// end of a file still written is imported only once it has ended.
	ended bool
	// Line is the source line that started the turn.
	Line int
}

// Checkpoint is a compaction of the source: what stands for the model
// history through the turn it follows.
type Checkpoint struct {
	// ID is derived from the source (stable across imports).
	ID string
	// History is the replacement history: the summary, as the source's
	// model messages (JSON values), or its text where that is all there is.
	History      [][]byte
	TokensBefore int64
	TokensAfter  int64
	Line         int
}

// Formats are the formats Read reads.
var Formats = []string{"claude-code", "codex", "craft-agents", "dotcraft"}

// ThreadID is the rolloutdb thread id of a source session: the format's
// prefix and the source id, reduced to the characters thread ids allow.
// An id too long for a thread id keeps its start and ends in a digest of
// the whole, so two long ids with the same start stay two threads.
func ThreadID(format, sourceID string) string {
	prefix := map[string]string{"claude-code": "cc-", "codex": "cx-", "craft-agents": "ca-", "dotcraft": "dc-"}[format]
	b := []byte(prefix)
	if len(prefix)+len(sourceID) > rollout.MaxThreadIDLen {
		sum := sha256.Sum256([]byte(sourceID))
		digest := "-" + hex.EncodeToString(sum[:8])
		return ThreadID(format, sourceID[:rollout.MaxThreadIDLen-len(prefix)-len(digest)]) + digest
	}
	for i := 0; i < len(sourceID); i++ {
		c := sourceID[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			b = append(b, c)
		case c >= 'A' && c <= 'Z':
			b = append(b, c+'a'-'A')
		default:
			b = append(b, '_')
		}
	}
	return string(b)
}

// ActiveWindow is how long after its last change a file may still be a
// session its tool is writing. Its last turn, unless the source marked its
// end (Claude Code's end_turn, Codex's task_complete, craft-agents' final
// message) with no tool call left without its result, is left for a later
// import rather than imported half done and kept so (an imported turn is
// not changed). 0 imports every turn. DotCraft files say whether a turn has
// ended and are read by that instead.
var ActiveWindow = time.Hour

// holdLast leaves out the last turn of turns if it looks unfinished,
// with a note that it waits for a later import.
func holdLast(turns []Turn, rep *Report) []Turn {
	if n := len(turns); n > 0 && unfinished(turns[n-1]) {
		rep.Notes = append(rep.Notes, Note{Line: turns[n-1].Line, Later: true,
			Reason: fmt.Sprintf("the last turn has no end yet in a file written in the last %s: imported once it has ended", ActiveWindow)})
		return turns[:n-1]
	}
	return turns
}

// unfinished reports whether the source has not marked the turn's end, or
// the turn has a tool call without its result, or it ends before the agent
// answered what its tools returned.
func unfinished(t Turn) bool {
	if !t.ended {
		return true
	}
	open := map[string]bool{}
	for _, it := range t.Items {
		switch it.Type {
		case rollout.ItemToolCall:
			open[it.CallID] = true
		case rollout.ItemToolResult:
			delete(open, it.CallID)
		}
	}
	if len(open) > 0 || len(t.Items) == 0 {
		return true
	}
	last := t.Items[len(t.Items)-1].Type
	return last == rollout.ItemToolResult || last == rollout.ItemReasoning || last == rollout.ItemUserMessage
}

// sourceTime is a timestamp of a source (RFC 3339); one that does not
// parse, or lies outside [1971, now + 2 days], is unknown (zero): a
// record's time is stored as Unix nanoseconds, and a clock far off would
// pin a thread to the top of a list.
func sourceTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return plausible(t)
}

// plausible is t, or zero if it lies outside [1971, now + 2 days].
func plausible(t time.Time) time.Time {
	if t.Year() < 1971 || t.After(time.Now().Add(48*time.Hour)) {
		return time.Time{}
	}
	return t.UTC()
}

// turnID is the turn id of a source id: "t-" and the id, or for an id too
// long for a record's turn field, its start and a digest of the whole.
func turnID(id string) string {
	const keep = 100
	if len(id) <= keep {
		return "t-" + id
	}
	sum := sha256.Sum256([]byte(id))
	cut := keep - 17
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	return "t-" + id[:cut] + "-" + hex.EncodeToString(sum[:8])
}
