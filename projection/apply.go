package projection

import (
	"context"
	"database/sql"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// The statements applying records run for every record: prepared once.
const (
	qDiag = `INSERT OR IGNORE INTO diagnostics (thread_id, offset, length, first_seq, last_seq, kind, reason, ack_lost, seen_at)
	VALUES (?,?,?,?,?,?,?,?,unixepoch('subsec') * 1000000000)`
	qArtifactRef = `INSERT OR REPLACE INTO artifact_refs (thread_id, seq, path, size, sha256) VALUES (?,?,?,?,?)`
	qCheckpoint  = `INSERT OR REPLACE INTO checkpoints (tid, seq, frame_offset, checkpoint_id, covered_turn, covered_instance, replacement_messages, trigger, tokens_before, tokens_after)
	VALUES (?,?,?,?,?,?,?,?,?,?)`
	// qLatestCheckpoint is compaction.Latest's rule in SQL: the newest
	// checkpoint that is valid, whose covered turn is visible and is the
	// same turn it covered when written, and, for a post-turn one, ended.
	qLatestCheckpoint = `SELECT c.frame_offset, c.seq FROM checkpoints c
	JOIN turns t ON t.tid = c.tid AND t.turn_id = c.covered_turn
	WHERE c.tid = ? AND t.ordinal IS NOT NULL AND c.covered_turn != '' AND c.replacement_messages > 0
	AND (c.covered_instance = 0 OR c.covered_instance = t.instance)
	AND (c.trigger != 'post_turn' OR t.end_seq != 0)
	ORDER BY c.seq DESC LIMIT 1`
	qInsertItem = `INSERT INTO items (tid, seq, toff, idh, ver, frame, type) VALUES (?,?,?,?,?,?,?)`
	qUpdateItem = `UPDATE items SET ver = ? - seq, frame = ?, type = ? WHERE tid = ? AND seq = ?`
	qTurnItems  = `SELECT seq, idh, type FROM items WHERE tid = ? AND seq BETWEEN ? AND ? AND seq - toff = ?`
	qLookupTurn = `SELECT ` + turnCols + ` FROM turns WHERE tid = ? AND turn_id = ?`
	qOpenTurn   = `SELECT turn_id, end_seq FROM turns WHERE tid = ? AND ordinal = ?`
)

// itemBatch is how many new items rows one statement writes: a
// statement's cost through database/sql is several times a row's.
const itemBatch = 32

// qInsertItemsN[k] writes 1<<k items rows (k up to log2 itemBatch): a
// batch of any size is written by at most one statement per bit of it.
var qInsertItemsN = batchQueries(qInsertItem, ",(?,?,?,?,?,?,?)", "", itemBatch)

// batchQueries makes the statements of 1, 2, 4 ... max rows: head writes
// one row, each value adds one, tail ends the statement.
func batchQueries(head, value, tail string, max int) []string {
	var qs []string
	for n := 1; n <= max; n *= 2 {
		qs = append(qs, head+strings.Repeat(value, n-1)+tail)
	}
	return qs
}

// pow2Chunks cuts n rows into chunks of powers of two up to max, the
// largest first.
func pow2Chunks(n, max int, chunk func(k, size int) error) error {
	for k := bits.Len(uint(max)) - 1; k >= 0; k-- {
		size := 1 << k
		for n >= size {
			if err := chunk(k, size); err != nil {
				return err
			}
			n -= size
			if size < max {
				break // a smaller chunk is taken once at most
			}
		}
	}
	return nil
}

// pendingItem is an items row not written yet (applier.flushItems).
type pendingItem struct {
	tid                  int64
	seq, turn, idh, last uint64
	frame                int64
	typ                  uint8
}

// PreviewBytes bounds a thread's preview (its first user message).
const PreviewBytes = 240

// applier brings one thread's rows forward by records, in seq order, inside
// one write transaction. It keeps no state between transactions: where it
// is comes from the threads row (projected offset and seq), so the same
// code serves the projector, read-repair and rebuild, in any process.
//
// The rules follow recovery's replay, so that the projection shows what a
// resume would: a rollback hides the last N visible turns and late records
// of a hidden turn are skipped; an item appended again with its id replaces
// the earlier version in place; a turn whose start was lost is created by
// its first surviving record.
type applier struct {
	s     *Store
	ctx   context.Context
	tx    *sql.Tx
	th    *threadRow
	fresh bool // the thread had no rows: nothing to look up
	turns map[string]*turnRow
	// items holds the slots of each turn touched, by instance.
	items map[uint64]slots
	// startSeq is the row's projected seq when this applier began: a
	// cached turn is good only if the row is still there.
	startSeq uint64
	// acked says every frame applied came from an acknowledged append (the
	// projector, from memory), so the row may be kept for the next batch
	// without its anchor being checked. A row read-repair brought forward
	// may end at a frame that was written and then cut (never
	// acknowledged): it is read again, and its anchor checked, next time.
	acked bool
	// lastFrame is the offset of the frame of the last record read.
	lastFrame  int64
	lastHeader rollout.FrameHeader // its header, as read
	// labelsDirty says thread_labels must be rewritten at finish.
	labelsDirty bool
	// checkpointsDirty says the latest usable checkpoint must be found
	// again at finish (a checkpoint, a turn end or a rollback was applied).
	checkpointsDirty bool
	// previewDirty says a user message was replaced: the preview must be
	// found again.
	previewDirty bool
	// openDirty says a turn started or ended, or turns were rolled back:
	// the open turn must be found again.
	openDirty bool
	// pend are new items rows, written itemBatch at a time by flushItems
	// before anything reads items rows (and at finish); pendAt finds one
	// by seq, for a later version of its item.
	pend   []pendingItem
	pendAt map[uint64]int
}

func (s *Store) newApplier(ctx context.Context, tx *sql.Tx, th *threadRow, fresh bool) *applier {
	return &applier{s: s, ctx: ctx, tx: tx, th: th, fresh: fresh, turns: map[string]*turnRow{}, items: map[uint64]slots{},
		labelsDirty: fresh, startSeq: th.ProjectedSeq, pendAt: map[uint64]int{}}
}

// flushItems writes the pending items rows.
func (a *applier) flushItems() error {
	p := a.pend
	args := make([]any, 0, 7*min(len(p), itemBatch))
	err := pow2Chunks(len(p), itemBatch, func(k, size int) error {
		args = args[:0]
		for _, r := range p[:size] {
			args = append(args, r.tid, int64(r.seq), int64(r.seq-r.turn), int64(r.idh), int64(r.last-r.seq), r.frame, int64(r.typ))
		}
		p = p[size:]
		_, err := a.s.exec(a.ctx, a.tx, qInsertItemsN[k], args...)
		return err
	})
	if err != nil {
		return err
	}
	a.pend = a.pend[:0]
	clear(a.pendAt)
	return nil
}

// tid is the thread's key, given to its row on first use.
func (a *applier) tid() (int64, error) {
	if a.th.TID == 0 {
		if err := a.s.ensureTID(a.ctx, a.tx, a.th); err != nil {
			return 0, err
		}
	}
	return a.th.TID, nil
}

// diag records a rejected record or damaged region as a diagnostic
// (business state: it survives rebuilds) and counts it on the thread.
func (a *applier) diag(off, length int64, first, last uint64, kind, reason string, ackLost bool) error {
	a.th.DamageCount++
	a.s.damaged.Add(1)
	_, err := a.s.exec(a.ctx, a.tx, qDiag, a.th.ID, off, length, int64(first), int64(last), kind, reason, ackLost)
	return err
}

// damage applies a damaged region the reader skipped.
func (a *applier) damage(d *rollout.CorruptionError) error {
	return a.diag(d.Offset, d.Length, d.FirstSeq, d.LastSeq, "", string(d.Reason), d.AckLost)
}

// record applies one record of the frame at off. Records at or below the
// projected seq were applied already and are ignored.
func (a *applier) record(off int64, rec rollout.Record) error {
	th := a.th
	if rec.Seq <= th.ProjectedSeq {
		return nil
	}
	prev := th.ProjectedSeq
	th.ProjectedSeq = rec.Seq
	if ts := rec.Time.UnixNano(); ts > th.UpdatedAt {
		th.UpdatedAt = ts
	}
	rejected := func(reason string) error {
		return a.diag(off, 0, rec.Seq, rec.Seq, string(rec.Kind), reason, false)
	}
	if prev == 0 && (rec.Seq != 1 || rec.Kind != rollout.KindThreadOpened) {
		th.IdentityError = fmt.Sprintf("header unreadable or not first: the first surviving record is %s seq %d", rec.Kind, rec.Seq)
	}
	if !rec.Kind.Known() {
		return rejected(recovery.ReasonUnknownKind)
	}
	body, err := rec.DecodeBody()
	if err != nil {
		switch {
		case prev == 0 && rec.Seq == 1 && rec.Kind == rollout.KindThreadOpened:
			th.IdentityError = "header does not decode"
		case rec.Kind == rollout.KindModelHistoryAppended:
			if err := a.tieRejected(rec, off); err != nil {
				return err
			}
		}
		return rejected(recovery.ReasonUndecodable)
	}
	switch b := body.(type) {
	case *rollout.ThreadOpened:
		if prev == 0 && rec.Seq == 1 {
			a.header(b, rec)
			return nil
		}
		first := rollout.Source{Kind: th.SourceKind, Client: th.SourceClient, Parent: th.Parent, Root: th.Root, Depth: th.Depth}
		if b.ThreadID != th.ID || b.WorkspaceID != th.WorkspaceID || b.Source != first {
			if th.IdentityError == "" {
				th.IdentityError = fmt.Sprintf("conflicting header at seq %d: thread %q in workspace %q", rec.Seq, b.ThreadID, b.WorkspaceID)
			}
			return rejected("identity_conflict")
		}
		return rejected(recovery.ReasonDuplicateHeader)
	case *rollout.Item:
		if b.Ref != nil {
			// Referenced by a record of the rollout, visible or not: GC
			// keeps it.
			if _, err := a.s.exec(a.ctx, a.tx, qArtifactRef,
				th.ID, int64(rec.Seq), b.Ref.Path, b.Ref.Size, b.Ref.SHA256); err != nil {
				return err
			}
		}
	case *rollout.Checkpoint:
		// A checkpoint between turns belongs to none: it is applied
		// whatever its envelope's turn says.
		return a.checkpoint(off, rec, b)
	case *rollout.MetadataUpdated:
		a.metadata(b)
		return nil
	case *rollout.ThreadRolledBack:
		return a.rollback(b.Turns)
	case *rollout.RecordsLost:
		if b.FirstSeq != 0 {
			return a.diag(off, 0, b.FirstSeq, b.LastSeq, string(rec.Kind), recovery.ReasonRecordsLost, false)
		}
		return nil
	case *rollout.Lifecycle:
		return nil // where the file is says archived or not
	}
	if rec.Turn == "" {
		return rejected(recovery.ReasonNoTurn)
	}
	t, err := a.turn(rec.Turn, rec, off)
	if err != nil || t == nil {
		if err == nil {
			err = rejected(recovery.ReasonRolledBack)
		}
		return err
	}
	if rec.Seq > t.LastSeq {
		t.LastSeq, t.dirty = rec.Seq, true
	}
	switch b := body.(type) {
	case *rollout.TurnStarted:
		t.StartSeq, t.StartOffset, t.StartedAt, t.Model, t.dirty = rec.Seq, off, rec.Time.UnixNano(), b.Model, true
		th.Current = t.ID
		a.openDirty = true
	case *rollout.Item:
		return a.item(t, rec, off, b)
	case *rollout.ModelHistory:
		t.ExactHistory++
		t.dirty = true
	case *rollout.TurnCompleted:
		status := b.Status
		if status == "" {
			status = rollout.TurnStatusCompleted
		}
		a.end(t, rec, status, &b.Usage)
	case *rollout.TurnAborted:
		a.end(t, rec, rollout.TurnStatusAborted, nil) // usage as it was, as resume has it
	}
	return nil
}

// tieRejected mirrors resume for an exact-history record that does not
// decode: it belongs to the turn it names, or else to the turn open; a turn
// not seen yet (its start was lost) is created by it, as resume does.
func (a *applier) tieRejected(rec rollout.Record, off int64) error {
	if rec.Turn == "" || a.th.Current != "" {
		return nil
	}
	t, err := a.lookupTurn(rec.Turn)
	if err != nil || t != nil {
		return err // seen (visible, or rolled back: not brought back)
	}
	_, err = a.turn(rec.Turn, rec, off)
	return err
}

func (a *applier) checkpoint(off int64, rec rollout.Record, b *rollout.Checkpoint) error {
	var instance uint64
	if ct, err := a.lookupTurn(b.CoveredTurn); err != nil {
		return err
	} else if ct != nil && ct.visible() {
		instance = ct.Instance
	}
	tid, err := a.tid()
	if err != nil {
		return err
	}
	if _, err := a.s.exec(a.ctx, a.tx, qCheckpoint, tid, int64(rec.Seq), off, b.ID, b.CoveredTurn, int64(instance),
		len(b.ReplacementHistory), b.Trigger, b.TokensBefore, b.TokensAfter); err != nil {
		return err
	}
	a.checkpointsDirty = true
	return nil
}

func (a *applier) header(h *rollout.ThreadOpened, rec rollout.Record) {
	th := a.th
	th.WorkspaceID, th.SourceKind, th.SourceClient = h.WorkspaceID, h.Source.Kind, h.Source.Client
	th.Parent, th.Root, th.Depth = h.Source.Parent, h.Source.Root, h.Source.Depth
	if h.ForkedFrom != nil {
		th.ForkedFrom, th.ForkedTurn = h.ForkedFrom.Thread, h.ForkedFrom.Turn
	}
	th.CreatedAt = h.Created.UnixNano()
	if h.Created.IsZero() {
		th.CreatedAt = rec.Time.UnixNano()
	}
	switch {
	case h.ThreadID != th.ID:
		th.IdentityError = fmt.Sprintf("header names thread %q, the file %q", h.ThreadID, th.ID)
	case a.s.opts.WorkspaceID != "" && h.WorkspaceID != a.s.opts.WorkspaceID:
		th.IdentityError = fmt.Sprintf("belongs to workspace %q, not this one (%q)", h.WorkspaceID, a.s.opts.WorkspaceID)
	}
}

func (a *applier) metadata(u *rollout.MetadataUpdated) {
	th := a.th
	if u.Name != nil {
		th.Name = *u.Name
	}
	if u.Labels != nil {
		th.Labels = slices.Clone(u.Labels)
		a.labelsDirty = true
	}
	for k, v := range u.Flags {
		if th.Flags == nil {
			th.Flags = map[string]bool{}
		}
		th.Flags[k] = v
	}
	if u.Status != nil {
		th.State = *u.Status
	}
}

// lookupTurn finds a turn's row, visible or rolled back; nil if unknown.
func (a *applier) lookupTurn(id string) (*turnRow, error) {
	if t, ok := a.turns[id]; ok {
		return t, nil
	}
	if a.fresh || id == "" || a.th.TID == 0 {
		return nil, nil
	}
	t, err := scanTurn(a.s.stmt(a.tx, qLookupTurn).QueryRowContext(a.ctx, a.th.TID, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, errors.Wrapf(err, "load turn %s/%s", a.th.ID, id)
	}
	a.turns[id] = t
	return t, nil
}

// turn returns the visible turn a record belongs to, creating it when its
// start was lost; nil for a turn rolled back (unless the record starts it
// again: a new turn reusing the id).
func (a *applier) turn(id string, rec rollout.Record, off int64) (*turnRow, error) {
	t, err := a.lookupTurn(id)
	if err != nil {
		return nil, err
	}
	switch {
	case t != nil && t.visible():
		return t, nil
	case t != nil && rec.Kind != rollout.KindTurnStarted:
		return nil, nil
	}
	if t != nil {
		// A rolled-back id started again: its old items are gone already.
		*t = turnRow{ID: id}
	} else {
		t = &turnRow{ID: id}
		a.turns[id] = t
	}
	a.th.TurnCount++
	a.checkpointsDirty = true // a checkpoint naming this turn may become usable
	a.openDirty = true        // the last visible turn now, with no end record yet
	t.Instance, t.LastSeq = rec.Seq, rec.Seq
	t.Ordinal, t.StartSeq, t.StartOffset, t.StartedAt, t.dirty = a.th.TurnCount, rec.Seq, off, rec.Time.UnixNano(), true
	a.items[t.Instance] = slots{} // a new instance has no items yet
	return t, nil
}

func (a *applier) end(t *turnRow, rec rollout.Record, status string, u *rollout.Usage) {
	if u != nil {
		addUsage(&a.th.Usage, t.Usage, -1)
		addUsage(&a.th.Usage, *u, 1)
		t.Usage = *u
	}
	t.Status, t.EndSeq, t.EndedAt, t.dirty = status, rec.Seq, rec.Time.UnixNano(), true
	if a.th.Current == t.ID {
		a.th.Current = ""
	}
	a.checkpointsDirty = true
	a.openDirty = true
}

// ftsText is what the full-text index holds for an item.
func ftsText(it *rollout.Item) string {
	switch {
	case it.Name == "" && it.Arguments == "":
		return it.Text
	case it.Text == "":
		return strings.TrimSpace(it.Name + " " + it.Arguments)
	}
	return strings.TrimSpace(it.Name + " " + it.Arguments + "\n" + it.Text)
}

func role(t rollout.ItemType) string {
	switch t {
	case rollout.ItemUserMessage:
		return "user"
	case rollout.ItemToolResult, rollout.ItemTerminal, rollout.ItemFileChange:
		return "tool"
	}
	return "agent"
}

// turnItems returns the slots of a turn: made by this applier, handed
// over from the cache of the turn in progress, or loaded from its rows.
func (a *applier) turnItems(t *turnRow) (slots, error) {
	if sl, ok := a.items[t.Instance]; ok {
		return sl, nil
	}
	sl := slots{}
	if !a.fresh && a.th.TID != 0 {
		if c := a.s.takeTurnCache(a.th.ID, t.Instance, a.startSeq); c != nil {
			sl = c
		} else {
			if err := a.flushItems(); err != nil {
				return nil, err
			}
			a.s.turnLoads.Add(1)
			rows, err := a.s.stmt(a.tx, qTurnItems).QueryContext(a.ctx, a.th.TID, int64(t.Instance), int64(t.LastSeq), int64(t.Instance))
			if err != nil {
				return nil, errors.Wrap(err, "load turn items")
			}
			for rows.Next() {
				var seq, idh, typ int64
				if err := rows.Scan(&seq, &idh, &typ); err != nil {
					rows.Close()
					return nil, errors.Wrap(err, "load turn items")
				}
				if idh != 0 {
					sl[uint64(idh)] = &itemSlot{seq: uint64(seq), typ: uint8(typ)}
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, errors.Wrap(err, "load turn items")
			}
		}
	}
	a.items[t.Instance] = sl
	return sl, nil
}

// item applies an item record of the frame at off: a new item takes a row
// (its place is this seq), a new version of a known one (same id in the
// same turn) moves its row to this frame and replaces its indexed text.
func (a *applier) item(t *turnRow, rec rollout.Record, off int64, it *rollout.Item) error {
	th := a.th
	tid, err := a.tid()
	if err != nil {
		return err
	}
	sl, err := a.turnItems(t)
	if err != nil {
		return err
	}
	text := ftsText(it)
	typ := typeCode(it.Type)
	h := idHash(it.ID)
	if slot, known := sl[h]; h != 0 && known {
		if i, pending := a.pendAt[slot.seq]; pending {
			p := &a.pend[i]
			p.last, p.frame, p.typ = rec.Seq, off, typ
		} else if _, err := a.s.exec(a.ctx, a.tx, qUpdateItem, int64(rec.Seq), off, int64(typ), tid, int64(slot.seq)); err != nil {
			return err
		}
		if text != "" {
			a.s.indexOps(indexOp{kind: opPut, tid: tid, seq: slot.seq, text: text})
		} else {
			a.s.indexOps(indexOp{kind: opDel, tid: tid, seq: slot.seq})
		}
		if slot.typ == userCode || typ == userCode {
			a.previewDirty = true // it may be (or have been) the message the preview shows
		}
		slot.typ = typ
	} else {
		a.pendAt[rec.Seq] = len(a.pend)
		a.pend = append(a.pend, pendingItem{tid: tid, seq: rec.Seq, turn: t.Instance, idh: h, last: rec.Seq, frame: off, typ: typ})
		if len(a.pend) >= 16*itemBatch {
			if err := a.flushItems(); err != nil {
				return err
			}
		}
		if text != "" {
			a.s.indexOps(indexOp{kind: opPut, tid: tid, seq: rec.Seq, text: text})
		}
		if h != 0 {
			sl[h] = &itemSlot{seq: rec.Seq, typ: typ}
		}
		t.ItemCount++
		t.dirty = true
		th.ItemCount++
		if it.Type == rollout.ItemUserMessage && th.Preview == "" {
			th.Preview = truncate(it.Text, PreviewBytes)
		}
	}
	th.LastRole = role(it.Type)
	return nil
}

func truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// rollback hides the last n visible turns: their items leave the paged
// history and the index, their rows stay as tombstones so late records of
// theirs are skipped, and the thread's counters lose what they held.
func (a *applier) rollback(n int) error {
	if err := a.flushItems(); err != nil { // they read items rows
		return err
	}
	th := a.th
	n = min(max(n, 0), int(th.TurnCount))
	if n == 0 {
		return nil
	}
	if err := a.flushTurns(); err != nil {
		return err
	}
	tid, err := a.tid()
	if err != nil {
		return err
	}
	lo := th.TurnCount - int64(n) + 1
	rows, err := a.tx.QueryContext(a.ctx, `SELECT `+turnCols+` FROM turns WHERE tid = ? AND ordinal >= ?`, tid, lo)
	if err != nil {
		return errors.Wrap(err, "rollback: list turns")
	}
	var dropped []*turnRow
	for rows.Next() {
		t, err := scanTurn(rows)
		if err != nil {
			rows.Close()
			return errors.Wrap(err, "rollback: list turns")
		}
		dropped = append(dropped, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return errors.Wrap(err, "rollback: list turns")
	}
	for _, t := range dropped {
		// Their items leave the index one by one (a rollback is rare; a
		// turn's items are one range of its rows).
		irows, err := a.tx.QueryContext(a.ctx, `SELECT seq FROM items WHERE tid = ? AND seq BETWEEN ? AND ? AND seq - toff = ?`,
			tid, int64(t.Instance), int64(t.LastSeq), int64(t.Instance))
		if err != nil {
			return errors.Wrap(err, "rollback: list items")
		}
		for irows.Next() {
			var seq int64
			if err := irows.Scan(&seq); err != nil {
				irows.Close()
				return errors.Wrap(err, "rollback: list items")
			}
			a.s.indexOps(indexOp{kind: opDel, tid: tid, seq: uint64(seq)})
		}
		irows.Close()
		if err := irows.Err(); err != nil {
			return errors.Wrap(err, "rollback: list items")
		}
		if _, err := a.s.exec(a.ctx, a.tx, `DELETE FROM items WHERE tid = ? AND seq BETWEEN ? AND ? AND seq - toff = ?`,
			tid, int64(t.Instance), int64(t.LastSeq), int64(t.Instance)); err != nil {
			return err
		}
		th.ItemCount -= t.ItemCount
		addUsage(&th.Usage, t.Usage, -1)
		delete(a.turns, t.ID) // reload as a tombstone when needed
		delete(a.items, t.Instance)
		if th.Current == t.ID {
			th.Current = ""
		}
	}
	if _, err := a.s.exec(a.ctx, a.tx, `UPDATE turns SET ordinal = NULL, item_count = 0 WHERE tid = ? AND ordinal >= ?`, tid, lo); err != nil {
		return err
	}
	th.TurnCount = lo - 1
	a.openDirty, a.previewDirty, a.checkpointsDirty = true, true, true
	a.fresh = false // tombstones exist now
	// Now, not at the end of the batch: items appended after the rollback
	// set it by their order, as they would in any other batching.
	return a.lastRole()
}

// lastRole finds the role of the last item of the visible turns (turns
// flushed): the last item of the last visible turn that has one.
func (a *applier) lastRole() error {
	if err := a.flushItems(); err != nil { // they read items rows
		return err
	}
	th := a.th
	th.LastRole = ""
	if th.TID == 0 {
		return nil
	}
	rows, err := a.tx.QueryContext(a.ctx, `SELECT instance, last_seq FROM turns WHERE tid = ? AND ordinal IS NOT NULL ORDER BY ordinal DESC`, th.TID)
	if err != nil {
		return errors.Wrap(err, "find last role")
	}
	var turns [][2]int64
	for rows.Next() {
		var inst, last int64
		if err := rows.Scan(&inst, &last); err != nil {
			rows.Close()
			return errors.Wrap(err, "find last role")
		}
		turns = append(turns, [2]int64{inst, last})
		if len(turns) == 64 {
			break
		}
	}
	rows.Close()
	for _, t := range turns {
		var typ int64
		err := a.tx.QueryRowContext(a.ctx, `SELECT type FROM items WHERE tid = ? AND seq BETWEEN ? AND ? AND seq - toff = ? ORDER BY seq DESC LIMIT 1`,
			th.TID, t[0], t[1], t[0]).Scan(&typ)
		if err == nil {
			th.LastRole = role(typeOf(typ))
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return errors.Wrap(err, "find last role")
		}
	}
	return nil
}

// openTurn sets the thread's open turn: the last visible turn, when it has
// no end record (running, or interrupted if no host holds the thread), as
// resume reports it.
func (a *applier) openTurn() error {
	var id string
	var end int64
	err := a.s.stmt(a.tx, qOpenTurn).QueryRowContext(a.ctx, a.th.TID, a.th.TurnCount).Scan(&id, &end)
	switch {
	case err == nil && end == 0:
		a.th.OpenTurn = id
	case err == nil || errors.Is(err, sql.ErrNoRows):
		a.th.OpenTurn = ""
	default:
		return errors.Wrap(err, "find open turn")
	}
	return nil
}

// preview finds the thread's first visible user message with text (turns
// flushed): its text is read from the rollout.
func (a *applier) preview() error {
	if err := a.flushItems(); err != nil { // they read items rows
		return err
	}
	a.th.Preview = ""
	if a.th.TID == 0 {
		return nil
	}
	rows, err := a.tx.QueryContext(a.ctx, `SELECT i.seq, i.seq + i.ver, i.frame FROM turns t
		JOIN items i ON i.tid = t.tid AND i.seq BETWEEN t.instance AND t.last_seq AND i.seq - i.toff = t.instance
		WHERE t.tid = ? AND t.ordinal IS NOT NULL AND i.type = ? ORDER BY t.ordinal, i.seq LIMIT 64`, a.th.TID, int64(userCode))
	if err != nil {
		return errors.Wrap(err, "find preview")
	}
	var want []itemAt
	for rows.Next() {
		var it itemAt
		var seq, last int64
		if err := rows.Scan(&seq, &last, &it.frame); err != nil {
			rows.Close()
			return errors.Wrap(err, "find preview")
		}
		it.seq, it.lastSeq = uint64(seq), uint64(last)
		want = append(want, it)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(want) == 0 {
		return errors.Wrap(err, "find preview")
	}
	items, err := a.s.readItems(fileAt(a.th.ID, a.th.RolloutPath), want)
	if vfs.IsNotExist(err) {
		// Moved or gone since the records were read: not a rollout that
		// is missing (which a catch-up skips, committing what it did),
		// but a batch that cannot finish. It is rolled back whole, and
		// the next read finds the rollout where it is now.
		return errors.Newf("find preview: rollout of %s moved while it was read: %v", a.th.ID, err)
	}
	if err != nil {
		return errors.Wrap(err, "find preview")
	}
	for _, it := range items {
		if a.th.Preview = truncate(it.Text, PreviewBytes); a.th.Preview != "" {
			break
		}
	}
	return nil
}

// latestCheckpoint finds the checkpoint resume would use (turns flushed).
func (a *applier) latestCheckpoint() error {
	var off, seq int64
	err := a.s.stmt(a.tx, qLatestCheckpoint).QueryRowContext(a.ctx, a.th.TID).Scan(&off, &seq)
	switch {
	case err == nil:
		a.th.CheckpointOffset, a.th.CheckpointSeq = off, uint64(seq)
	case errors.Is(err, sql.ErrNoRows):
		a.th.CheckpointOffset, a.th.CheckpointSeq = 0, 0
	default:
		return errors.Wrap(err, "find latest checkpoint")
	}
	return nil
}

func (a *applier) flushTurns() error {
	var dirty []*turnRow
	for _, t := range a.turns {
		if t.dirty {
			dirty = append(dirty, t)
		}
	}
	if len(dirty) == 0 {
		return nil
	}
	tid, err := a.tid()
	if err != nil {
		return err
	}
	if err := a.s.saveTurns(a.ctx, a.tx, tid, dirty); err != nil {
		return err
	}
	for _, t := range dirty {
		t.dirty = false
	}
	return nil
}

// finish writes the thread row, its dirty turns and its labels, stages the
// index's mark for the thread and the slots of its turn in progress.
func (a *applier) finish() error {
	if err := a.flushItems(); err != nil {
		return err
	}
	if err := a.flushTurns(); err != nil {
		return err
	}
	if a.checkpointsDirty && a.th.TID != 0 {
		if err := a.latestCheckpoint(); err != nil {
			return err
		}
	}
	if a.previewDirty {
		if err := a.preview(); err != nil {
			return err
		}
	}
	if a.openDirty && a.th.TID != 0 {
		if err := a.openTurn(); err != nil {
			return err
		}
	}
	if a.labelsDirty {
		if _, err := a.s.exec(a.ctx, a.tx, `DELETE FROM thread_labels WHERE thread_id = ?`, a.th.ID); err != nil {
			return err
		}
		for _, l := range a.th.Labels {
			if _, err := a.s.exec(a.ctx, a.tx, `INSERT OR IGNORE INTO thread_labels (label, thread_id) VALUES (?, ?)`, l, a.th.ID); err != nil {
				return err
			}
		}
	}
	if err := a.s.saveThread(a.ctx, a.tx, a.th); err != nil {
		return err
	}
	a.s.indexOps(indexOp{kind: opMark, tid: a.th.TID, seq: a.th.ProjectedSeq, text: a.th.ID})
	if a.acked {
		a.s.txRows[a.th.ID] = a.th
	} else {
		delete(a.s.txRows, a.th.ID)
	}
	if cur := a.turns[a.th.Current]; cur != nil && cur.visible() {
		if sl, ok := a.items[cur.Instance]; ok {
			a.s.txCaches[a.th.ID] = &turnCache{seq: a.th.ProjectedSeq, instance: cur.Instance, items: sl}
		}
	}
	return nil
}
