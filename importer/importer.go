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
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
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
	// RolledBack are the ids of turns the source rolled back (DotCraft):
	// Import rolls them back in the thread if they are its last turns.
	RolledBack []string
	Skips      []Skip
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

// Skip is a source line not imported, and why.
type Skip struct {
	Line   int    `json:"line"`
	Reason string `json:"reason"`
	// Later says nothing is lost: the line waits for a later import (a turn
	// still being written); it is not kept as a diagnostic.
	Later bool `json:"later,omitempty"`
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
var maxLine = 64 << 20

// ActiveWindow is how long after its last change a file may still be a
// session its tool is writing. Its last turn, unless the source marked its
// end (Claude Code's end_turn, Codex's task_complete, craft-agents' final
// message) with no tool call left without its result, is left for a later
// import rather than imported half done and kept so (an imported turn is
// not changed). 0 imports every turn. DotCraft files say whether a turn has
// ended and are read by that instead.
var ActiveWindow = time.Hour

// readFile opens path and reads it with read.
func readFile(path string, read func(io.Reader, string) (Session, error)) (Session, error) {
	f, err := os.Open(path)
	if err != nil {
		return Session{}, err
	}
	defer f.Close()
	s, err := read(f, path)
	if st, serr := f.Stat(); err == nil && serr == nil && s.Format != "dotcraft" && time.Since(st.ModTime()) < ActiveWindow {
		s.holdUnfinished()
	}
	return s, err
}

// holdUnfinished leaves out the last turn of the session and of each of
// its subagents if it looks unfinished.
func (s *Session) holdUnfinished() {
	if n := len(s.Turns); n > 0 && unfinished(s.Turns[n-1]) {
		s.Skips = append(s.Skips, Skip{Line: s.Turns[n-1].Line, Later: true,
			Reason: fmt.Sprintf("the last turn has no end yet in a file written in the last %s: imported once it has ended", ActiveWindow)})
		s.Turns = s.Turns[:n-1]
	}
	for i := range s.Subagents {
		s.Subagents[i].holdUnfinished()
	}
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

// lineScanner scans a JSON-lines file. A line longer than maxLine is not
// kept: it reads as a blank line, and its number is in long (each reader
// reports it with finish).
func lineScanner(r io.Reader) *lines { return &lines{r: bufio.NewReaderSize(r, 1<<20)} }

type lines struct {
	r    *bufio.Reader
	buf  []byte
	n    int   // the current line's number
	long []int // lines over maxLine
	err  error
}

// Scan reads the next line; false at the end or on a read error (Err).
func (l *lines) Scan() bool {
	if l.err != nil {
		return false
	}
	l.buf, l.n = l.buf[:0], l.n+1
	over := false
	for {
		chunk, err := l.r.ReadSlice('\n')
		if !over {
			if len(l.buf)+len(chunk) > maxLine {
				over, l.buf = true, l.buf[:0]
				l.long = append(l.long, l.n)
			} else {
				l.buf = append(l.buf, chunk...)
			}
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF:
			l.err = io.EOF
			return len(l.buf) > 0 || over
		case err != nil:
			l.err = err
			return false
		}
		return true
	}
}

func (l *lines) Bytes() []byte { return bytes.TrimRight(l.buf, "\r\n") }
func (l *lines) Text() string  { return string(l.Bytes()) }

// Err is the read error that ended the scan (nil at the end of the file).
func (l *lines) Err() error {
	if l.err == io.EOF {
		return nil
	}
	return l.err
}

// finish reports the lines too long to read, and orders the skips by line.
func (s *Session) finish(sc *lines) {
	for _, n := range sc.long {
		s.skip(n, "a line longer than %d MiB: not read", maxLine>>20)
	}
	slices.SortStableFunc(s.Skips, func(a, b Skip) int { return a.Line - b.Line })
}

// skip records a source line not imported, and why.
func (s *Session) skip(line int, format string, args ...any) {
	s.Skips = append(s.Skips, Skip{Line: line, Reason: fmt.Sprintf(format, args...)})
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
