package recovery

import (
	"slices"
	"strings"

	"github.com/rolloutdb/rolloutdb/compaction"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// replay applies records and damage, in file order, to a thread state.
type replay struct {
	opts  Options
	st    *State
	turns map[string]*Turn
	order []*Turn // visible turns in order; a rollback pops from the end
	open  *Turn   // the turn started and not yet ended, if any
	cands []compaction.Candidate
	meta  Metadata
	seen  bool // header seen
	// partial says replay started at a checkpoint's frame, so turns before
	// it are unseen. poppedUnseen counts rollbacks reaching past the turns
	// seen, dropped the turns seen and rolled back.
	partial      bool
	poppedUnseen int
	dropped      map[string]bool
	// covered maps a checkpoint candidate (by seq) to the turn it covered
	// when it was written, so that a turn id reused after a rollback does
	// not revive the checkpoint of the turn rolled back.
	covered map[uint64]*Turn
	// identityOnly says only headers are decoded and checked
	// (CheckIdentity); no state is built.
	identityOnly bool
	slab         []Turn // where the next turns are allocated
}

func newReplay(opts Options) *replay {
	return &replay{opts: opts, st: &State{}, turns: map[string]*Turn{}, dropped: map[string]bool{}, covered: map[uint64]*Turn{}}
}

func (p *replay) skip(s Skipped) { p.st.Report.Skipped = append(p.st.Report.Skipped, s) }

// damage records a damaged region and ties it to the turn open at that
// point, if any: the lost records may have been that turn's.
func (p *replay) damage(d *rollout.CorruptionError) {
	s := toSkipped(d)
	if p.open != nil && (s.Length > 0 || s.SeqGap > 0) {
		s.Turn = p.open.ID
		p.open.damageTied = true
	}
	p.skip(s)
}

// header checks the first record: it must be seq 1, thread_opened, decode,
// and name the thread and workspace asked for.
func (p *replay) header(rec rollout.Record, fileThread string) error {
	if rec.Seq != 1 || rec.Kind != rollout.KindThreadOpened {
		return identityError(ErrNoHeader, hintInspect, "%s: first surviving record is %s seq %d", p.opts.Path, rec.Kind, rec.Seq)
	}
	var h rollout.ThreadOpened
	if err := rec.Decode(&h); err != nil {
		return identityError(ErrNoHeader, hintInspect, "%s: header does not decode: %v", p.opts.Path, err)
	}
	switch {
	case h.ThreadID != fileThread:
		return identityError(ErrThreadMismatch, hintInspect, "%s: header names thread %q, the file header %q", p.opts.Path, h.ThreadID, fileThread)
	case p.opts.ThreadID != "" && h.ThreadID != p.opts.ThreadID:
		return identityError(ErrThreadMismatch, hintInspect, "%s: holds thread %q, not %q", p.opts.Path, h.ThreadID, p.opts.ThreadID)
	case p.opts.WorkspaceID != "" && h.WorkspaceID != p.opts.WorkspaceID:
		return identityError(ErrWorkspaceMismatch, "the rollout was copied from another workspace; import it explicitly instead of resuming it here",
			"%s: thread %s belongs to workspace %q, not %q", p.opts.Path, h.ThreadID, h.WorkspaceID, p.opts.WorkspaceID)
	}
	p.st.Header, p.seen = h, true
	return nil
}

func sameIdentity(a, b rollout.ThreadOpened) bool {
	return a.ThreadID == b.ThreadID && a.WorkspaceID == b.WorkspaceID && a.Source == b.Source
}

// turn returns the turn a record belongs to, creating it when its start
// record was lost (its items are not thrown away with it).
func (p *replay) turn(id string, seq uint64, off int64) *Turn {
	if n := len(p.order); n > 0 && p.order[n-1].ID == id {
		return p.order[n-1] // the usual case: the turn of the record before
	}
	if t, ok := p.turns[id]; ok {
		return t
	}
	if p.dropped[id] {
		return nil // rolled back: a late record does not bring it back
	}
	if len(p.slab) == 0 {
		// Turns live as long as the state: one allocation for many, grown
		// with the thread so that a short one wastes little.
		p.slab = make([]Turn, min(max(len(p.order), 4), 64))
	}
	t := &p.slab[0]
	p.slab = p.slab[1:]
	*t = Turn{ID: id, StartSeq: seq, StartOffset: off}
	p.turns[id] = t
	p.order = append(p.order, t)
	return t
}

// decoded is one surviving record with its body decoded (the part of
// replay that needs no state, so it can run ahead on another goroutine),
// or one damaged region (dmg set) met before the next record.
type decoded struct {
	off  int64
	rec  rollout.Record
	item rollout.Item // an item_appended body
	body any          // any other known kind's body
	err  error        // the body did not decode
	done bool         // decode ran
	dmg  *rollout.CorruptionError
}

// decode decodes d's body as record will use it, unless it has been. It
// reads nothing of p's state but identityOnly, which is set before replay
// starts, so the pipelined drain runs it on either goroutine.
func (p *replay) decode(d *decoded) {
	if d.done {
		return
	}
	d.done = true
	switch {
	case p.identityOnly:
		if d.rec.Kind == rollout.KindThreadOpened { // the only kind checked
			d.body, d.err = d.rec.DecodeBody()
		}
	case d.rec.Kind == rollout.KindItemAppended:
		// The most frequent record: decoded by value, no Item allocated.
		d.item, d.err = d.rec.DecodeItem()
	case d.rec.Kind.Known():
		d.body, d.err = d.rec.DecodeBody()
	}
}

// record applies one surviving record, decoded by decode. Only identity
// failures are errors.
func (p *replay) record(d *decoded) error {
	off, rec := d.off, &d.rec
	p.st.LastSeq = rec.Seq
	skipped := func(reason string) {
		p.skip(Skipped{Offset: off, Kind: string(rec.Kind), Turn: rec.Turn, FirstSeq: rec.Seq, LastSeq: rec.Seq, Reason: reason})
	}
	if p.identityOnly {
		if rec.Kind != rollout.KindThreadOpened {
			return nil
		}
		if h, ok := d.body.(*rollout.ThreadOpened); !ok || sameIdentity(*h, p.st.Header) {
			return nil
		}
	}
	if !rec.Kind.Known() {
		skipped(ReasonUnknownKind)
		return nil
	}
	needTurn := func() *Turn {
		if rec.Turn == "" {
			skipped(ReasonNoTurn)
			return nil
		}
		if rec.Kind == rollout.KindTurnStarted {
			delete(p.dropped, rec.Turn) // a new turn reusing a rolled-back id
		}
		t := p.turn(rec.Turn, rec.Seq, off)
		if t == nil {
			skipped(ReasonRolledBack)
		}
		return t
	}
	if rec.Kind == rollout.KindItemAppended {
		if d.err != nil {
			skipped(ReasonUndecodable)
			return nil
		}
		if t := needTurn(); t != nil {
			p.item(t, d.item, Loc{Offset: off, Seq: rec.Seq})
		}
		return nil
	}
	body, err := d.body, d.err
	if err != nil {
		skipped(ReasonUndecodable)
		switch rec.Kind {
		case rollout.KindModelHistoryAppended:
			// The turn's exact history is incomplete: rebuild the turn.
			if t := p.tieTurn(rec.Turn); t != nil {
				t.historyRejected = true
			}
		case rollout.KindCheckpoint:
			p.cands = append(p.cands, compaction.Candidate{Seq: rec.Seq, Offset: off, DecodeErr: err})
		}
		return nil
	}
	switch b := body.(type) {
	case *rollout.ThreadOpened:
		if !sameIdentity(*b, p.st.Header) {
			return identityError(ErrIdentityConflict, hintInspect, "%s: seq %d is a header for thread %q (%s) in workspace %q; the first says %q (%s) in %q",
				p.opts.Path, rec.Seq, b.ThreadID, b.Source.Kind, b.WorkspaceID, p.st.Header.ThreadID, p.st.Header.Source.Kind, p.st.Header.WorkspaceID)
		}
		skipped(ReasonDuplicateHeader)
	case *rollout.TurnStarted:
		if t := needTurn(); t != nil {
			t.StartSeq, t.StartOffset, t.startSeen = rec.Seq, off, true
			t.Model, t.Metadata = b.Model, b.Metadata
			p.open = t
		}
	case *rollout.ModelHistory:
		if t := needTurn(); t != nil {
			if !p.opts.SkipHistory {
				t.exact = append(t.exact, b.Messages...)
			}
			if p.opts.Locate {
				t.HistoryAt = append(t.HistoryAt, Loc{Offset: off, Seq: rec.Seq})
			}
			t.exactRecords++
		}
	case *rollout.TurnCompleted:
		if t := needTurn(); t != nil {
			t.Status, t.Usage, t.EndSeq = b.Status, b.Usage, rec.Seq
			if t.Status == "" {
				t.Status = rollout.TurnStatusCompleted
			}
			p.ended(t)
		}
	case *rollout.TurnAborted:
		if t := needTurn(); t != nil {
			t.Status, t.EndSeq = rollout.TurnStatusAborted, rec.Seq
			p.ended(t)
		}
	case *rollout.Checkpoint:
		p.cands = append(p.cands, compaction.Candidate{Seq: rec.Seq, Offset: off, Checkpoint: b})
		if t, ok := p.turns[b.CoveredTurn]; ok {
			p.covered[rec.Seq] = t
		}
	case *rollout.ThreadRolledBack:
		n := min(max(b.Turns, 0), len(p.order))
		p.poppedUnseen += max(b.Turns, 0) - n
		for _, t := range p.order[len(p.order)-n:] {
			delete(p.turns, t.ID)
			p.dropped[t.ID] = true
			if p.open == t {
				p.open = nil
			}
			// Its slab lives on with the turns beside it: let go of what
			// it holds (only its identity is compared from here on).
			t.Items, t.exact, t.itemIndex, t.ItemAt, t.HistoryAt = nil, nil, nil, nil, nil
		}
		p.order = p.order[:len(p.order)-n]
	case *rollout.RecordsLost:
		// A repaired rollout: damage that was here is now placeholders.
		// Only the first of a gap carries the details; tie it like damage.
		if b.FirstSeq != 0 {
			s := Skipped{Offset: off, Kind: string(rec.Kind), FirstSeq: b.FirstSeq, LastSeq: b.LastSeq, Reason: ReasonRecordsLost}
			if b.LastSeq >= b.FirstSeq {
				s.SeqGap = b.LastSeq - b.FirstSeq + 1
			}
			if p.open != nil {
				s.Turn = p.open.ID
				p.open.damageTied = true
			}
			p.skip(s)
		}
	case *rollout.MetadataUpdated:
		p.meta.apply(b)
	case *rollout.Lifecycle:
		p.meta.Archived = rec.Kind == rollout.KindArchived
	}
	return nil
}

// item applies an item to its turn: a later version of an item (same id)
// replaces it in place. With Options.Locate only its id is kept (a copy:
// the decoded item's strings share its whole body), and where it is.
func (p *replay) item(t *Turn, it rollout.Item, at Loc) {
	if p.opts.Locate {
		it = rollout.Item{ID: strings.Clone(it.ID)}
	}
	if it.ID != "" {
		if i := t.findItem(it.ID); i >= 0 {
			t.Items[i] = it
			if p.opts.Locate {
				t.ItemAt[i] = at
			}
			return
		}
		if t.itemIndex != nil {
			t.itemIndex[it.ID] = len(t.Items)
		}
	}
	if t.Items == nil {
		t.Items = make([]rollout.Item, 0, 4) // a user message, a tool call and its result, an answer
	}
	t.Items = append(t.Items, it)
	if p.opts.Locate {
		t.ItemAt = append(t.ItemAt, at)
	}
}

// itemScan is how many items a turn's items are searched by scanning
// before they are indexed by id.
const itemScan = 16

// findItem returns the index of the turn's item with the given id, or -1.
// A short turn is scanned from its end (a new version usually follows the
// one it replaces closely); a long one gets an index, so a turn of
// thousands of items stays linear.
func (t *Turn) findItem(id string) int {
	if t.itemIndex == nil {
		if len(t.Items) <= itemScan {
			for i := len(t.Items) - 1; i >= 0; i-- {
				if t.Items[i].ID == id {
					return i
				}
			}
			return -1
		}
		t.itemIndex = make(map[string]int, 2*len(t.Items))
		for i := range t.Items {
			if t.Items[i].ID != "" {
				t.itemIndex[t.Items[i].ID] = i
			}
		}
	}
	if i, ok := t.itemIndex[id]; ok {
		return i
	}
	return -1
}

func (p *replay) ended(t *Turn) {
	if p.open == t {
		p.open = nil
	}
}

// tieTurn finds the turn a rejected record belongs to: the one it names, or
// else the one open at that point.
func (p *replay) tieTurn(id string) *Turn {
	if t, ok := p.turns[id]; ok && id != "" {
		return t
	}
	if p.open != nil || id == "" {
		return p.open
	}
	// A turn not seen yet (its start was lost): it owns the record, so its
	// exact history, when it comes, must not be used alone.
	return p.turn(id, p.st.LastSeq, 0)
}

// finish settles turn statuses and histories, picks the checkpoint, and
// assembles the model history.
func (p *replay) finish(builder HistoryBuilder) {
	st := p.st
	for _, t := range p.order {
		if t.EndSeq == 0 {
			t.Status = rollout.TurnStatusOpen
			st.Interrupted = append(st.Interrupted, t.ID)
		}
		switch {
		case t.historyRejected || (t.damageTied && t.exactRecords == 0):
			// Never mix: a rejected exact-history record (or damage of
			// unknown kind inside a turn with no surviving history) means
			// the whole turn comes from its items.
			t.History, t.HistorySource = builder(t.ID, t.Items), HistoryRebuilt
			st.Report.RebuiltTurns = append(st.Report.RebuiltTurns, t.ID)
		case t.exactRecords > 0:
			t.History, t.HistorySource = t.exact, HistoryExact
		default:
			t.History, t.HistorySource = builder(t.ID, t.Items), HistoryItems
		}
		t.exact, t.itemIndex = nil, nil
	}
	visible := p.turns // the turns in order, by id
	chosen, passed := compaction.Latest(p.cands, func(c *compaction.Candidate) (bool, bool) {
		turn := c.Checkpoint.CoveredTurn
		if t, ok := visible[turn]; ok {
			if was, seen := p.covered[c.Seq]; seen && was != t {
				return false, false // the id now names a later turn
			}
			return true, t.EndSeq != 0
		}
		// From a checkpoint's offset, a covered turn before it is unseen:
		// it survives unless a rollback reached past what was seen.
		unseen := p.partial && !p.dropped[turn]
		return unseen && p.poppedUnseen == 0, true
	})
	from := 0
	if chosen != nil && p.opts.IgnoreCheckpoints {
		passed = append([]compaction.Passed{{Candidate: *chosen, Why: "ignored"}}, passed...)
		chosen = nil
	}
	for _, c := range passed {
		st.Report.PassedOver = append(st.Report.PassedOver, checkpointInfo(c.Candidate, c.Why))
	}
	if chosen != nil {
		info := checkpointInfo(*chosen, "")
		st.Report.Checkpoint = &info
		if !p.opts.SkipHistory {
			st.ModelHistory = append(st.ModelHistory, chosen.Checkpoint.ReplacementHistory...)
		}
		for i, t := range p.order {
			if t.ID == chosen.Checkpoint.CoveredTurn {
				from = i + 1
			}
		}
	}
	n := len(st.ModelHistory)
	for _, t := range p.order[from:] {
		n += len(t.History)
	}
	st.historyFrom = from
	st.ModelHistory = slices.Grow(st.ModelHistory, n-len(st.ModelHistory))
	for _, t := range p.order[from:] {
		st.ModelHistory = append(st.ModelHistory, t.History...)
	}
	if p.partial && chosen != nil {
		// Usable from the offset only if the covered turn was seen ending
		// (its commit frame holds the checkpoint) and no other turn seen
		// started before the offset.
		seenCovered, clean := false, true
		for _, t := range p.order {
			if t.ID == chosen.Checkpoint.CoveredTurn {
				seenCovered = true
				clean = clean && t.EndSeq != 0
			} else if !t.startSeen {
				clean = false
			}
		}
		st.offsetClean = seenCovered && clean
	}
	st.Turns = p.order
	st.Metadata = p.meta
}

func checkpointInfo(c compaction.Candidate, why string) CheckpointInfo {
	info := CheckpointInfo{Seq: c.Seq, Offset: c.Offset, Why: why}
	if c.Checkpoint != nil {
		info.ID, info.CoveredTurn, info.Trigger = c.Checkpoint.ID, c.Checkpoint.CoveredTurn, c.Checkpoint.Trigger
	}
	return info
}

// Metadata is the thread's name, labels, flags, status and lifecycle as
// the records left them.
type Metadata struct {
	Name     string          `json:"name,omitempty"`
	Labels   []string        `json:"labels,omitempty"`
	Flags    map[string]bool `json:"flags,omitempty"`
	Status   string          `json:"status,omitempty"`
	Archived bool            `json:"archived"`
}

func (m *Metadata) apply(u *rollout.MetadataUpdated) {
	if u.Name != nil {
		m.Name = *u.Name
	}
	if u.Labels != nil {
		m.Labels = u.Labels
	}
	for k, v := range u.Flags {
		if m.Flags == nil {
			m.Flags = map[string]bool{}
		}
		m.Flags[k] = v
	}
	if u.Status != nil {
		m.Status = *u.Status
	}
}
