package importer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
)

// Reader reads one session file turn by turn, in the shape of
// bufio.Scanner:
//
//	r, err := importer.Open("codex", path)
//	defer r.Close()
//	s := r.Session() // who the session is: known now
//	for r.Next() {
//		t := r.Turn()
//	}
//	err = r.Err()    // an I/O error; damaged lines are in s.Report
//	subs := r.Subagents()
//
// Codex and Claude Code files are streamed: a turn is handed out once the
// next one starts, so a reader holds about one turn, whatever the size of
// the file. craft-agents and DotCraft files are read whole at the first
// Next (the first rewrites its file on every save; the second is a log
// that replaces turns in place), and so is a Codex file that rolls turns
// back.
type Reader struct {
	s      Session
	f      io.ReadSeeker // the file
	closer io.Closer
	sc     *lines
	dec    decoder                                         // a streamed format's lines
	load   func(r io.Reader, path string) (Session, error) // a format read whole
	queue  []Turn                                          // turns read, not yet handed out
	turn   Turn
	recent bool // the file changed within ActiveWindow
	done   bool
	err    error
	subs   []*Reader
	// opened is set for a reader whose file is opened at its first Next
	// (a subagent's own file).
	opened func(r *Reader) error
}

// decoder reads the lines of a streamed format into turns, which it hands
// to the Reader's emit.
type decoder interface {
	// line reads line n; b is nil for a line too long to read (already
	// reported). b is valid only during the call.
	line(n int, b []byte)
	// end is the end of the file: the turn being read is complete.
	end()
	// identified says the session's id is known and the file is of the
	// format.
	identified() bool
	// subagents are the sessions found in the file or beside it.
	subagents() []*Reader
}

// Open opens the session file at path in the named format and reads it
// until the session's identity is known. A file that is not of the format
// is refused (ErrWrongFormat).
func Open(format, path string) (*Reader, error) {
	rolls := false
	if format == "codex" {
		var err error
		if rolls, err = codexRollsBack(path); err != nil {
			return nil, err
		}
	}
	r := &Reader{s: Session{Format: format, SourcePath: path}}
	if err := r.setFormat(path, rolls); err != nil {
		return nil, err
	}
	if err := r.open(path); err != nil {
		return nil, err
	}
	if err := r.start(); err != nil {
		return nil, err
	}
	return r, nil
}

// setFormat picks how the format is read: streamed, or whole (a Codex
// file that rolls turns back).
func (r *Reader) setFormat(path string, rollsBack bool) error {
	switch r.s.Format {
	case "claude-code":
		r.dec = newClaudeCode(r, path)
	case "codex":
		if rollsBack {
			r.load = readCodexWhole
		} else {
			r.dec = newCodex(r)
		}
	case "craft-agents":
		r.load = readCraftAgents
	case "dotcraft":
		r.load = readDotCraft
	default:
		return errors.Wrapf(ErrUnknownFormat, "%q (this version reads: %s)", r.s.Format, strings.Join(Formats, ", "))
	}
	return nil
}

// start reads until the session's identity is known.
func (r *Reader) start() error {
	if err := r.identify(); err != nil {
		r.Close()
		return err
	}
	return nil
}

// open opens the file and notes whether its tool may still be writing it.
func (r *Reader) open(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	r.f, r.closer = f, f
	if st, err := f.Stat(); err == nil {
		r.recent = time.Since(st.ModTime()) < ActiveWindow
	}
	r.sc = lineScanner(f)
	return nil
}

// identify reads until the session's id is known: the lines of a streamed
// format (what they hold is kept), the header of one read whole.
func (r *Reader) identify() error {
	if r.load != nil {
		id, parent, err := peekID(r.s.Format, r.f, r.s.SourcePath)
		if err != nil {
			return err
		}
		r.s.SourceID, r.s.Parent = id, parent
		_, err = r.f.Seek(0, io.SeekStart)
		r.sc = lineScanner(r.f)
		return err
	}
	for !r.dec.identified() && r.scan() {
	}
	if r.err != nil {
		return r.err
	}
	if !r.dec.identified() {
		return errors.Wrapf(ErrWrongFormat, "%s is not a %s", r.s.SourcePath, formatNoun[r.s.Format])
	}
	return nil
}

