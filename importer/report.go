package importer

import (
	"fmt"
	"slices"
)

// Report is what reading a session file found besides its turns, in
// four parts kept apart: damaged lines (something is lost), record types
// this version does not know (a newer version of the tool wrote them:
// counted, so that it is noticed), record types known to carry nothing a
// thread keeps (counted, not listed), and notes on what the import did
// differently from the source (nothing of the file is damaged).
type Report struct {
	Damaged []Damage  `json:"damaged"`
	Unknown []Unknown `json:"unknown"`
	// Ignored counts the lines of each type passed over by design.
	Ignored map[string]int `json:"ignored"`
	Notes   []Note         `json:"notes"`
}

// Damage is a source line that could not be read whole: not JSON, cut
// off, or of a known type with a field that does not read. Field names
// the field ("" for the line itself).
type Damage struct {
	Line   int    `json:"line"`
	Field  string `json:"field,omitempty"`
	Reason string `json:"reason"`
}

// Unknown is a record type (a type and its subtype, "event_msg/x") that
// this version does not read: how many lines, and the first.
type Unknown struct {
	Type      string `json:"type"`
	Count     int    `json:"count"`
	FirstLine int    `json:"first_line"`
}

// Note is something the import did other than the source did, and why:
// a last turn left for a later import (Later), a session archived in its
// tool imported active, a message cut to fit a record.
type Note struct {
	Line   int    `json:"line,omitempty"`
	Reason string `json:"reason"`
	// Later says nothing is lost: what the note is about waits for a
	// later import (a turn still being written).
	Later bool `json:"later,omitempty"`
	// Lost says the note is about something not imported whole: it is
	// kept as a diagnostic of the thread.
	Lost bool `json:"lost,omitempty"`
}

// damaged records a damaged line.
func (r *Report) damaged(line int, field, format string, args ...any) {
	r.Damaged = append(r.Damaged, Damage{Line: line, Field: field, Reason: fmt.Sprintf(format, args...)})
}

// unknown counts a line of a type this version does not know.
func (r *Report) unknown(line int, typ string) {
	for i := range r.Unknown {
		if r.Unknown[i].Type == typ {
			r.Unknown[i].Count++
			return
		}
	}
	r.Unknown = append(r.Unknown, Unknown{Type: typ, Count: 1, FirstLine: line})
}

// ignore counts a line of a type passed over by design.
func (r *Report) ignore(typ string) {
	if r.Ignored == nil {
		r.Ignored = map[string]int{}
	}
	r.Ignored[typ]++
}

// note records what the import does differently from the source.
func (r *Report) note(line int, format string, args ...any) {
	r.Notes = append(r.Notes, Note{Line: line, Reason: fmt.Sprintf(format, args...)})
}

// lost records a note about something not imported whole.
func (r *Report) lost(line int, format string, args ...any) {
	r.Notes = append(r.Notes, Note{Line: line, Reason: fmt.Sprintf(format, args...), Lost: true})
}

// sort orders the damage and the notes by line.
func (r *Report) sort() {
	slices.SortStableFunc(r.Damaged, func(a, b Damage) int { return a.Line - b.Line })
	slices.SortStableFunc(r.Notes, func(a, b Note) int { return a.Line - b.Line })
}

// IgnoredLines is how many lines were ignored, of every type.
func (r *Report) IgnoredLines() int {
	n := 0
	for _, c := range r.Ignored {
		n += c
	}
	return n
}

// UnknownLines is how many lines were of a type this version does not
// know.
func (r *Report) UnknownLines() int {
	n := 0
	for _, u := range r.Unknown {
		n += u.Count
	}
	return n
}
