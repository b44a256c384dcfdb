package rolloutdb

import (
	"context"
	"time"

	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/projection"
)

// Artifacts returns the workspace's artifact store: spilled tool outputs,
// attachments, terminals.
func (db *DB) Artifacts() Blobs { return db.arts }

// GCOptions qualify GC.
type GCOptions struct {
	// DryRun reports and removes nothing.
	DryRun bool
	// Grace keeps files younger than this (default 1 hour): a tool output
	// is spilled before the record that references it is appended.
	Grace time.Duration
}

// GCReport is what GC did.
type GCReport struct {
	Artifacts artifacts.GCReport   `json:"artifacts"`
	Terminals []artifacts.Terminal `json:"terminals_swept"`
	// Pending are cleanup-queue paths that still could not be removed.
	Pending []string `json:"pending"`
	// Temporary are the temporary files of threads/active and
	// threads/archived that a crash left (a rollout being created, forked
	// or compressed), older than the grace period: removed.
	Temporary []string `json:"temporary_removed,omitempty"`
}

// GC finishes the cleanup queue, removes artifacts no surviving record
// references and files of threads that are gone, and sweeps terminals past
// their retention. What it keeps, it says why.
func (db *DB) GC(ctx context.Context, o GCOptions) (GCReport, error) {
	var rep GCReport
	if !o.DryRun {
		pending, err := db.RunCleanup(ctx)
		rep.Pending = pending
		if err != nil {
			return rep, err
		}
	}
	refs, err := db.state.ArtifactRefs(ctx) // after a full refresh
	if err != nil {
		return rep, err
	}
	referenced := map[string]bool{}
	for _, r := range refs {
		referenced[r.Path] = true
	}
	threads := map[string]bool{}
	for cursor := ""; ; {
		page, err := db.state.List(ctx, projection.ListOptions{Scope: projection.ScopeAll, Limit: 1000, Cursor: cursor})
		if err != nil {
			return rep, err
		}
		for _, t := range page.Threads {
			threads[t.ID] = true
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	rep.Artifacts, err = db.arts.GC(artifacts.GCOptions{Referenced: referenced, Threads: threads, Grace: o.Grace, DryRun: o.DryRun})
	if err != nil || o.DryRun {
		return rep, err
	}
	rep.Terminals, err = db.arts.SweepTerminals()
	if err != nil {
		return rep, err
	}
	if s, ok := db.log.(tempSweeper); ok {
		rep.Temporary, err = s.SweepTemps(o.Grace)
	}
	return rep, err
}
