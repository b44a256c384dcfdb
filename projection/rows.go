package projection

import (
	"context"
	"database/sql"
	"encoding/json"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// threadRow is a threads row as the projector keeps it while applying.
type threadRow struct {
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
}

const threadCols = `id, location, rollout_path, file_id, file_size, projected_offset, projected_seq, anchor_offset, anchor_seq, anchor_crc,
	workspace_id, identity_error, state, name, labels, flags, source_kind, source_client, parent, root, depth,
	forked_from, forked_from_turn, created_at, updated_at, turn_count, item_count, last_role, preview,
	input_tokens, cached_input_tokens, output_tokens, reasoning_tokens, total_tokens,
	open_turn, current_turn, checkpoint_offset, checkpoint_seq, damage_count`

type scanner interface{ Scan(dest ...any) error }

func scanThread(sc scanner) (*threadRow, error) {
	var t threadRow
	var labels, flags string
	var fileID int64
	var pseq, cseq, aseq, acrc int64
	err := sc.Scan(&t.ID, &t.Location, &t.RolloutPath, &fileID, &t.FileSize, &t.ProjectedOffset, &pseq, &t.AnchorOffset, &aseq, &acrc,
		&t.WorkspaceID, &t.IdentityError, &t.State, &t.Name, &labels, &flags, &t.SourceKind, &t.SourceClient, &t.Parent, &t.Root, &t.Depth,
		&t.ForkedFrom, &t.ForkedTurn, &t.CreatedAt, &t.UpdatedAt, &t.TurnCount, &t.ItemCount, &t.LastRole, &t.Preview,
		&t.Usage.InputTokens, &t.Usage.CachedInputTokens, &t.Usage.OutputTokens, &t.Usage.ReasoningTokens, &t.Usage.TotalTokens,
		&t.OpenTurn, &t.Current, &t.CheckpointOffset, &cseq, &t.DamageCount)
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

// loadThread reads a thread's row in tx; nil if there is none.
func loadThread(ctx context.Context, tx *sql.Tx, id string) (*threadRow, error) {
	t, err := scanThread(tx.QueryRowContext(ctx, `SELECT `+threadCols+` FROM threads WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return t, errors.Wrapf(err, "load thread %s", id)
}

const upsertThread = `INSERT INTO threads (` + threadCols + `) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
	ON CONFLICT (id) DO UPDATE SET location = excluded.location, rollout_path = excluded.rollout_path,
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
	damage_count = excluded.damage_count`

func (s *Store) saveThread(ctx context.Context, tx *sql.Tx, t *threadRow) error {
	labels, _ := json.Marshal(nonNil(t.Labels))
	flags, _ := json.Marshal(nonNilMap(t.Flags))
	_, err := s.exec(ctx, tx, upsertThread,
		t.ID, t.Location, t.RolloutPath, int64(t.FileID), t.FileSize, t.ProjectedOffset, int64(t.ProjectedSeq), t.AnchorOffset, int64(t.AnchorSeq), int64(t.AnchorCRC),
		t.WorkspaceID, t.IdentityError, t.State, t.Name, string(labels), string(flags), t.SourceKind, t.SourceClient, t.Parent, t.Root, t.Depth,
		t.ForkedFrom, t.ForkedTurn, t.CreatedAt, t.UpdatedAt, t.TurnCount, t.ItemCount, t.LastRole, t.Preview,
		t.Usage.InputTokens, t.Usage.CachedInputTokens, t.Usage.OutputTokens, t.Usage.ReasoningTokens, t.Usage.TotalTokens,
		t.OpenTurn, t.Current, t.CheckpointOffset, int64(t.CheckpointSeq), t.DamageCount)
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
	StartOffset  int64
	StartedAt    int64
	EndedAt      int64
	ItemCount    int64
	ExactHistory int64
	Usage        rollout.Usage
	dirty        bool
}

func (t *turnRow) visible() bool { return t.Ordinal > 0 }

const turnCols = `turn_id, ordinal, instance, status, model, start_seq, end_seq, start_offset, started_at, ended_at,
	item_count, exact_history, input_tokens, cached_input_tokens, output_tokens, reasoning_tokens, total_tokens`

func scanTurn(sc scanner) (*turnRow, error) {
	var t turnRow
	var ord sql.NullInt64
	var start, end, inst int64
	err := sc.Scan(&t.ID, &ord, &inst, &t.Status, &t.Model, &start, &end, &t.StartOffset, &t.StartedAt, &t.EndedAt,
		&t.ItemCount, &t.ExactHistory, &t.Usage.InputTokens, &t.Usage.CachedInputTokens, &t.Usage.OutputTokens,
		&t.Usage.ReasoningTokens, &t.Usage.TotalTokens)
	t.Ordinal, t.Instance, t.StartSeq, t.EndSeq = ord.Int64, uint64(inst), uint64(start), uint64(end)
	return &t, err
}

const upsertTurn = `INSERT INTO turns (thread_id, ` + turnCols + `) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
	ON CONFLICT (thread_id, turn_id) DO UPDATE SET ordinal = excluded.ordinal, instance = excluded.instance, status = excluded.status,
	model = excluded.model, start_seq = excluded.start_seq, end_seq = excluded.end_seq, start_offset = excluded.start_offset,
	started_at = excluded.started_at, ended_at = excluded.ended_at, item_count = excluded.item_count,
	exact_history = excluded.exact_history, input_tokens = excluded.input_tokens,
	cached_input_tokens = excluded.cached_input_tokens, output_tokens = excluded.output_tokens,
	reasoning_tokens = excluded.reasoning_tokens, total_tokens = excluded.total_tokens`

func (s *Store) saveTurn(ctx context.Context, tx *sql.Tx, thread string, t *turnRow) error {
	var ord any
	if t.Ordinal > 0 {
		ord = t.Ordinal
	}
	_, err := s.exec(ctx, tx, upsertTurn, thread, t.ID, ord, int64(t.Instance), t.Status, t.Model, int64(t.StartSeq), int64(t.EndSeq),
		t.StartOffset, t.StartedAt, t.EndedAt, t.ItemCount, t.ExactHistory, t.Usage.InputTokens,
		t.Usage.CachedInputTokens, t.Usage.OutputTokens, t.Usage.ReasoningTokens, t.Usage.TotalTokens)
	return err
}

// deleteThreadRows removes every projection row of a thread. Business
// state is not touched.
func (s *Store) deleteThreadRows(ctx context.Context, tx *sql.Tx, id string) error {
	// A thread projected for the first time (every thread of a rebuild)
	// has no rows: say so with two index lookups. Touching the full-text
	// table, even to delete nothing, makes FTS5 flush what it buffered.
	var any int
	err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM threads WHERE id = ?1) OR EXISTS (SELECT 1 FROM turns WHERE thread_id = ?1)
		OR EXISTS (SELECT 1 FROM items WHERE thread_id = ?1) OR EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = ?1)
		OR EXISTS (SELECT 1 FROM artifact_refs WHERE thread_id = ?1) OR EXISTS (SELECT 1 FROM thread_labels WHERE thread_id = ?1)`, id).Scan(&any)
	if err != nil {
		return errors.Wrapf(err, "rows of %s", id)
	}
	if any == 0 {
		return nil
	}
	for _, q := range []string{
		`DELETE FROM items_fts WHERE rowid IN (SELECT id FROM items WHERE thread_id = ?)`,
		`DELETE FROM items WHERE thread_id = ?`,
		`DELETE FROM turns WHERE thread_id = ?`,
		`DELETE FROM checkpoints WHERE thread_id = ?`,
		`DELETE FROM artifact_refs WHERE thread_id = ?`,
		`DELETE FROM thread_labels WHERE thread_id = ?`,
		`DELETE FROM threads WHERE id = ?`,
	} {
		if _, err := s.exec(ctx, tx, q, id); err != nil {
			return err
		}
	}
	return nil
}

func addUsage(a *rollout.Usage, b rollout.Usage, sign int64) {
	a.InputTokens += sign * b.InputTokens
	a.CachedInputTokens += sign * b.CachedInputTokens
	a.OutputTokens += sign * b.OutputTokens
	a.ReasoningTokens += sign * b.ReasoningTokens
	a.TotalTokens += sign * b.TotalTokens
}