var formatNoun = map[string]string{
	"claude-code":  "Claude Code transcript (no line has a type and a sessionId)",
	"codex":        "Codex session (no session_meta, no id line)",
	"craft-agents": "craft-agents session",
	"dotcraft":     "DotCraft thread rollout",
}

// scan reads one line into the decoder; false at the end of the file (or
// on an error, in r.err), once the decoder has been told of the end.
func (r *Reader) scan() bool {
	if r.done {
		return false
	}
	if r.scanAll() {
		return true
	}
	r.done = true
	if r.err != nil {
		return false
	}
	r.dec.end()
	if r.recent {
		r.queue = holdLast(r.queue, &r.s.Report)
	}
	r.subs = r.dec.subagents()
	r.s.Report.sort()
	return false
}

// scanAll reads one line into the decoder; false at the end of the file
// or on a read error (in r.err).
func (r *Reader) scanAll() bool {
	if !r.sc.Scan() {
		if err := r.sc.Err(); err != nil {
			r.err = errors.Wrapf(err, "read %s", r.s.SourcePath)
		}
		return false
	}
	n := r.sc.n
	if r.sc.long {
		r.s.Report.damaged(n, "", "a line longer than %d MiB: not read", maxLine>>20)
		r.dec.line(n, nil)
		return true
	}
	// A byte order mark before the first line is not the line's.
	if b := bytes.TrimSpace(bytes.TrimPrefix(r.sc.Bytes(), []byte("\xef\xbb\xbf"))); len(b) > 0 {
		r.dec.line(n, b)
	}
	return true
}

// emit hands a turn the decoder completed to the reader.
func (r *Reader) emit(t Turn) { r.queue = append(r.queue, t) }

// Next advances to the next turn; false at the end of the session, or on
// an error (Err).
func (r *Reader) Next() bool {
	if r.opened != nil {
		open := r.opened
		r.opened = nil
		if r.err = open(r); r.err != nil {
			r.done = true
			return false
		}
	}
	if r.load != nil {
		r.readWhole()
	}
	for len(r.queue) == 0 && r.scan() {
	}
	if len(r.queue) == 0 {
		return false
	}
	r.turn = r.queue[0]
	r.queue[0] = Turn{}
	r.queue = r.queue[1:]
	return true
}

// readWhole reads a format read whole: every turn, at once.
func (r *Reader) readWhole() {
	load := r.load
	r.load, r.done = nil, true
	s, err := load(r.sc, r.s.SourcePath)
	if err != nil {
		r.err = err
		return
	}
	s.Format, s.SourcePath = r.s.Format, r.s.SourcePath
	if r.recent && s.Format != "dotcraft" { // DotCraft says itself whether a turn has ended
		s.Turns = holdLast(s.Turns, &s.Report)
	}
	for i := range s.Subagents {
		r.subs = append(r.subs, sessionReader(s.Subagents[i], r.recent))
	}
	r.queue, s.Turns, s.Subagents = s.Turns, nil, nil
	s.Report.sort()
	r.s = s
}

// sessionReader hands out the turns of a session already read (a
// subagent found inside its parent's file).
func sessionReader(s Session, recent bool) *Reader {
	if recent && s.Format != "dotcraft" {
		s.Turns = holdLast(s.Turns, &s.Report)
	}
	r := &Reader{s: s, queue: s.Turns, done: true}
	for i := range s.Subagents {
		r.subs = append(r.subs, sessionReader(s.Subagents[i], recent))
	}
	r.s.Turns, r.s.Subagents = nil, nil
	r.s.Report.sort()
	return r
}

// Turn returns the turn Next advanced to.
func (r *Reader) Turn() Turn { return r.turn }

// Session returns the session being read: its identity from Open on, the
// rest (name, labels, report) complete once Next has returned false.
func (r *Reader) Session() *Session { return &r.s }

// Err returns the error that stopped the read (nil at the end of the file):
// an I/O error, or a file that turned out not to be of the format.
func (r *Reader) Err() error { return r.err }

