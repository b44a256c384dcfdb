package rolloutdb

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/importer"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// SourceImport is the source kind of a thread imported from another tool
// (Source.Client names the format).
const SourceImport = "import"

// ImportOptions qualify an import.
type ImportOptions struct {
	// DryRun reads and reports, and writes nothing.
	DryRun bool
}

// ImportResult is what importing one session did.
type ImportResult struct {
	ID         string `json:"id"`
	SourcePath string `json:"source_path"`
	// Turns were written now; Existing were there from an earlier import.
	Turns    int             `json:"turns"`
	Existing int             `json:"existing"`
	Created  bool            `json:"created"`
	Skipped  []importer.Skip `json:"skipped"`
}

// Import writes a session read by package importer as a thread. The
// thread id is derived from the source's session id, so importing the
// same session again changes nothing, and importing one that has grown
// appends only its new turns (a turn already imported is not changed,
// even if the source added to it since). Each turn is one frame with the
// source's timestamps and token usage. Skipped source lines are reported,
// and kept as diagnostics of the thread (kind "import:<format>", offset:
// the line). An archived thread is refused (restore it first). A turn the
// host rolled back since it was imported is imported again.
func (db *DB) Import(ctx context.Context, s importer.Session, o ImportOptions) (ImportResult, error) {
	id := importer.ThreadID(s.Format, s.SourceID)
	res := ImportResult{ID: id, SourcePath: s.SourcePath, Skipped: append([]importer.Skip{}, s.Skips...)}
	if err := rollout.ValidateThreadID(id); err != nil {
		return res, errors.Wrapf(err, "import %s", s.SourcePath)
	}
	have := map[string]bool{}
	info, err := db.state.Thread(ctx, id)
	switch {
	case err == nil && info.Status == projection.LocationArchived:
		return res, errors.WithHint(errors.Wrapf(ErrThreadArchived, "import %s into %s", s.SourcePath, id), "restore it first (rolloutctl restore)")
	case err == nil:
		turns, err := db.state.Turns(ctx, id, 1, max(info.Turns, 1))
		if err != nil {
			return res, err
		}
		for _, t := range turns {
			have[t.ID] = true
		}
	case errors.Is(err, projection.ErrNotFound):
		res.Created = true
	default:
		return res, err
	}
	var todo []importer.Turn
	for _, t := range s.Turns {
		if have[t.ID] {
			res.Existing++
		} else {
			todo = append(todo, t)
		}
	}
	res.Turns = len(todo)
	if o.DryRun || len(todo) == 0 && !res.Created {
		return res, nil
	}
	var th *Thread
	if res.Created {
		th, err = db.CreateThread(ctx, ThreadOptions{ID: id, Source: rollout.Source{Kind: SourceImport, Client: s.Format},
			Metadata: map[string]string{"import_format": s.Format, "import_source_id": s.SourceID, "import_path": s.SourcePath}})
		if err == nil && s.Name != "" {
			name := s.Name
			if _, err = th.UpdateMetadata(ctx, MetadataUpdate{Name: &name}); err != nil {
				err = errors.CombineErrors(err, th.Close())
			}
		}
	} else {
		th, err = db.OpenThread(ctx, id)
	}
	if err != nil {
		return res, errors.Wrapf(err, "import %s", s.SourcePath)
	}
	for i, t := range todo {
		if err := importTurn(ctx, th, t); err != nil {
			res.Turns = i
			return res, errors.CombineErrors(errors.Wrapf(err, "import %s: turn at line %d", s.SourcePath, t.Line), th.Close())
		}
	}
	if err := th.Close(); err != nil {
		return res, err
	}
	if len(s.Skips) > 0 {
		rep := recovery.Report{}
		for _, sk := range s.Skips {
			rep.Skipped = append(rep.Skipped, recovery.Skipped{Offset: int64(sk.Line), Kind: "import:" + s.Format, Reason: sk.Reason})
		}
		if err := db.state.RecordResumeReport(ctx, id, rep); err != nil {
			db.logger().Warn("rolloutdb: could not keep the import's skipped lines as diagnostics", "thread", id, "err", err.Error())
		}
	}
	return res, nil
}

// importTurn writes one imported turn as one frame, with its times.
func importTurn(ctx context.Context, th *Thread, t importer.Turn) error {
	at := func(ts time.Time) time.Time {
		if ts.IsZero() {
			return time.Now()
		}
		return ts
	}
	start, err := rollout.NewRecord(rollout.KindTurnStarted, t.ID, rollout.TurnStarted{Model: t.Model})
	if err != nil {
		return err
	}
	start.Time = at(t.Started)
	recs := []rollout.Record{start}
	for _, it := range t.Items {
		it, err := th.db.spill(th.id, it)
		if err != nil {
			return err
		}
		rec, err := itemRecord(t.ID, it)
		if err != nil {
			return err
		}
		rec.Time = at(t.Ended)
		recs = append(recs, rec)
	}
	end, err := rollout.NewRecord(rollout.KindTurnCompleted, t.ID, rollout.TurnCompleted{Status: rollout.TurnStatusCompleted, Usage: t.Usage})
	if err != nil {
		return err
	}
	end.Time = at(t.Ended)
	recs = append(recs, end)
	th.mu.Lock()
	defer th.mu.Unlock()
	if th.turn != nil {
		return errors.Wrapf(ErrTurnInProgress, "thread %s", th.id)
	}
	// One frame if it fits (after a crash, all of the turn or none of it);
	// a larger turn in frames of at most importFrame bytes of bodies, the
	// end record in the last: a crash between them leaves the turn open,
	// and a later import does not add to a turn already there.
	var batch []rollout.Record
	size := 0
	for i, rec := range recs {
		batch = append(batch, rec)
		size += len(rec.Body)
		if i == len(recs)-1 || size+len(recs[i+1].Body) > importFrame {
			if _, err := th.append(ctx, batch, rollout.AppendOptions{}); err != nil {
				return err
			}
			batch, size = nil, 0
		}
	}
	return nil
}

// importFrame bounds the record bodies of one frame an import writes (a
// frame holds at most rollout.MaxFrameSize).
const importFrame = 4 << 20
