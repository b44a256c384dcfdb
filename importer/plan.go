package importer

import (
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// ErrDiverged is returned when a session and the thread made from it
// before went different ways: the thread has turns after their common
// start that the session has not (another file of the session that went
// on otherwise, or turns a host added to the imported thread). Nothing is
// written.
var ErrDiverged = errors.New("importer: the session and its thread diverge")

// Thread is what an import knows of the thread a session goes into; the
// zero value is a thread not made yet.
type Thread struct {
	Exists bool
	// Turns are its visible turns' ids, in order; Checkpoints its
	// checkpoints' ids.
	Turns       []string
	Checkpoints []string
	Name        string
	Labels      []string
	Flags       map[string]bool
	State       string
	Usage       rollout.Usage
}

// Limits bound what a plan puts in a frame and in a record.
type Limits struct {
	// Frame bounds the bytes of record bodies in one frame. Default 4 MiB.
	Frame int
	// Record bounds one record's body: a longer message is cut, a longer
	// exact model history left out. Default 12 MiB.
	Record int
}

// Frame is one frame a plan writes: its records, and the turns and
// checkpoints that are whole once it is durable.
type Frame struct {
	Records     []rollout.Record
	Turns       int
	Checkpoints int
	RolledBack  int
}

// Plan turns a session, read turn by turn, into the frames that bring its
// thread up to the session: the thread's turns are the session's first
// ones (a session that has grown gets its new turns, one that is a prefix
// of the thread gets nothing), or the session is refused (ErrDiverged).
// It is the conversion of a session into records, and writes nothing.
//
// Turns are whole, several to a frame (a turn larger than a frame in
// several, its end record in the last). A turn already in the thread is
// not changed, even if the source added to it since. A compaction the
// session has after the last turn the thread has is a checkpoint frame of
// its own (trigger manual), before the new turns. The source's rollback
// of turns the thread has last is a thread_rolled_back. The source's
// name, labels, flags and status are a metadata_updated at the session's
// last activity, where the thread differs.
type Plan struct {
	s     *Session
	th    Thread
	lim   Limits
	spill func(rollout.Item) (rollout.Item, error)

	started  bool
	visible  []string // the thread's turns after the source's rollback
	at       map[string]int
	haveCP   map[string]bool
	next     int // the index in visible of the next turn the session must have
	between  *Checkpoint
	covered  string
	pending  *Turn // the last new turn, written at the next Add or Finish
	newUsage rollout.Usage
	last     time.Time

	batch              []rollout.Record
	size               int
	batchTurns, batchK int
	out                []Frame
	notes              []Note
	existing           int
}

// NewPlan starts the plan of session s into thread th. s is the Reader's
// (Reader.Session): what a plan needs of it late (RolledBack, the name, a
// session-wide usage) is read when it is complete. spill, if set, may
// move a large tool output out of an item (the facade's artifacts).
func NewPlan(s *Session, th Thread, lim Limits, spill func(rollout.Item) (rollout.Item, error)) *Plan {
	if lim.Frame <= 0 {
		lim.Frame = 4 << 20
	}
	if lim.Record <= 0 {
		lim.Record = 12 << 20
	}
	return &Plan{s: s, th: th, lim: lim, spill: spill}
}

// Existing is how many of the session's turns the thread already has.
func (p *Plan) Existing() int { return p.existing }

// Notes are what the plan did other than the source (a message cut, a
// compaction left out).
func (p *Plan) Notes() []Note { return p.notes }

// begin compares the thread with the session's rollbacks, once.
func (p *Plan) begin() {
	p.started = true
	p.haveCP = map[string]bool{}
	for _, c := range p.th.Checkpoints {
		p.haveCP[c] = true
	}
	p.last = p.s.Created
	turns := p.th.Turns
	// The source rolled back turns this thread has last: so does it.
	n := 0
	for i := len(turns) - 1; i >= 0 && slices.Contains(p.s.RolledBack, turns[i]); i-- {
		n++
	}
	p.visible = turns[:len(turns)-n]
	p.at = map[string]int{}
	for i, t := range p.visible {
		p.at[t] = i
	}
	if n > 0 {
		rec, err := rollout.NewRecord(rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: n})
		if err == nil {
			p.out = append(p.out, Frame{Records: []rollout.Record{rec}, RolledBack: n})
		}
	}
}

