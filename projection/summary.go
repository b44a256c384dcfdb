package projection

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// Summary counts a workspace's threads from their rows: what `rolloutctl
// stats` prints without reading a rollout.
type Summary struct {
	Threads            int `json:"threads"`
	Active             int `json:"active"`
	Archived           int `json:"archived"`
	ArchivedCompressed int `json:"archived_compressed"`
	Subagents          int `json:"subagents"`
	Forks              int `json:"forks"`
	// OpenTurns counts threads whose last turn has no end record (a live
	// or crashed host).
	OpenTurns      int `json:"open_turns"`
	WithCheckpoint int `json:"with_checkpoint"`
	// Damaged counts threads with rejected records or damaged regions
	// seen while projecting them; DamageSeen sums those.
	Damaged    int   `json:"damaged"`
	DamageSeen int64 `json:"damage_seen"`
	// Turns and Items are the visible ones.
	Turns int64 `json:"turns"`
	Items int64 `json:"items"`
	// The rollouts' sizes on disk when last read to their end.
	RolloutBytes            int64 `json:"rollout_bytes"`
	ActiveBytes             int64 `json:"active_bytes"`
	ArchivedBytes           int64 `json:"archived_bytes"`
	ArchivedCompressedBytes int64 `json:"archived_compressed_bytes"`
	TotalTokens             int64 `json:"total_tokens"`
}

// Summary counts the workspace's threads in one query over their rows,
// made to agree with the thread directories first (as List does: rollouts
// with no row, moved or gone). A row may be behind a rollout another
// process appends to and has not projected yet; Refresh brings every row
// up to date first.
func (s *Store) Summary(ctx context.Context) (_ Summary, err error) {
	defer s.guard(&err)
	if err := s.Flush(ctx); err != nil {
		return Summary{}, err
	}
	if err := s.reconcile(ctx, false); err != nil {
		return Summary{}, err
	}
	var sum Summary
	cold := "%" + rollout.ColdExt
	err = s.r.QueryRowContext(ctx, `SELECT count(*),
		coalesce(sum(location = 'active'), 0), coalesce(sum(location = 'archived'), 0),
		coalesce(sum(location = 'archived' AND rollout_path LIKE ?1), 0),
		coalesce(sum(source_kind = ?2), 0), coalesce(sum(forked_from != ''), 0),
		coalesce(sum(current_turn != ''), 0), coalesce(sum(checkpoint_offset > 0), 0),
		coalesce(sum(damage_count > 0), 0), coalesce(sum(damage_count), 0),
		coalesce(sum(turn_count), 0), coalesce(sum(item_count), 0),
		coalesce(sum(max(file_size, 0)), 0), coalesce(sum(CASE WHEN location = 'active' THEN max(file_size, 0) END), 0),
		coalesce(sum(CASE WHEN location = 'archived' AND rollout_path NOT LIKE ?1 THEN max(file_size, 0) END), 0),
		coalesce(sum(CASE WHEN location = 'archived' AND rollout_path LIKE ?1 THEN max(file_size, 0) END), 0),
		coalesce(sum(total_tokens), 0)
		FROM threads`, cold, string(rollout.SourceSubagent)).
		Scan(&sum.Threads, &sum.Active, &sum.Archived, &sum.ArchivedCompressed, &sum.Subagents, &sum.Forks,
			&sum.OpenTurns, &sum.WithCheckpoint, &sum.Damaged, &sum.DamageSeen, &sum.Turns, &sum.Items,
			&sum.RolloutBytes, &sum.ActiveBytes, &sum.ArchivedBytes, &sum.ArchivedCompressedBytes, &sum.TotalTokens)
	if err != nil {
		return Summary{}, errors.Wrap(err, "summary")
	}
	return sum, nil
}
