package pgindex

import (
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// threadRow is an index_threads row as the applier keeps it: the fields
// of projection's threads row, under the same names.
type threadRow struct {
	TID                      int64
	ID, Location, Path       string
	FileID                   uint64
	FileSize                 int64
	ProjectedOffset          int64
	ProjectedSeq             uint64
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
	// of the row with the same Rev is the row (the applier's cache).
	Rev int64
}

// made reports whether the row was made from a thread's frames (a row
// inserted only to be locked has no file id yet).
func (t *threadRow) made() bool { return t.FileID != 0 }

// newRev makes a row's stamp: random, so that a row dropped and made
// again, by this host or another, never repeats an earlier stamp.
func newRev() int64 { return int64(rand.Uint64()>>1) | 1 }

const threadCols = `tid, id, location, rollout_path, file_id, file_size, projected_offset, projected_seq, anchor_offset, anchor_seq, anchor_crc,
	workspace_id, identity_error, state, name, labels, flags, source_kind, source_client, parent, root, depth,
	forked_from, forked_from_turn, created_at, updated_at, turn_count, item_count, last_role, preview,
	input_tokens, cached_input_tokens, output_tokens, reasoning_tokens, total_tokens,
	open_turn, current_turn, checkpoint_offset, checkpoint_seq, damage_count, rev`

func prefixCols(p, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// threadDest returns the scan destinations of threadCols into t, and a
// func that finishes the row once scanned.
func threadDest(t *threadRow) ([]any, func()) {
	var fileID, pseq, aseq, acrc, cseq int64
	dest := []any{&t.TID, &t.ID, &t.Location, &t.Path, &fileID, &t.FileSize, &t.ProjectedOffset, &pseq, &t.AnchorOffset, &aseq, &acrc,
		&t.WorkspaceID, &t.IdentityError, &t.State, &t.Name, &t.Labels, &t.Flags, &t.SourceKind, &t.SourceClient, &t.Parent, &t.Root, &t.Depth,
		&t.ForkedFrom, &t.ForkedTurn, &t.CreatedAt, &t.UpdatedAt, &t.TurnCount, &t.ItemCount, &t.LastRole, &t.Preview,
		&t.Usage.InputTokens, &t.Usage.CachedInputTokens, &t.Usage.OutputTokens, &t.Usage.ReasoningTokens, &t.Usage.TotalTokens,
		&t.OpenTurn, &t.Current, &t.CheckpointOffset, &cseq, &t.DamageCount, &t.Rev}
	return dest, func() {
		t.FileID, t.ProjectedSeq, t.AnchorSeq, t.AnchorCRC, t.CheckpointSeq = uint64(fileID), uint64(pseq), uint64(aseq), uint32(acrc), uint64(cseq)
		if len(t.Labels) == 0 {
			t.Labels = nil
		}
	}
}

// qSaveThread writes every column of a row but its keys.
const qSaveThread = `UPDATE rolloutdb.index_threads SET location = $2, rollout_path = $3, file_id = $4, file_size = $5,
	projected_offset = $6, projected_seq = $7, anchor_offset = $8, anchor_seq = $9, anchor_crc = $10,
	workspace_id = $11, identity_error = $12, state = $13, name = $14, labels = $15, flags = $16,
	source_kind = $17, source_client = $18, parent = $19, root = $20, depth = $21, forked_from = $22, forked_from_turn = $23,
	created_at = $24, updated_at = $25, turn_count = $26, item_count = $27, last_role = $28, preview = $29,
	input_tokens = $30, cached_input_tokens = $31, output_tokens = $32, reasoning_tokens = $33, total_tokens = $34,
	open_turn = $35, current_turn = $36, checkpoint_offset = $37, checkpoint_seq = $38, damage_count = $39, rev = $40
	WHERE tid = $1`

// queueSaveThread queues the write of a row (a new Rev), and of its label
// rows: all of them when the labels changed, their copied sort keys
// otherwise. was is the row as read (nil: a row made anew).
func queueSaveThread(b *pgx.Batch, t *threadRow, was *threadRow, labelsDirty bool) {
	t.Rev = newRev()
	labels := t.Labels
	if labels == nil {
		labels = []string{}
	}
	flags := t.Flags
	if flags == nil {
		flags = map[string]bool{}
	}
	b.Queue(qSaveThread, t.TID, t.Location, t.Path, int64(t.FileID), t.FileSize, t.ProjectedOffset, int64(t.ProjectedSeq), t.AnchorOffset, int64(t.AnchorSeq), int64(t.AnchorCRC),
		t.WorkspaceID, t.IdentityError, t.State, t.Name, labels, flags, t.SourceKind, t.SourceClient, t.Parent, t.Root, t.Depth,
		t.ForkedFrom, t.ForkedTurn, t.CreatedAt, t.UpdatedAt, t.TurnCount, t.ItemCount, t.LastRole, t.Preview,
		t.Usage.InputTokens, t.Usage.CachedInputTokens, t.Usage.OutputTokens, t.Usage.ReasoningTokens, t.Usage.TotalTokens,
		t.OpenTurn, t.Current, t.CheckpointOffset, int64(t.CheckpointSeq), t.DamageCount, t.Rev)
	switch {
	case labelsDirty || was == nil || !slices.Equal(was.Labels, t.Labels):
		b.Queue(`DELETE FROM rolloutdb.index_labels WHERE tid = $1`, t.TID)
		if len(t.Labels) > 0 {
			b.Queue(`INSERT INTO rolloutdb.index_labels (tid, label, ws, id, location, updated_at, created_at)
				SELECT t.tid, l, t.ws, t.id, t.location, t.updated_at, t.created_at
				FROM rolloutdb.index_threads t, unnest($2::text[]) l WHERE t.tid = $1
				ON CONFLICT DO NOTHING`, t.TID, t.Labels)
		}
	case len(t.Labels) > 0 && (was.Location != t.Location || was.UpdatedAt != t.UpdatedAt || was.CreatedAt != t.CreatedAt):
		b.Queue(`UPDATE rolloutdb.index_labels SET location = $2, updated_at = $3, created_at = $4 WHERE tid = $1`,
			t.TID, t.Location, t.UpdatedAt, t.CreatedAt)
	}
}

func (t *threadRow) clone() *threadRow {
	c := *t
	c.Labels = slices.Clone(t.Labels)
	c.Flags = maps.Clone(t.Flags)
	return &c
}

func (t *threadRow) info() projection.ThreadInfo {
	// Copies, as state.db's: never nil, as read from a row.
	labels := slices.Clone(t.Labels)
	if labels == nil {
		labels = []string{}
	}
	flags := maps.Clone(t.Flags)
	if flags == nil {
		flags = map[string]bool{}
	}
	return projection.ThreadInfo{
		ID: t.ID, Status: t.Location, State: t.State, Name: t.Name, Labels: labels, Flags: flags,
		Source:     rollout.Source{Kind: t.SourceKind, Client: t.SourceClient, Parent: t.Parent, Root: t.Root, Depth: t.Depth},
		ForkedFrom: t.ForkedFrom, ForkedTurn: t.ForkedTurn,
		CreatedAt: time.Unix(0, t.CreatedAt).UTC(), UpdatedAt: time.Unix(0, t.UpdatedAt).UTC(),
		Turns: t.TurnCount, Items: t.ItemCount, LastRole: t.LastRole, Preview: t.Preview, Usage: t.Usage,
		OpenTurn: t.OpenTurn, RolloutPath: t.Path, ProjectedOffset: t.ProjectedOffset, ProjectedSeq: t.ProjectedSeq,
		CheckpointOffset: t.CheckpointOffset, Damage: t.DamageCount, IdentityError: t.IdentityError,
	}
}

// turnRow is an index_turns row while applying.
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

const turnCols = `turn_id, ordinal, instance, status, model, start_seq, end_seq, last_seq, start_offset, started_at, ended_at,
	item_count, exact_history, input_tokens, cached_input_tokens, output_tokens, reasoning_tokens, total_tokens`

func scanTurn(row pgx.Row) (*turnRow, error) {
	var t turnRow
	var ord *int64
	var inst, start, end, last int64
	err := row.Scan(&t.ID, &ord, &inst, &t.Status, &t.Model, &start, &end, &last, &t.StartOffset, &t.StartedAt, &t.EndedAt,
		&t.ItemCount, &t.ExactHistory, &t.Usage.InputTokens, &t.Usage.CachedInputTokens, &t.Usage.OutputTokens,
		&t.Usage.ReasoningTokens, &t.Usage.TotalTokens)
	if err != nil {
		return nil, err
	}
	if ord != nil {
		t.Ordinal = *ord
	}
	t.Instance, t.StartSeq, t.EndSeq, t.LastSeq = uint64(inst), uint64(start), uint64(end), uint64(last)
	return &t, nil
}

const qSaveTurn = `INSERT INTO rolloutdb.index_turns (tid, ` + turnCols + `)
	VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19)
	ON CONFLICT (tid, turn_id) DO UPDATE SET ordinal = excluded.ordinal, instance = excluded.instance, status = excluded.status,
	model = excluded.model, start_seq = excluded.start_seq, end_seq = excluded.end_seq, last_seq = excluded.last_seq,
	start_offset = excluded.start_offset, started_at = excluded.started_at, ended_at = excluded.ended_at,
	item_count = excluded.item_count, exact_history = excluded.exact_history, input_tokens = excluded.input_tokens,
	cached_input_tokens = excluded.cached_input_tokens, output_tokens = excluded.output_tokens,
	reasoning_tokens = excluded.reasoning_tokens, total_tokens = excluded.total_tokens`

func queueSaveTurn(b *pgx.Batch, tid int64, t *turnRow) {
	var ord *int64
	if t.Ordinal > 0 {
		ord = &t.Ordinal
	}
	b.Queue(qSaveTurn, tid, t.ID, ord, int64(t.Instance), t.Status, t.Model, int64(t.StartSeq), int64(t.EndSeq), int64(t.LastSeq),
		t.StartOffset, t.StartedAt, t.EndedAt, t.ItemCount, t.ExactHistory, t.Usage.InputTokens,
		t.Usage.CachedInputTokens, t.Usage.OutputTokens, t.Usage.ReasoningTokens, t.Usage.TotalTokens)
}

// queueDeleteRows queues the removal of every projection row of a
// thread but its index_threads row (a thread projected again from its
// start) or with it (keepRow false: a thread forgotten).
func queueDeleteRows(b *pgx.Batch, ws int32, tid int64, id string, keepRow bool) {
	b.Queue(`DELETE FROM rolloutdb.index_items WHERE tid = $1`, tid)
	b.Queue(`DELETE FROM rolloutdb.index_turns WHERE tid = $1`, tid)
	b.Queue(`DELETE FROM rolloutdb.index_checkpoints WHERE tid = $1`, tid)
	b.Queue(`DELETE FROM rolloutdb.index_labels WHERE tid = $1`, tid)
	b.Queue(`DELETE FROM rolloutdb.index_artifact_refs WHERE ws = $1 AND thread_id = $2`, ws, id)
	if !keepRow {
		b.Queue(`DELETE FROM rolloutdb.index_threads WHERE tid = $1`, tid)
	}
}

// idHash is an item id's key within its turn (0: no id; an item without
// one is never replaced).
func idHash(id string) int64 {
	if id == "" {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	if v := int64(h.Sum64()); v != 0 {
		return v
	}
	return 1
}

func addUsage(a *rollout.Usage, b rollout.Usage, sign int64) {
	a.InputTokens += sign * b.InputTokens
	a.CachedInputTokens += sign * b.CachedInputTokens
	a.OutputTokens += sign * b.OutputTokens
	a.ReasoningTokens += sign * b.ReasoningTokens
	a.TotalTokens += sign * b.TotalTokens
}
