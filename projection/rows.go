package projection

import (
	"context"
	"database/sql"
	"encoding/json"
	"math/rand/v2"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// threadRow is a threads row as the projector keeps it while applying.
type threadRow struct {
	// TID is the thread's integer key in turns, items, checkpoints and
	// search.db (0 until the row is first written).
	TID                       int64
	ID, Location, RolloutPath string
	FileID                    uint64
	FileSize                  int64
	ProjectedOffset           int64
	ProjectedSeq              uint64
	// The anchor is the last frame applied. Reading on from the projected
	// offset is right only while the file still holds it there: a crash
	// under SyncNever can lose frames already projected, and the thread
	// then grows again over the same offsets.
	AnchorOffset             int64
	AnchorSeq                uint64
	AnchorCRC                uint32
	WorkspaceID              string
	IdentityError            string
	State, Name              string
	Labels                   []string
	Flags                    map[string]bool
	SourceKind, SourceClient string
	Parent, Root             string
	Depth                    int
	ForkedFrom, ForkedTurn   string
	CreatedAt, UpdatedAt     int64
	TurnCount, ItemCount     int64
	LastRole, Preview        string
	Usage                    rollout.Usage
	OpenTurn                 string
	Current                  string // resume's open turn: started last, not ended, not rolled back
	CheckpointOffset         int64
	CheckpointSeq            uint64
	DamageCount              int64
	// Rev is a random stamp written with every write of the row: a copy
	// of the row with the same Rev is the row (pageCache).
	Rev int64
}

// newRev makes a row's stamp: random, so that a row dropped and made
// again under the same key, by this process or another, never repeats
// an earlier stamp (2^-63 a pair).
func newRev() int64 { return int64(rand.Uint64()>>1) | 1 }

const threadCols = `tid, id, location, rollout_path, file_id, file_size, projected_offset, projected_seq, anchor_offset, anchor_seq, anchor_crc,
	workspace_id, identity_error, state, name, labels, flags, source_kind, source_client, parent, root, depth,
	forked_from, forked_from_turn, created_at, updated_at, turn_count, item_count, last_role, preview,
	input_tokens, cached_input_tokens, output_tokens, reasoning_tokens, total_tokens,
	open_turn, current_turn, checkpoint_offset, checkpoint_seq, damage_count, rev`

type scanner interface{ Scan(dest ...any) error }

func scanThread(sc scanner) (*threadRow, error) {
	var t threadRow
	var labels, flags string
	var fileID int64
	var pseq, cseq, aseq, acrc int64
	err := sc.Scan(&t.TID, &t.ID, &t.Location, &t.RolloutPath, &fileID, &t.FileSize, &t.ProjectedOffset, &pseq, &t.AnchorOffset, &aseq, &acrc,
		&t.WorkspaceID, &t.IdentityError, &t.State, &t.Name, &labels, &flags, &t.SourceKind, &t.SourceClient, &t.Parent, &t.Root, &t.Depth,
		&t.ForkedFrom, &t.ForkedTurn, &t.CreatedAt, &t.UpdatedAt, &t.TurnCount, &t.ItemCount, &t.LastRole, &t.Preview,
		&t.Usage.InputTokens, &t.Usage.CachedInputTokens, &t.Usage.OutputTokens, &t.Usage.ReasoningTokens, &t.Usage.TotalTokens,
		&t.OpenTurn, &t.Current, &t.CheckpointOffset, &cseq, &t.DamageCount, &t.Rev)
	if err != nil {
		return nil, err
	}
	t.FileID, t.ProjectedSeq, t.CheckpointSeq = uint64(fileID), uint64(pseq), uint64(cseq)
	t.AnchorSeq, t.AnchorCRC = uint64(aseq), uint32(acrc)
	if err := json.Unmarshal([]byte(labels), &t.Labels); err != nil {
		return nil, errors.Wrapf(err, "thread %s: labels", t.ID)
	}
	if err := json.Unmarshal([]byte(flags), &t.Flags); err != nil {
		return nil, errors.Wrapf(err, "thread %s: flags", t.ID)
	}
	return &t, nil
}

const qLoadThread = `SELECT ` + threadCols + ` FROM threads WHERE id = ?`

// loadThread reads a thread's row in tx; nil if there is none.
func (s *Store) loadThread(ctx context.Context, tx *sql.Tx, id string) (*threadRow, error) {
	t, err := scanThread(s.stmt(tx, qLoadThread).QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return t, errors.Wrapf(err, "load thread %s", id)
}

// upsertThread writes a thread's row; its tid is assigned on first insert
// (ensureTID) and never changes while the row exists.
const upsertThread = `INSERT INTO threads (` + threadCols + `) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
	ON CONFLICT (tid) DO UPDATE SET id = excluded.id, location = excluded.location, rollout_path = excluded.rollout_path,
	file_id = excluded.file_id, file_size = excluded.file_size, projected_offset = excluded.projected_offset,
	projected_seq = excluded.projected_seq, anchor_offset = excluded.anchor_offset, anchor_seq = excluded.anchor_seq,
	anchor_crc = excluded.anchor_crc, workspace_id = excluded.workspace_id, identity_error = excluded.identity_error,
	state = excluded.state, name = excluded.name, labels = excluded.labels, flags = excluded.flags,
	source_kind = excluded.source_kind, source_client = excluded.source_client, parent = excluded.parent,
	root = excluded.root, depth = excluded.depth, forked_from = excluded.forked_from,
	forked_from_turn = excluded.forked_from_turn, created_at = excluded.created_at, updated_at = excluded.updated_at,
	turn_count = excluded.turn_count, item_count = excluded.item_count, last_role = excluded.last_role,
	preview = excluded.preview, input_tokens = excluded.input_tokens, cached_input_tokens = excluded.cached_input_tokens,
	output_tokens = excluded.output_tokens, reasoning_tokens = excluded.reasoning_tokens, total_tokens = excluded.total_tokens,
	open_turn = excluded.open_turn, current_turn = excluded.current_turn, checkpoint_offset = excluded.checkpoint_offset, checkpoint_seq = excluded.checkpoint_seq,
	damage_count = excluded.damage_count, rev = excluded.rev`

const qEnsureTID = `INSERT INTO threads (id, location, rollout_path) VALUES (?, ?, ?)
	ON CONFLICT (id) DO UPDATE SET location = excluded.location RETURNING tid`

// maxTID bounds a thread's key: search.db's rowids are tid<<40 | seq.
const maxTID = 1<<23 - 1

// ensureTID gives a row its key (a row inserted with the thread's id and
// place, completed by saveThread): rows of turns, items and checkpoints
// are written before the thread's row is.
func (s *Store) ensureTID(ctx context.Context, tx *sql.Tx, t *threadRow) error {
	if t.TID != 0 {
		return nil
	}
	err := s.stmt(tx, qEnsureTID).QueryRowContext(ctx, t.ID, t.Location, t.RolloutPath).Scan(&t.TID)
	if err != nil {
		return errors.Wrapf(err, "key of thread %s", t.ID)
	}
	if t.TID > maxTID {
		return errors.Newf("projection: thread key %d over %d: rebuild state.db (rolloutctl rebuild) to renumber", t.TID, maxTID)
	}
	return nil
}

func (s *Store) saveThread(ctx context.Context, tx *sql.Tx, t *threadRow) error {
	if err := s.ensureTID(ctx, tx, t); err != nil {
		return err
	}
	// A cached copy is not this row any more (an applier stages the row
	// it writes again, for when its transaction commits).
	s.cacheMu.Lock()
	delete(s.rowCache, t.ID)
	s.cacheMu.Unlock()
	labels, _ := json.Marshal(nonNil(t.Labels))
	flags, _ := json.Marshal(nonNilMap(t.Flags))
	t.Rev = newRev()
	_, err := s.exec(ctx, tx, upsertThread,
		t.TID, t.ID, t.Location, t.RolloutPath, int64(t.FileID), t.FileSize, t.ProjectedOffset, int64(t.ProjectedSeq), t.AnchorOffset, int64(t.AnchorSeq), int64(t.AnchorCRC),
		t.WorkspaceID, t.IdentityError, t.State, t.Name, string(labels), string(flags), t.SourceKind, t.SourceClient, t.Parent, t.Root, t.Depth,
		t.ForkedFrom, t.ForkedTurn, t.CreatedAt, t.UpdatedAt, t.TurnCount, t.ItemCount, t.LastRole, t.Preview,
		t.Usage.InputTokens, t.Usage.CachedInputTokens, t.Usage.OutputTokens, t.Usage.ReasoningTokens, t.Usage.TotalTokens,
		t.OpenTurn, t.Current, t.CheckpointOffset, int64(t.CheckpointSeq), t.DamageCount, t.Rev)
	return err
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNilMap(m map[string]bool) map[string]bool {
	if m == nil {
		return map[string]bool{}
	}
	return m
}

// turnRow is a turns row while applying.
type turnRow struct {
	ID           string
	Ordinal      int64 // 0: rolled back (NULL)
	Instance     uint64
	Status       string
	Model        string
	StartSeq     uint64
	EndSeq       uint64
	LastSeq      uint64 // the turn's last record: its items lie in Instance..LastSeq
	StartOffset  int64
	StartedAt    int64
	EndedAt      int64
	ItemCount    int64
	ExactHistory int64
	Usage        rollout.Usage
	dirty        bool
}

func (t *turnRow) visible() bool { return t.Ordinal > 0 }

const turnCols = `turn_id, ordinal, instance, status, model, start_seq, end_seq, last_seq, start_offset, started_at, ended_after,
	item_count, exact_history, input_tokens, cached_input_tokens, output_tokens, reasoning_tokens, total_tokens`

func scanTurn(sc scanner) (*turnRow, error) {
	var t turnRow
	var ord sql.NullInt64
	var start, end, last, inst int64
	var status any
	var after sql.NullInt64
	err := sc.Scan(&t.ID, &ord, &inst, &status, &t.Model, &start, &end, &last, &t.StartOffset, &t.StartedAt, &after,
		&t.ItemCount, &t.ExactHistory, &t.Usage.InputTokens, &t.Usage.CachedInputTokens, &t.Usage.OutputTokens,
		&t.Usage.ReasoningTokens, &t.Usage.TotalTokens)
	t.Ordinal, t.Instance, t.StartSeq, t.EndSeq, t.LastSeq = ord.Int64, uint64(inst), uint64(start), uint64(end), uint64(last)
	t.Status = statusOf(status)
	if after.Valid {
		t.EndedAt = t.StartedAt + after.Int64
	}
	return &t, err
}

// A turn's status is stored as a code when it is one of the record
// format's (a byte or none, where "completed" took nine), as text
// otherwise (the column has no affinity, so text stays text).
var statusCodes = []string{"", rollout.TurnStatusCompleted, rollout.TurnStatusAborted}

func statusCode(s string) any {
	for i, c := range statusCodes {
		if s == c {
			return int64(i)
		}
	}
	return s
}

func statusOf(v any) string {
	switch v := v.(type) {
	case int64:
		if v >= 0 && v < int64(len(statusCodes)) {
			return statusCodes[v]
		}
		return ""
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

const (
	turnValues   = `(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`
	turnConflict = `
	ON CONFLICT (tid, turn_id) DO UPDATE SET ordinal = excluded.ordinal, instance = excluded.instance, status = excluded.status,
	model = excluded.model, start_seq = excluded.start_seq, end_seq = excluded.end_seq, last_seq = excluded.last_seq, start_offset = excluded.start_offset,
	started_at = excluded.started_at, ended_after = excluded.ended_after, item_count = excluded.item_count,
	exact_history = excluded.exact_history, input_tokens = excluded.input_tokens,
	cached_input_tokens = excluded.cached_input_tokens, output_tokens = excluded.output_tokens,
	reasoning_tokens = excluded.reasoning_tokens, total_tokens = excluded.total_tokens`
)

// turnBatch is how many turns rows one statement writes (saveTurns).
const turnBatch = 16

// upsertTurnsN[k] writes 1<<k turns rows (k up to log2 turnBatch).
var upsertTurnsN = batchQueries(`INSERT INTO turns (tid, `+turnCols+`) VALUES `+turnValues, ","+turnValues, turnConflict, turnBatch)

func turnArgs(args []any, tid int64, t *turnRow) []any {
	var ord any
	if t.Ordinal > 0 {
		ord = t.Ordinal
	}
	var after any // NULL while the turn has no end
	if t.EndedAt != 0 {
		after = t.EndedAt - t.StartedAt
	}
	return append(args, tid, t.ID, ord, int64(t.Instance), statusCode(t.Status), t.Model, int64(t.StartSeq), int64(t.EndSeq), int64(t.LastSeq),
		t.StartOffset, t.StartedAt, after, t.ItemCount, t.ExactHistory, t.Usage.InputTokens,
		t.Usage.CachedInputTokens, t.Usage.OutputTokens, t.Usage.ReasoningTokens, t.Usage.TotalTokens)
}

// saveTurns writes turns rows of one thread (distinct turns),
// turnBatch a statement.
func (s *Store) saveTurns(ctx context.Context, tx *sql.Tx, tid int64, ts []*turnRow) error {
	args := make([]any, 0, 19*min(len(ts), turnBatch))
	return pow2Chunks(len(ts), turnBatch, func(k, size int) error {
		args = args[:0]
		for _, t := range ts[:size] {
			args = turnArgs(args, tid, t)
		}
		ts = ts[size:]
		_, err := s.exec(ctx, tx, upsertTurnsN[k], args...)
		return err
	})
}

// deleteThreadRows removes every projection row of a thread but its
// threads row's key: the tid it had (0: none), which the thread keeps if
// it is projected again (search.db's rows of it are dropped). Business
// state is not touched. keepRow false drops the threads row too.
func (s *Store) deleteThreadRows(ctx context.Context, tx *sql.Tx, id string, keepRow bool) (int64, error) {
	var tid int64
	err := tx.QueryRowContext(ctx, `SELECT tid FROM threads WHERE id = ?`, id).Scan(&tid)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, errors.Wrapf(err, "rows of %s", id)
	}
	s.forgetTurnCache(id)
	for _, q := range []string{
		`DELETE FROM thread_labels WHERE thread_id = ?`,
		`DELETE FROM artifact_refs WHERE thread_id = ?`,
	} {
		if _, err := s.exec(ctx, tx, q, id); err != nil {
			return 0, err
		}
	}
	if tid == 0 {
		return 0, nil
	}
	for _, q := range []string{
		`DELETE FROM items WHERE tid = ?`,
		`DELETE FROM turns WHERE tid = ?`,
		`DELETE FROM checkpoints WHERE tid = ?`,
	} {
		if _, err := s.exec(ctx, tx, q, tid); err != nil {
			return 0, err
		}
	}
	s.indexOps(indexOp{kind: opDropThread, tid: tid})
	if !keepRow {
		if _, err := s.exec(ctx, tx, `DELETE FROM threads WHERE tid = ?`, tid); err != nil {
			return 0, err
		}
		return 0, nil
	}
	return tid, nil
}

func addUsage(a *rollout.Usage, b rollout.Usage, sign int64) {
	a.InputTokens += sign * b.InputTokens
	a.CachedInputTokens += sign * b.CachedInputTokens
	a.OutputTokens += sign * b.OutputTokens
	a.ReasoningTokens += sign * b.ReasoningTokens
	a.TotalTokens += sign * b.TotalTokens
}