// Subagents returns the readers of the session's subagents, once Next has
// returned false: the subagents inside the file and those in files beside
// it (opened at their first Next).
func (r *Reader) Subagents() []*Reader { return r.subs }

// Close closes the file.
func (r *Reader) Close() error {
	if r.closer == nil {
		return nil
	}
	err := r.closer.Close()
	r.closer = nil
	return err
}

// Read reads the whole session file at path in the named format: its
// turns, and its subagents' sessions with theirs.
func Read(format, path string) (Session, error) {
	r, err := Open(format, path)
	if err != nil {
		return Session{}, err
	}
	defer r.Close()
	return r.readAll()
}

func (r *Reader) readAll() (Session, error) {
	var turns []Turn
	for r.Next() {
		turns = append(turns, r.Turn())
	}
	s := r.s
	s.Turns = turns
	if r.err != nil {
		return s, r.err
	}
	for _, sub := range r.subs {
		ss, err := sub.readAll()
		sub.Close()
		if err != nil {
			return s, err
		}
		s.Subagents = append(s.Subagents, ss)
	}
	return s, nil
}

// maxLine bounds one source line (a tool result can be large).
var maxLine = 64 << 20

// lineScanner scans a JSON-lines file. A line longer than maxLine is not
// kept: long says so.
func lineScanner(r io.Reader) *lines { return &lines{r: bufio.NewReaderSize(r, 1<<20)} }

type lines struct {
	r    *bufio.Reader
	buf  []byte
	n    int  // the current line's number
	long bool // the current line is longer than maxLine
	err  error
}

// Read makes lines an io.Reader of the rest of the file (for a format read
// whole once its header was peeked at: the file starts over).
func (l *lines) Read(p []byte) (int, error) { return l.r.Read(p) }

// Scan reads the next line; false at the end or on a read error (Err).
func (l *lines) Scan() bool {
	if l.err != nil {
		return false
	}
	l.buf, l.n, l.long = l.buf[:0], l.n+1, false
	for {
		chunk, err := l.r.ReadSlice('\n')
		if !l.long {
			if len(l.buf)+len(chunk) > maxLine {
				l.long, l.buf = true, l.buf[:0]
			} else {
				l.buf = append(l.buf, chunk...)
			}
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF:
			l.err = io.EOF
			return len(l.buf) > 0 || l.long
		case err != nil:
			l.err = err
			return false
		}
		return true
	}
}

// Bytes is the current line without its line end.
func (l *lines) Bytes() []byte { return bytes.TrimRight(l.buf, "\r\n") }

// Err is the read error that ended the scan (nil at the end of the file).
func (l *lines) Err() error {
	if l.err == io.EOF {
		return nil
	}
	return l.err
}

// peekID reads the id of a session in a format read whole, and of its
// parent session, from its first lines: craft-agents' header, DotCraft's
// thread_opened.
func peekID(format string, f io.Reader, path string) (id, parent string, err error) {
	sc := lineScanner(f)
	for sc.Scan() {
		b := bytes.TrimSpace(bytes.TrimPrefix(sc.Bytes(), []byte("\xef\xbb\xbf")))
		if len(b) == 0 || sc.long {
			continue
		}
		switch format {
		case "craft-agents":
			var h caHeader
			if err := json.Unmarshal(b, &h); err != nil || h.ID == "" || h.CreatedAt == nil || h.MessageCount == nil && h.Workspace == nil {
				return "", "", errors.Wrapf(ErrWrongFormat, "%s is not a craft-agents session (its first line is not a session header with id, createdAt and messageCount)", path)
			}
			return h.ID, "", nil
		case "dotcraft":
			var l dcLine
			if json.Unmarshal(b, &l) == nil && l.Kind == "thread_opened" && l.Opened != nil && l.Opened.ThreadID != "" {
				if parent = dcParent(l); parent == l.Opened.ThreadID {
					parent = ""
				}
				return l.Opened.ThreadID, parent, nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", errors.Wrapf(err, "read %s", path)
	}
	if format == "craft-agents" {
		return "", "", errors.Wrapf(ErrWrongFormat, "%s is empty", path)
	}
	return "", "", errors.Wrapf(ErrWrongFormat, "%s is not a DotCraft thread rollout (no thread_opened record)", path)
}