// Add takes the session's next turn and returns the frames now ready to
// write.
func (p *Plan) Add(t Turn) ([]Frame, error) {
	if !p.started {
		p.begin()
	}
	if t.Ended.After(p.last) {
		p.last = t.Ended
	}
	if p.next < len(p.visible) && p.visible[p.next] == t.ID {
		p.existing++
		p.next++
		cp := t.Checkpoint
		if cp != nil && p.haveCP[cp.ID] {
			cp = nil
		}
		if p.between != nil {
			p.notes = append(p.notes, Note{Line: p.between.Line, Reason: "a compaction inside the history imported before: not added"})
		}
		p.between, p.covered = cp, t.ID
		return p.take(), nil
	}
	if i, ok := p.at[t.ID]; ok {
		return nil, errors.Wrapf(ErrDiverged, "turn %s (line %d) is the thread's turn %d, not its turn %d", t.ID, t.Line, i+1, p.next+1)
	}
	if p.next < len(p.visible) {
		after := "its start"
		if p.next > 0 {
			after = "turn " + p.visible[p.next-1]
		}
		return nil, errors.Wrapf(ErrDiverged, "after %s the thread has %d turn(s) the session has not, and the session turn %s (line %d) the thread has not",
			after, len(p.visible)-p.next, t.ID, t.Line)
	}
	if err := p.writeBetween(); err != nil {
		return nil, err
	}
	if p.pending != nil {
		if err := p.encode(*p.pending); err != nil {
			return nil, err
		}
	}
	p.newUsage = addUsage(p.newUsage, t.Usage)
	p.pending = &t
	return p.take(), nil
}

// Finish returns the last frames: the last new turn, and the metadata.
func (p *Plan) Finish() ([]Frame, error) {
	if !p.started {
		p.begin()
	}
	if err := p.writeBetween(); err != nil {
		return nil, err
	}
	if t := p.pending; t != nil {
		if u := p.s.Usage; u != nil {
			// The source keeps the session's total only: the new turns
			// get what the thread does not have yet, on the last of them.
			t.Usage = addUsage(t.Usage, subUsage(*u, addUsage(p.th.Usage, p.newUsage)))
		}
		p.pending = nil
		if err := p.encode(*t); err != nil {
			return nil, err
		}
	}
	p.flush()
	if u := metadata(p.s, p.th); u != nil {
		rec, err := rollout.NewRecord(rollout.KindMetadataUpdated, "", *u)
		if err != nil {
			return nil, err
		}
		// At the session's last activity, not now: List orders by it.
		rec.Time = p.last
		p.out = append(p.out, Frame{Records: []rollout.Record{rec}})
	}
	return p.take(), nil
}

func (p *Plan) take() []Frame {
	out := p.out
	p.out = nil
	return out
}

// writeBetween writes a compaction found after the last turn the thread
// has, in a frame of its own (as a host's manual one between turns).
func (p *Plan) writeBetween() error {
	c := p.fit(p.between)
	p.between = nil
	if c == nil {
		return nil
	}
	rec, err := checkpointRecord(*c, p.covered, rollout.TriggerManual, "")
	if err != nil {
		return errors.Wrapf(err, "compaction at line %d", c.Line)
	}
	p.out = append(p.out, Frame{Records: []rollout.Record{rec}, Checkpoints: 1})
	return nil
}

