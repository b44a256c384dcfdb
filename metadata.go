package rolloutdb

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// Rollback drops the thread's last n visible turns from its visible and
// model history, as a thread_rolled_back record: the turns' records stay
// in the rollout, and replay, resume and the projection leave them out. A
// checkpoint whose covered turn is rolled back is no longer used; resume
// falls back to the one before it (or to the beginning).
//
// It is refused while a turn is open (ErrTurnInProgress), on a thread
// archived while open (ErrThreadArchived), and for more turns than the
// thread shows (ErrRollbackTooFar). The record is durable when Rollback
// returns.
func (t *Thread) Rollback(ctx context.Context, n int) (rollout.AppendResult, error) {
	if n < 1 {
		return rollout.AppendResult{}, errors.Newf("rolloutdb: rollback of %d turns: the count must be at least 1", n)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.archived.Load() {
		return rollout.AppendResult{}, errors.WithHint(errors.Wrapf(ErrThreadArchived, "thread %s", t.id), "restore it first (DB.Restore, rolloutctl restore)")
	}
	if t.turn != nil {
		return rollout.AppendResult{}, errors.Wrapf(ErrTurnInProgress, "thread %s, turn %s: end it before a rollback", t.id, t.turn.id)
	}
	// The projection is brought up to this thread's rollout before it
	// answers, and nothing else appends while this handle holds the
	// writer's lock.
	info, err := t.db.state.Thread(ctx, t.id)
	if err != nil {
		return rollout.AppendResult{}, err
	}
	if int64(n) > info.Turns {
		return rollout.AppendResult{}, errors.Wrapf(ErrRollbackTooFar, "thread %s has %d turns, a rollback of %d was asked", t.id, info.Turns, n)
	}
	rec, err := rollout.NewRecord(rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: n})
	if err != nil {
		return rollout.AppendResult{}, err
	}
	return t.append(ctx, []rollout.Record{rec}, rollout.AppendOptions{})
}

// MetadataUpdate changes a thread's name, labels, flags or host status.
// Nil and empty fields leave what they name unchanged.
type MetadataUpdate struct {
	// Name is the thread's new name ("" clears it).
	Name *string
	// AddLabels and RemoveLabels change the thread's label set; a label
	// in both is removed.
	AddLabels, RemoveLabels []string
	// Flags sets each named flag to its value.
	Flags map[string]bool
	// Status is the host's own status of the thread (ThreadInfo.State),
	// which List filters by (ListOptions.State).
	Status *string
}

// UpdateMetadata appends a metadata_updated record: it is durable when
// UpdateMetadata returns, and List and ThreadInfo show it. An update that
// names nothing is refused (ErrEmptyUpdate); one that names what is
// already so (a label the thread has) is written all the same. A label or
// flag name must be non-empty.
func (t *Thread) UpdateMetadata(ctx context.Context, u MetadataUpdate) (rollout.AppendResult, error) {
	return t.updateMetadata(ctx, u, time.Time{})
}

// updateMetadata is UpdateMetadata with the record's time (zero: now).
func (t *Thread) updateMetadata(ctx context.Context, u MetadataUpdate, at time.Time) (rollout.AppendResult, error) {
	for _, l := range slices.Concat(u.AddLabels, u.RemoveLabels) {
		if l == "" {
			return rollout.AppendResult{}, errors.New("rolloutdb: metadata update: a label must not be empty")
		}
	}
	for k := range u.Flags {
		if k == "" {
			return rollout.AppendResult{}, errors.New("rolloutdb: metadata update: a flag name must not be empty")
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.updateMetadataLocked(ctx, u, at)
}

// updateMetadataLocked is updateMetadata with t.mu held.
func (t *Thread) updateMetadataLocked(ctx context.Context, u MetadataUpdate, at time.Time) (rollout.AppendResult, error) {
	body := rollout.MetadataUpdated{Name: u.Name, Status: u.Status, Flags: maps.Clone(u.Flags)}
	if len(u.AddLabels) > 0 || len(u.RemoveLabels) > 0 {
		// The record holds the whole set; the current one is the
		// projection's, brought up to this rollout (which only this
		// handle appends to).
		info, err := t.db.state.Thread(ctx, t.id)
		if err != nil {
			return rollout.AppendResult{}, err
		}
		labels := slices.Clone(info.Labels)
		for _, l := range u.AddLabels {
			if !slices.Contains(labels, l) {
				labels = append(labels, l)
			}
		}
		labels = slices.DeleteFunc(labels, func(l string) bool { return slices.Contains(u.RemoveLabels, l) })
		body.Labels = append([]string{}, labels...) // non-nil: an empty set clears
	}
	if body.Name == nil && body.Status == nil && len(body.Flags) == 0 && body.Labels == nil {
		return rollout.AppendResult{}, errors.Wrapf(ErrEmptyUpdate, "thread %s", t.id)
	}
	rec, err := rollout.NewRecord(rollout.KindMetadataUpdated, "", body)
	if err != nil {
		return rollout.AppendResult{}, err
	}
	rec.Time = at
	return t.append(ctx, []rollout.Record{rec}, rollout.AppendOptions{})
}
