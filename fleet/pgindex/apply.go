package pgindex

import (
	"context"
	"fmt"
	"slices"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The applier is projection's (projection/apply.go), rule for rule, over
// PostgreSQL: resume's rules (a rollback hides the last N visible turns
// and late records of a hidden turn are skipped; an item appended again
// with its id replaces the earlier version in place; a turn whose start
// was lost is made by its first surviving record; the latest usable
// checkpoint is compaction's), applied to one thread's rows inside one
// transaction, with the thread's row locked. Where the two differ is
// where a round trip costs: the applier keeps what it writes in memory
// and sends it in one pipelined batch before anything reads rows (sync),
// so that a frame costs no round trip of its own, and the full-text words
// are a column of the items rows, so that a rollback or a newer version
// takes them out of search in the statement that changes the row.

// itemSlot is an item of a turn, as the applier tracks it.
type itemSlot struct {
	seq uint64 // its place
	typ rollout.ItemType
}

// slots are a turn's items by id hash.
type slots map[int64]*itemSlot

// itemRow is an items row to write.
type itemRow struct {
	seq, turn, last uint64
	idh             int64
	frame           int64
	typ             rollout.ItemType
	words           *string // the tsvector's text; nil: no words
}

// cachedRow is a thread's row as this store last committed it, with its
// turn in progress, if any.
type cachedRow struct {
	row   *threadRow
	turn  *turnRow
	slots slots
}

type applier struct {
	s   *Store
	ctx context.Context
	tx  *txn
	th  *threadRow
	was *threadRow // the row as read (nil: made anew)
	// fresh says the thread had no rows: nothing to look up.
	fresh bool
	turns map[string]*turnRow
	items map[uint64]slots // the slots of each turn touched, by instance
	// acked says every frame applied came from an acknowledged append
	// (the applier's queue), so the row may be cached for the next cycle
	// without its anchor being checked. A row a catch-up brought forward
	// may end at a frame that was written and then deleted, unacknowledged
	// (a commit of unknown outcome, resolved): it is checked next time.
	acked bool
	// lastFrame is the offset of the frame of the last record read, and
	// lastHeader its header.
	lastFrame  int64
	lastHeader rollout.FrameHeader

	labelsDirty, checkpointsDirty, previewDirty, openDirty bool

	b    *pgx.Batch          // writes not sent yet
	pend []*itemRow          // new items rows not sent yet
	upd  map[uint64]*itemRow // newer versions of items rows, by seq, not sent yet
	at   map[uint64]*itemRow // pend and upd by seq
}

func (s *Store) newApplier(ctx context.Context, t *txn, th, was *threadRow, fresh bool) *applier {
	return &applier{s: s, ctx: ctx, tx: t, th: th, was: was, fresh: fresh, turns: map[string]*turnRow{}, items: map[uint64]slots{},
		labelsDirty: fresh, b: &pgx.Batch{}, upd: map[uint64]*itemRow{}, at: map[uint64]*itemRow{}}
}

// sync sends what is queued: the items and dirty turns first, so that a
// query that follows sees every row the applier has made.
func (a *applier) sync() error {
	tid := a.th.TID
	if n := len(a.pend); n > 0 {
		seqs, turns, idhs, lasts, frames := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		types, words := make([]string, n), make([]*string, n)
		for i, r := range a.pend {
			seqs[i], turns[i], idhs[i], lasts[i], frames[i], types[i], words[i] = int64(r.seq), int64(r.turn), r.idh, int64(r.last), r.frame, string(r.typ), r.words
		}
		a.b.Queue(`INSERT INTO rolloutdb.index_items (tid, seq, turn, idh, last_seq, frame, type, words)
			SELECT $1, u.seq, u.turn, u.idh, u.last, u.frame, u.type, u.words::tsvector
			FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::text[], $8::text[]) AS u(seq, turn, idh, last, frame, type, words)`,
			tid, seqs, turns, idhs, lasts, frames, types, words)
		a.pend = a.pend[:0]
	}
	if n := len(a.upd); n > 0 {
		seqs, lasts, frames := make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
		types, words := make([]string, 0, n), make([]*string, 0, n)
		for _, r := range a.upd {
			seqs, lasts, frames = append(seqs, int64(r.seq)), append(lasts, int64(r.last)), append(frames, r.frame)
			types, words = append(types, string(r.typ)), append(words, r.words)
		}
		a.b.Queue(`UPDATE rolloutdb.index_items i SET last_seq = u.last, frame = u.frame, type = u.type, words = u.words::tsvector
			FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::text[], $6::text[]) AS u(seq, last, frame, type, words)
			WHERE i.tid = $1 AND i.seq = u.seq`, tid, seqs, lasts, frames, types, words)
		clear(a.upd)
	}
	clear(a.at)
	for _, t := range a.turns {
		if t.dirty {
			queueSaveTurn(a.b, tid, t)
			t.dirty = false
		}
	}
	err := sendBatch(a.ctx, a.tx, a.b)
	a.b = &pgx.Batch{}
	return err
}

// diag records a rejected record or damaged region as a diagnostic
// (business state: it survives rebuilds) and counts it on the thread.
func (a *applier) diag(off, length int64, first, last uint64, kind, reason string, ackLost bool) {
	a.th.DamageCount++
	a.s.damaged.Add(1)
	a.b.Queue(`INSERT INTO rolloutdb.diagnostics (ws, thread_id, off, length, first_seq, last_seq, kind, reason, ack_lost, seen_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, (extract(epoch FROM clock_timestamp()) * 1e9)::bigint)
		ON CONFLICT (ws, thread_id, off, first_seq, reason) DO NOTHING`,
		a.s.ws, a.th.ID, off, length, int64(first), int64(last), kind, reason, ackLost)
}

// damage applies a damaged region the reader skipped.
func (a *applier) damage(d *rollout.CorruptionError) {
	a.diag(d.Offset, d.Length, d.FirstSeq, d.LastSeq, "", string(d.Reason), d.AckLost)
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
		a.diag(off, 0, rec.Seq, rec.Seq, string(rec.Kind), reason, false)
		return nil
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
			// Referenced by a record of the log, visible or not: GC keeps it.
			a.b.Queue(`INSERT INTO rolloutdb.index_artifact_refs (ws, thread_id, seq, path, size, sha256) VALUES ($1, $2, $3, $4, $5, $6)
				ON CONFLICT (ws, thread_id, seq) DO UPDATE SET path = excluded.path, size = excluded.size, sha256 = excluded.sha256`,
				a.s.ws, th.ID, int64(rec.Seq), b.Ref.Path, b.Ref.Size, b.Ref.SHA256)
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
			a.diag(off, 0, b.FirstSeq, b.LastSeq, string(rec.Kind), recovery.ReasonRecordsLost, false)
		}
		return nil
	case *rollout.Lifecycle:
		return nil // where the thread is says archived or not
	}
	if rec.Turn == "" {
		return rejected(recovery.ReasonNoTurn)
	}
	t, err := a.turn(rec.Turn, rec, off)
	if err != nil {
		return err
	}
	if t == nil {
		return rejected(recovery.ReasonRolledBack)
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
// decode: it belongs to the turn it names, or else to the turn open; a
// turn not seen yet (its start was lost) is made by it, as resume does.
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
	a.b.Queue(`INSERT INTO rolloutdb.index_checkpoints (tid, seq, frame_offset, checkpoint_id, covered_turn, covered_instance,
			replacement_messages, trigger, tokens_before, tokens_after) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (tid, seq) DO UPDATE SET frame_offset = excluded.frame_offset, checkpoint_id = excluded.checkpoint_id,
			covered_turn = excluded.covered_turn, covered_instance = excluded.covered_instance,
			replacement_messages = excluded.replacement_messages, trigger = excluded.trigger,
			tokens_before = excluded.tokens_before, tokens_after = excluded.tokens_after`,
		a.th.TID, int64(rec.Seq), off, b.ID, b.CoveredTurn, int64(instance), len(b.ReplacementHistory), b.Trigger, b.TokensBefore, b.TokensAfter)
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
		th.IdentityError = fmt.Sprintf("header names thread %q, the log %q", h.ThreadID, th.ID)
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
		if len(th.Labels) == 0 {
			th.Labels = nil
		}
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
	if a.fresh || id == "" {
		return nil, nil
	}
	if err := a.sync(); err != nil {
		return nil, err
	}
	t, err := scanTurn(a.tx.QueryRow(a.ctx, `SELECT `+turnCols+` FROM rolloutdb.index_turns WHERE tid = $1 AND turn_id = $2`, a.th.TID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, errors.Wrapf(err, "load turn %s/%s", a.th.ID, id)
	}
	a.turns[id] = t
	return t, nil
}

// turn returns the visible turn a record belongs to, making it when its
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

// turnItems returns the slots of a turn: made by this applier, handed
// over from the cache, or loaded from its rows.
func (a *applier) turnItems(t *turnRow) (slots, error) {
	if sl, ok := a.items[t.Instance]; ok {
		return sl, nil
	}
	sl := slots{}
	if !a.fresh {
		if err := a.sync(); err != nil {
			return nil, err
		}
		rows, err := a.tx.Query(a.ctx, `SELECT seq, idh, type FROM rolloutdb.index_items
			WHERE tid = $1 AND seq BETWEEN $2 AND $3 AND turn = $2`, a.th.TID, int64(t.Instance), int64(t.LastSeq))
		if err != nil {
			return nil, errors.Wrap(err, "load turn items")
		}
		for rows.Next() {
			var seq, idh int64
			var typ string
			if err := rows.Scan(&seq, &idh, &typ); err != nil {
				rows.Close()
				return nil, errors.Wrap(err, "load turn items")
			}
			if idh != 0 {
				sl[idh] = &itemSlot{seq: uint64(seq), typ: rollout.ItemType(typ)}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, errors.Wrap(err, "load turn items")
		}
	}
	a.items[t.Instance] = sl
	return sl, nil
}

// item applies an item record of the frame at off: a new item takes a row
// (its place is this seq), a new version of a known one (same id in the
// same turn) moves its row to this frame and replaces its words.
func (a *applier) item(t *turnRow, rec rollout.Record, off int64, it *rollout.Item) error {
	th := a.th
	sl, err := a.turnItems(t)
	if err != nil {
		return err
	}
	words := tsvector(projection.ItemText(it))
	h := idHash(it.ID)
	if slot, known := sl[h]; h != 0 && known {
		r := a.at[slot.seq]
		if r == nil {
			r = &itemRow{seq: slot.seq}
			a.upd[slot.seq], a.at[slot.seq] = r, r
		}
		r.last, r.frame, r.typ, r.words = rec.Seq, off, it.Type, words
		if slot.typ == rollout.ItemUserMessage || it.Type == rollout.ItemUserMessage {
			a.previewDirty = true // it may be (or have been) the message the preview shows
		}
		slot.typ = it.Type
	} else {
		r := &itemRow{seq: rec.Seq, turn: t.Instance, idh: h, last: rec.Seq, frame: off, typ: it.Type, words: words}
		a.pend = append(a.pend, r)
		a.at[rec.Seq] = r
		if h != 0 {
			sl[h] = &itemSlot{seq: rec.Seq, typ: it.Type}
		}
		t.ItemCount++
		t.dirty = true
		th.ItemCount++
		if it.Type == rollout.ItemUserMessage && th.Preview == "" {
			th.Preview = projection.Preview(it.Text)
		}
	}
	th.LastRole = projection.ItemRole(it.Type)
	return nil
}

// rollback hides the last n visible turns: their items leave the paged
// history and search (the rows go), their turns' rows stay as tombstones
// so late records of theirs are skipped, and the thread's counters lose
// what they held.
func (a *applier) rollback(n int) error {
	th := a.th
	n = min(max(n, 0), int(th.TurnCount))
	if n == 0 {
		return nil
	}
	if err := a.sync(); err != nil {
		return err
	}
	lo := th.TurnCount - int64(n) + 1
	rows, err := a.tx.Query(a.ctx, `WITH gone AS (
			SELECT `+turnCols+` FROM rolloutdb.index_turns WHERE tid = $1 AND ordinal >= $2
		), hidden AS (
			UPDATE rolloutdb.index_turns t SET ordinal = NULL, item_count = 0 FROM gone WHERE t.tid = $1 AND t.turn_id = gone.turn_id
		), items AS (
			DELETE FROM rolloutdb.index_items i USING gone WHERE i.tid = $1 AND i.seq BETWEEN gone.instance AND gone.last_seq AND i.turn = gone.instance
		)
		SELECT * FROM gone`, th.TID, lo)
	if err != nil {
		return errors.Wrap(err, "rollback")
	}
	var dropped []*turnRow
	for rows.Next() {
		t, err := scanTurn(rows)
		if err != nil {
			rows.Close()
			return errors.Wrap(err, "rollback")
		}
		dropped = append(dropped, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return errors.Wrap(err, "rollback")
	}
	for _, t := range dropped {
		th.ItemCount -= t.ItemCount
		addUsage(&th.Usage, t.Usage, -1)
		delete(a.turns, t.ID) // loaded again as a tombstone when needed
		delete(a.items, t.Instance)
		if th.Current == t.ID {
			th.Current = ""
		}
	}
	th.TurnCount = lo - 1
	a.openDirty, a.previewDirty, a.checkpointsDirty = true, true, true
	a.fresh = false // tombstones exist now
	// Now, not at the end of the batch: items appended after the rollback
	// set it by their order, as they would in any other batching.
	return a.lastRole()
}

// lastRole finds the role of the last item of the visible turns: the last
// item of the last visible turn that has one.
func (a *applier) lastRole() error {
	if err := a.sync(); err != nil {
		return err
	}
	var typ string
	err := a.tx.QueryRow(a.ctx, `SELECT i.type FROM rolloutdb.index_turns t
		CROSS JOIN LATERAL (SELECT type FROM rolloutdb.index_items i
			WHERE i.tid = t.tid AND i.seq BETWEEN t.instance AND t.last_seq AND i.turn = t.instance ORDER BY i.seq DESC LIMIT 1) i
		WHERE t.tid = $1 AND t.ordinal IS NOT NULL ORDER BY t.ordinal DESC LIMIT 1`, a.th.TID).Scan(&typ)
	switch {
	case err == nil:
		a.th.LastRole = projection.ItemRole(rollout.ItemType(typ))
	case errors.Is(err, pgx.ErrNoRows):
		a.th.LastRole = ""
	default:
		return errors.Wrap(err, "find last role")
	}
	return nil
}

// openTurn sets the thread's open turn: the last visible turn, when it has
// no end record (running, or interrupted if no host holds the thread), as
// resume reports it.
func (a *applier) openTurn() error {
	for _, t := range a.turns {
		if t.visible() && t.Ordinal == a.th.TurnCount {
			a.th.OpenTurn = ""
			if t.EndSeq == 0 {
				a.th.OpenTurn = t.ID
			}
			return nil
		}
	}
	if err := a.sync(); err != nil {
		return err
	}
	var id string
	var end int64
	err := a.tx.QueryRow(a.ctx, `SELECT turn_id, end_seq FROM rolloutdb.index_turns WHERE tid = $1 AND ordinal = $2`, a.th.TID, a.th.TurnCount).Scan(&id, &end)
	switch {
	case err == nil && end == 0:
		a.th.OpenTurn = id
	case err == nil || errors.Is(err, pgx.ErrNoRows):
		a.th.OpenTurn = ""
	default:
		return errors.Wrap(err, "find open turn")
	}
	return nil
}

// preview finds the thread's first visible user message with text: its
// text is read from the Source.
func (a *applier) preview() error {
	if err := a.sync(); err != nil {
		return err
	}
	a.th.Preview = ""
	rows, err := a.tx.Query(a.ctx, `SELECT i.seq, i.last_seq, i.frame FROM rolloutdb.index_turns t
		JOIN rolloutdb.index_items i ON i.tid = t.tid AND i.seq BETWEEN t.instance AND t.last_seq AND i.turn = t.instance
		WHERE t.tid = $1 AND t.ordinal IS NOT NULL AND i.type = $2 ORDER BY t.ordinal, i.seq LIMIT 64`, a.th.TID, string(rollout.ItemUserMessage))
	if err != nil {
		return errors.Wrap(err, "find preview")
	}
	want, err := scanItemsAt(rows)
	if err != nil || len(want) == 0 {
		return errors.Wrap(err, "find preview")
	}
	items, err := a.s.readItems(a.ctx, a.th.ID, want)
	if err != nil {
		// A batch that cannot finish: it is rolled back whole, and the
		// next read finds the thread where it is now.
		return errors.Wrapf(err, "find preview of %s", a.th.ID)
	}
	for _, it := range items {
		if a.th.Preview = projection.Preview(it.Text); a.th.Preview != "" {
			break
		}
	}
	return nil
}

// latestCheckpoint finds the checkpoint resume would use: compaction's
// rule in SQL (as projection's qLatestCheckpoint): the newest valid one
// whose covered turn is visible and is the turn it covered when written,
// and, for a post-turn one, ended.
func (a *applier) latestCheckpoint() error {
	if err := a.sync(); err != nil {
		return err
	}
	var off, seq int64
	err := a.tx.QueryRow(a.ctx, `SELECT c.frame_offset, c.seq FROM rolloutdb.index_checkpoints c
		JOIN rolloutdb.index_turns t ON t.tid = c.tid AND t.turn_id = c.covered_turn
		WHERE c.tid = $1 AND t.ordinal IS NOT NULL AND c.covered_turn <> '' AND c.replacement_messages > 0
		AND (c.covered_instance = 0 OR c.covered_instance = t.instance)
		AND (c.trigger <> 'post_turn' OR t.end_seq <> 0)
		ORDER BY c.seq DESC LIMIT 1`, a.th.TID).Scan(&off, &seq)
	switch {
	case err == nil:
		a.th.CheckpointOffset, a.th.CheckpointSeq = off, uint64(seq)
	case errors.Is(err, pgx.ErrNoRows):
		a.th.CheckpointOffset, a.th.CheckpointSeq = 0, 0
	default:
		return errors.Wrap(err, "find latest checkpoint")
	}
	return nil
}

// finish writes the thread's row, its turns and items, and stages the
// row and its turn in progress for the cache if the transaction commits.
func (a *applier) finish() error {
	if a.checkpointsDirty {
		if err := a.latestCheckpoint(); err != nil {
			return err
		}
	}
	if a.previewDirty {
		if err := a.preview(); err != nil {
			return err
		}
	}
	if a.openDirty {
		if err := a.openTurn(); err != nil {
			return err
		}
	}
	if err := a.sync(); err != nil {
		return err
	}
	queueSaveThread(a.b, a.th, a.was, a.labelsDirty)
	if err := sendBatch(a.ctx, a.tx, a.b); err != nil {
		return err
	}
	a.b = &pgx.Batch{}
	if !a.acked {
		delete(a.tx.staged, a.th.ID)
		a.tx.dropped = append(a.tx.dropped, a.th.ID)
		return nil
	}
	c := &cachedRow{row: a.th.clone()}
	if cur := a.turns[a.th.Current]; cur != nil && cur.visible() {
		if sl, ok := a.items[cur.Instance]; ok {
			t := *cur
			c.turn, c.slots = &t, sl
		}
	}
	a.tx.staged[a.th.ID] = c
	return nil
}

// take hands a thread's cached row to the applier that will change it, if
// it is the row as locked (rev): the row, and its turn in progress.
func (s *Store) take(id string, rev int64) *cachedRow {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	c := s.cache[id]
	delete(s.cache, id)
	if c == nil || c.row.Rev != rev {
		return nil
	}
	return c
}

// maxCached bounds the threads whose rows the cache keeps.
const maxCached = 1024

// publish keeps what a committed transaction's appliers staged.
func (s *Store) publish(t *txn) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	for _, id := range t.dropped {
		delete(s.cache, id)
	}
	for id, c := range t.staged {
		if _, ok := s.cache[id]; !ok && len(s.cache) >= maxCached {
			for k := range s.cache {
				delete(s.cache, k)
				break
			}
		}
		s.cache[id] = c
	}
}