// encode puts a new turn's records in the batch, flushing frames as they
// fill.
func (p *Plan) encode(t Turn) error {
	t.Checkpoint = p.fit(t.Checkpoint)
	recs, err := p.turnRecords(t)
	if err != nil {
		return errors.Wrapf(err, "turn at line %d", t.Line)
	}
	size := 0
	for _, r := range recs {
		size += len(r.Body)
	}
	if p.size+size > p.lim.Frame || len(p.batch)+len(recs) > rollout.MaxRecordsPerFrame {
		p.flush()
	}
	for _, r := range recs {
		if len(p.batch) > 0 && (p.size+len(r.Body) > p.lim.Frame || len(p.batch) == rollout.MaxRecordsPerFrame) {
			p.flush()
		}
		p.batch, p.size = append(p.batch, r), p.size+len(r.Body)
	}
	p.batchTurns++
	if t.Checkpoint != nil {
		p.batchK++
	}
	return nil
}

func (p *Plan) flush() {
	if len(p.batch) == 0 {
		return
	}
	p.out = append(p.out, Frame{Records: p.batch, Turns: p.batchTurns, Checkpoints: p.batchK})
	p.batch, p.size, p.batchTurns, p.batchK = nil, 0, 0, 0
}

// fit is c if it fits a record, else nil (the turns before it stand in
// for it: resume reads them), with a note.
func (p *Plan) fit(c *Checkpoint) *Checkpoint {
	if c == nil {
		return nil
	}
	n := 0
	for _, m := range c.History {
		n += len(m)
	}
	if n <= p.lim.Record {
		return c
	}
	// Not its summary alone: it stands for the whole turn, and would lose
	// what followed it.
	p.notes = append(p.notes, Note{Line: c.Line, Lost: true, Reason: fmt.Sprintf("compaction %s: %d bytes, too large for a record: not written (resume reads the turns instead)", c.ID, n)})
	return nil
}

