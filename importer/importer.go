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
// transcripts) and codex (Codex's ~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl,
// the wrapped format and the older one). DotCraft and craft-agents are not
// read yet.
package importer

import (
	"bufio"
	"fmt"
	"io"
	"os"
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
	// Parent is the SourceID of the session this one is a subagent of.
	Parent string
	Turns  []Turn
	Skips  []Skip
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
	// Line is the source line that started the turn.
	Line int
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
	}
	return Session{}, errors.Wrapf(ErrUnknownFormat, "%q (this version reads: claude-code, codex)", format)
}

// ThreadID is the rolloutdb thread id of a source session: the format's
// prefix and the source id, reduced to the characters thread ids allow.
func ThreadID(format, sourceID string) string {
	prefix := map[string]string{"claude-code": "cc-", "codex": "cx-"}[format]
	b := []byte(prefix)
	for i := 0; i < len(sourceID) && len(b) < rollout.MaxThreadIDLen; i++ {
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
