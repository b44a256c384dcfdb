// Package importer reads other agent tools' session files into a neutral
// shape (Session, Turn, rollout.Item) that rolloutdb.DB.Import writes as
// threads. It imports rollout only.
//
// Damage never stops a read: a line that is not JSON, a record of a type
// the reader does not know, or a reference to a missing parent is skipped
// and reported (Skip: line and reason); a file that is not of the named
// format at all is refused (ErrWrongFormat).
//
// Formats: claude-code (Claude Code's ~/.claude/projects/<dir>/<session>.jsonl
// transcripts, with their subagents), codex (Codex's
// ~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl, the wrapped format and the
// older one), craft-agents ({workspace}/sessions/{id}/session.jsonl) and
// dotcraft (.craft/threads/active/*.jsonl and threads/archived/).
// Each reader's file says which fields it reads and where they are
// defined.
package importer

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// ErrWrongFormat: the file is not of the format it was read as.
var ErrWrongFormat = errors.New("importer: not a file of this format")

// ErrUnknownFormat: a format name this package does not read.
var ErrUnknownFormat = errors.New("importer: unknown format")

// Session is one session of another tool, as a thread to write.
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
	// total, not each turn's (craft-agents); Import gives the new turns
	// what the thread does not have yet.
	Usage *rollout.Usage
	// Parent is the SourceID of the session this one is a subagent of.
	Parent string
	Turns  []Turn
	// Subagents are the sessions this one spawned (written as subagent
	// threads with an edge from this one).
	Subagents []Session
	Skips     []Skip
}

// Turn is one user input and what the agent did for it.
type Turn struct {
	// ID is derived from the source's id of the turn's first message:
	// stable across imports.
	ID      string
	Started time.Time
	Ended   time.Time
	Model   string
	Items   []rollout.Item
	Usage   rollout.Usage
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

// Skip is a source line not imported, and why.
type Skip struct {
	Line   int    `json:"line"`
	Reason string `json:"reason"`
}

// Read reads the session file at path in the named format.
func Read(format, path string) (Session, error) {
	switch format {
	case "claude-code":
		return ReadClaudeCode(path)
	case "codex":
		return ReadCodex(path)
	case "craft-agents":
		return ReadCraftAgents(path)
	case "dotcraft":
		return ReadDotCraft(path)
	}
	return Session{}, errors.Wrapf(ErrUnknownFormat, "%q (this version reads: %s)", format, strings.Join(Formats, ", "))
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

// maxLine bounds one source line (a tool result can be large).
const maxLine = 64 << 20

// readFile opens path and reads it with read.
func readFile(path string, read func(io.Reader, string) (Session, error)) (Session, error) {
	f, err := os.Open(path)
	if err != nil {
		return Session{}, err
	}
	defer f.Close()
	return read(f, path)
}

// lineScanner scans a JSON-lines file, lines up to maxLine long.
func lineScanner(r io.Reader) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), maxLine)
	return sc
}

// skip records a source line not imported, and why.
func (s *Session) skip(line int, format string, args ...any) {
	s.Skips = append(s.Skips, Skip{Line: line, Reason: fmt.Sprintf(format, args...)})
}