// turnRecords are the records of one turn, with the source's times: its
// start, and its last activity for the rest. What cannot be written as it
// is (a message over Limits.Record) is cut, or left out, with a note.
func (p *Plan) turnRecords(t Turn) ([]rollout.Record, error) {
	at := func(ts time.Time) time.Time {
		if ts.IsZero() {
			return time.Now()
		}
		return ts
	}
	end := at(t.Ended)
	start, err := rollout.NewRecord(rollout.KindTurnStarted, t.ID, rollout.TurnStarted{Model: t.Model, Metadata: t.Metadata})
	if err != nil {
		return nil, err
	}
	start.Time = at(t.Started)
	recs := make([]rollout.Record, 0, len(t.Items)+3)
	recs = append(recs, start)
	for _, it := range t.Items {
		if p.spill != nil {
			if it, err = p.spill(it); err != nil {
				return nil, err
			}
		}
		if len(it.Text)+len(it.Arguments) > p.lim.Record {
			n := len(it.Text)
			it.Text = truncateUTF8(it.Text, p.lim.Record/2) + fmt.Sprintf("\n[cut by import: %d bytes]", n)
			it.Arguments = truncateUTF8(it.Arguments, p.lim.Record/4)
			p.notes = append(p.notes, Note{Line: t.Line, Lost: true, Reason: fmt.Sprintf("item %s of turn %s: %d bytes of text, cut to %d", it.ID, t.ID, n, p.lim.Record/2)})
		}
		if it.ID == "" {
			it.ID = rollout.NewID()
		}
		if it.Status == "" {
			it.Status = rollout.ItemCompleted
		}
		rec, err := rollout.NewRecord(rollout.KindItemAppended, t.ID, it)
		if err != nil {
			return nil, err
		}
		rec.Time = end
		recs = append(recs, rec)
	}
	// The exact history in records of at most a frame's bytes of messages
	// (resume joins them); a message too large for a record leaves the
	// turn's history to be rebuilt from its items.
	var chunk [][]byte
	size := 0
	var history []rollout.Record
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		rec, err := rollout.NewRecord(rollout.KindModelHistoryAppended, t.ID, rollout.ModelHistory{Messages: chunk})
		rec.Time = end
		history, chunk, size = append(history, rec), nil, 0
		return err
	}
	for _, m := range t.ModelHistory {
		if len(m) > p.lim.Record {
			p.notes = append(p.notes, Note{Line: t.Line, Lost: true, Reason: fmt.Sprintf("turn %s: a model message of %d bytes: its exact history is left out (rebuilt from its items)", t.ID, len(m))})
			history, chunk = nil, nil
			break
		}
		if size+len(m) > p.lim.Frame {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		chunk, size = append(chunk, m), size+len(m)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	recs = append(recs, history...)
	if t.Checkpoint != nil {
		rec, err := checkpointRecord(*t.Checkpoint, t.ID, rollout.TriggerPostTurn, t.ID)
		if err != nil {
			return nil, err
		}
		rec.Time = end
		recs = append(recs, rec)
	}
	var last rollout.Record
	if t.Aborted != "" {
		last, err = rollout.NewRecord(rollout.KindTurnAborted, t.ID, rollout.TurnAborted{Reason: t.Aborted})
	} else {
		last, err = rollout.NewRecord(rollout.KindTurnCompleted, t.ID, rollout.TurnCompleted{Status: rollout.TurnStatusCompleted, Usage: t.Usage})
	}
	if err != nil {
		return nil, err
	}
	last.Time = end
	return append(recs, last), nil
}

// checkpointRecord is the checkpoint record of a source's compaction after
// the turn covered, in turn (or between turns: "").
func checkpointRecord(c Checkpoint, covered, trigger, turn string) (rollout.Record, error) {
	return rollout.NewRecord(rollout.KindCheckpoint, turn, rollout.Checkpoint{ID: c.ID, CoveredTurn: covered, ReplacementHistory: c.History,
		TokensBefore: c.TokensBefore, TokensAfter: c.TokensAfter, Trigger: trigger})
}

// metadata is the update that makes the thread say what the source says
// (nil: nothing to change). The source's say wins; a label it dropped, or
// a status it cleared, stays.
func metadata(s *Session, th Thread) *rollout.MetadataUpdated {
	var u rollout.MetadataUpdated
	set := false
	if s.Name != "" && th.Name != s.Name {
		name := s.Name
		u.Name, set = &name, true
	}
	var add []string
	for _, l := range s.Labels {
		if l != "" && !slices.Contains(th.Labels, l) && !slices.Contains(add, l) {
			add = append(add, l)
		}
	}
	if len(add) > 0 {
		// The record holds the whole set.
		u.Labels, set = append(slices.Clone(th.Labels), add...), true
	}
	for k, v := range s.Flags {
		if k != "" && th.Flags[k] != v {
			if u.Flags == nil {
				u.Flags = map[string]bool{}
			}
			u.Flags[k], set = v, true
		}
	}
	if s.State != "" && th.State != s.State {
		state := s.State
		u.Status, set = &state, true
	}
	if !set {
		return nil
	}
	return &u
}

func addUsage(a, b rollout.Usage) rollout.Usage {
	return rollout.Usage{InputTokens: a.InputTokens + b.InputTokens, CachedInputTokens: a.CachedInputTokens + b.CachedInputTokens,
		OutputTokens: a.OutputTokens + b.OutputTokens, ReasoningTokens: a.ReasoningTokens + b.ReasoningTokens, TotalTokens: a.TotalTokens + b.TotalTokens}
}

// subUsage is a-b, no field below zero.
func subUsage(a, b rollout.Usage) rollout.Usage {
	d := func(x, y int64) int64 { return max(x-y, 0) }
	return rollout.Usage{InputTokens: d(a.InputTokens, b.InputTokens), CachedInputTokens: d(a.CachedInputTokens, b.CachedInputTokens),
		OutputTokens: d(a.OutputTokens, b.OutputTokens), ReasoningTokens: d(a.ReasoningTokens, b.ReasoningTokens), TotalTokens: d(a.TotalTokens, b.TotalTokens)}
}

// truncateUTF8 is s cut to at most n bytes, at a rune boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
