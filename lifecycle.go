package rolloutdb

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// TerminalHook is asked to stop (or invalidate) a thread's running
// background terminals when the thread is archived or deleted. An error
// fails the operation before anything changed.
type TerminalHook func(ctx context.Context, threadID string) error

// LifecycleReport lists the threads an operation changed, root first.
type LifecycleReport struct {
	Threads []string `json:"threads"`
	// Pending are paths left in the cleanup queue (a delete that could not
	// remove them yet; retried at open and by GC).
	Pending []string `json:"pending,omitempty"`
}

// Archive archives a root thread and its subagent descendants (through
// open and closed edges): the terminal hook is asked to stop their
// terminals, an archived record is appended, and each rollout moves to
// threads/archived durably. New turns are refused from then on
// (ErrThreadArchived); a turn already running is not cancelled and may
// commit. History and artifacts stay. Each thread is either still active
// or archived after a crash; running Archive again finishes the tree.
func (db *DB) Archive(ctx context.Context, id, reason string) (LifecycleReport, error) {
	tree, err := db.subtree(ctx, id, "", projection.LocationActive)
	if err != nil {
		return LifecycleReport{}, err
	}
	if len(tree) == 0 {
		return LifecycleReport{}, errors.Wrapf(ErrThreadArchived, "thread %s and its subagents are archived already", id)
	}
	if err := db.checkTreeFree(ctx, tree, "archive"); err != nil {
		return LifecycleReport{}, err
	}
	var rep LifecycleReport
	for _, tid := range tree {
		if db.opts.TerminalHook != nil {
			if err := db.opts.TerminalHook(ctx, tid); err != nil {
				return rep, errors.Wrapf(err, "archive %s: terminal hook", tid)
			}
		}
		if err := db.archiveOne(ctx, tid, reason); err != nil {
			return rep, err
		}
		rep.Threads = append(rep.Threads, tid)
	}
	return rep, nil
}

func (db *DB) archiveOne(ctx context.Context, id, reason string) error {
	rec, err := rollout.NewRecord(rollout.KindArchived, "", rollout.Lifecycle{Reason: reason})
	if err != nil {
		return err
	}
	err = db.withWriter(ctx, id, projection.LocationActive, func(w ThreadLog, open *Thread) error {
		if open != nil {
			open.archived.Store(true) // no new turns from here on
		}
		err := db.appendLifecycle(ctx, id, w, open, rec, projection.LocationArchived)
		if err == nil {
			err = db.log.Move(ctx, id, projection.LocationActive, projection.LocationArchived, w)
		}
		if err != nil && open != nil {
			open.archived.Store(false) // still active
		}
		return err
	})
	if err != nil {
		return errors.Wrapf(err, "archive %s", id)
	}
	db.notify(id, ThreadArchived)
	_, err = db.state.Thread(ctx, id) // the projection follows the move
	return err
}

// Restore brings an archived root thread back, with the subagent
// descendants whose edges are still open: each rollout moves back to
// threads/active durably (decompressed first), then a restored record is
// appended.
func (db *DB) Restore(ctx context.Context, id string) (LifecycleReport, error) {
	tree, err := db.subtree(ctx, id, projection.EdgeOpen, projection.LocationArchived)
	if err != nil {
		return LifecycleReport{}, err
	}
	if len(tree) == 0 {
		return LifecycleReport{}, errors.Wrapf(ErrNotArchived, "thread %s and its subagents with open edges are active", id)
	}
	if err := db.checkTreeFree(ctx, tree, "restore"); err != nil {
		return LifecycleReport{}, err
	}
	var rep LifecycleReport
	for _, tid := range tree {
		var held ThreadLog
		db.mu.Lock()
		if open := db.threads[tid]; open != nil {
			held = open.w // archived while open: its handle holds the lock
		}
		db.mu.Unlock()
		err := db.log.Move(ctx, tid, projection.LocationArchived, projection.LocationActive, held)
		db.pokeHub(tid)
		if err != nil {
			return rep, errors.Wrapf(err, "restore %s", tid)
		}
		rec, err := rollout.NewRecord(rollout.KindRestored, "", rollout.Lifecycle{})
		if err != nil {
			return rep, err
		}
		err = db.withWriter(ctx, tid, projection.LocationActive, func(w ThreadLog, open *Thread) error {
			if open != nil {
				open.archived.Store(false)
			}
			return db.appendLifecycle(ctx, tid, w, open, rec, projection.LocationActive)
		})
		if err != nil {
			return rep, errors.Wrapf(err, "restore %s", tid)
		}
		db.notify(tid, ThreadRestored)
		if _, err := db.state.Thread(ctx, tid); err != nil {
			return rep, err
		}
		rep.Threads = append(rep.Threads, tid)
	}
	return rep, nil
}

// Delete removes a root thread and its subagent descendants (through open
// and closed edges) from durable state: rollouts, projection rows and
// business rows; their artifacts go through the cleanup queue. Each
// thread is first made unreachable in the log (Log.Delete: the one atomic
// step; the local log renames the rollout out of the thread directories,
// and from then on it is neither listed nor loadable), then its rows go,
// then what the log left behind is removed. A delete that fails before
// the thread is unreachable leaves everything as it was; a failed removal
// is retried from the queue.
func (db *DB) Delete(ctx context.Context, id string) (LifecycleReport, error) {
	tree, err := db.subtree(ctx, id, "", "")
	if err != nil {
		return LifecycleReport{}, err
	}
	// Refuse before anything goes if any thread of the tree is held.
	for _, tid := range tree {
		if err := db.checkUnlocked(ctx, tid); err != nil {
			return LifecycleReport{}, errors.Wrapf(err, "delete %s", tid)
		}
	}
	var rep LifecycleReport
	// Leaves first: a crash leaves a smaller tree, never an orphan.
	for _, tid := range slices.Backward(tree) {
		if db.opts.TerminalHook != nil {
			if err := db.opts.TerminalHook(ctx, tid); err != nil {
				return rep, errors.Wrapf(err, "delete %s: terminal hook", tid)
			}
		}
		if err := db.deleteOne(ctx, tid); err != nil {
			return rep, err
		}
		rep.Threads = append(rep.Threads, tid)
	}
	slices.Reverse(rep.Threads)
	pending, err := db.RunCleanup(ctx)
	rep.Pending = pending
	return rep, err
}

func (db *DB) deleteOne(ctx context.Context, id string) error {
	defer db.pokeHub(id) // its followers end
	db.mu.Lock()
	_, open := db.threads[id]
	db.mu.Unlock()
	if open {
		return errors.WithHint(errors.Wrapf(ErrThreadOpen, "delete %s", id), "close the thread's handle first")
	}
	// Queue first: once the thread is unreachable, nothing else
	// remembers what belonged to it.
	var queued []string
	queue := func(left ...string) error {
		paths := slices.Concat(left, []string{artifacts.ToolResultsDir + "/" + id, artifacts.TerminalsDir + "/" + id})
		if err := db.state.EnqueueCleanup(ctx, "thread "+id+" deleted", paths...); err != nil {
			return err
		}
		queued = paths
		return nil
	}
	err := db.log.Delete(ctx, id, queue)
	db.pokeHub(id)
	if err != nil {
		err = errors.Wrapf(err, "delete %s", id)
		if queued == nil {
			return err // nothing changed
		}
		if _, lerr := db.log.Locate(ctx, id); lerr != nil {
			return err // unreachable: the queue finishes it
		}
		// The thread stays: so does everything of it. (If this fails
		// too, a later open drops the entries once they are old.)
		return errors.CombineErrors(err, db.unqueue(ctx, queued))
	}
	db.notify(id, ThreadDeleted)
	if err := db.state.Forget(ctx, id); err != nil {
		return err
	}
	return db.state.DeleteBusinessState(ctx, []string{id})
}

// unqueue drops the cleanup queue's entries for paths.
func (db *DB) unqueue(ctx context.Context, paths []string) error {
	items, err := db.state.PendingCleanup(ctx)
	if err != nil {
		return err
	}
	for _, it := range items {
		if slices.Contains(paths, it.Path) {
			if err := db.state.CleanupDone(ctx, it.ID); err != nil {
				return err
			}
		}
	}
	return nil
}

// cleanupSettle is how old a queue entry of a thread that still exists
// must be before it is dropped as a failed delete's leftover.
const cleanupSettle = time.Minute

// RunCleanup works through the cleanup queue and returns what could not
// be done yet. It accepts only what a delete queues: what the log left of
// a deleted thread (Log.Leftover: the local log's renamed rollout,
// threads/<dir>/<id>.rollout[.zst].deleted-<ns>), whose thread's rows and
// business state go with it, and a thread's artifact directories
// (tool-results/<id>, terminals/<id>), from which only files no surviving
// record references are removed (a fork references its source's outputs).
// Anything else is dropped from the queue, untouched, and logged.
func (db *DB) RunCleanup(ctx context.Context) ([]string, error) {
	items, err := db.state.PendingCleanup(ctx)
	if err != nil || len(items) == 0 {
		return nil, err
	}
	var referenced map[string]bool
	var pending []string
	for _, it := range items {
		kind, id := db.cleanupKind(it.Path)
		if kind == "" {
			db.logger().Error("rolloutdb: cleanup queue entry not made by a delete; dropped, nothing removed", "path", it.Path)
			if err := db.state.CleanupDone(ctx, it.ID); err != nil {
				return pending, err
			}
			continue
		}
		if _, err := db.log.Locate(ctx, id); err == nil {
			// The delete that queued this failed (or crashed) before the
			// thread left: nothing of it is garbage. Unless it is young: a
			// delete in another process may be between its queueing and
			// its rename; that process finishes it.
			if time.Since(it.EnqueuedAt) < cleanupSettle {
				continue
			}
			if err := db.state.CleanupDone(ctx, it.ID); err != nil {
				return pending, err
			}
			continue
		}
		var err error
		if kind == "log" {
			// The thread is gone: so are its rows and business state
			// (again, if the delete got that far).
			if err = db.state.Forget(ctx, id); err == nil {
				err = db.state.DeleteBusinessState(ctx, []string{id})
			}
			if err == nil {
				err = db.log.Purge(ctx, it.Path)
			}
		} else {
			if referenced == nil {
				if referenced, err = db.referencedArtifacts(ctx); err != nil {
					return pending, err
				}
			}
			err = db.arts.RemoveAll(it.Path, referenced)
		}
		if err != nil {
			pending = append(pending, it.Path)
			if ferr := db.state.CleanupFailed(ctx, it.ID, err); ferr != nil {
				return pending, ferr
			}
			continue
		}
		if err := db.state.CleanupDone(ctx, it.ID); err != nil {
			return pending, err
		}
	}
	return pending, nil
}

// cleanupKind tells a queue entry a delete makes ("log": what the log
// left of the thread, or "artifacts"; and the thread id) from anything
// else ("").
func (db *DB) cleanupKind(entry string) (kind, id string) {
	if id, ok := db.log.Leftover(entry); ok {
		return "log", id
	}
	parts := strings.Split(entry, "/")
	if len(parts) == 2 && (parts[0] == artifacts.ToolResultsDir || parts[0] == artifacts.TerminalsDir) && rollout.ValidateThreadID(parts[1]) == nil {
		return "artifacts", parts[1]
	}
	return "", ""
}

// referencedArtifacts is every artifact path a surviving record references.
func (db *DB) referencedArtifacts(ctx context.Context) (map[string]bool, error) {
	refs, err := db.state.ArtifactRefs(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, r := range refs {
		out[r.Path] = true
	}
	return out, nil
}

// subtree is the thread and its subagent descendants, root first, that
// are in location loc (all of them, for ""). The root must be a
// thread of its own (not a subagent). Edges of the given status ("" for
// all) and header parent links lead to children. Threads elsewhere are
// walked through but not returned: after a crash part of a tree may be
// archived already, and the operation run again finishes the rest.
func (db *DB) subtree(ctx context.Context, id, status, loc string) ([]string, error) {
	info, err := db.state.Thread(ctx, id)
	if err != nil {
		return nil, err
	}
	if info.Source.Kind == rollout.SourceSubagent || info.Source.Parent != "" {
		return nil, errors.WithHint(errors.Wrapf(ErrSubagent, "thread %s is a subagent of %s", id, info.Source.Parent),
			"operate on its root thread "+info.Source.Root)
	}
	in := func(status string) bool {
		return loc == "" || (loc == projection.LocationActive) == (status == projection.LocationActive)
	}
	seen := map[string]bool{id: true}
	walk := []string{id}
	var tree []string
	if in(info.Status) {
		tree = append(tree, id)
	}
	for i := 0; i < len(walk); i++ {
		edges, err := db.state.Edges(ctx, projection.EdgeFilter{Parent: walk[i], Status: status})
		if err != nil {
			return nil, err
		}
		var kids []string
		for _, e := range edges {
			kids = append(kids, e.Child)
		}
		if status == "" {
			page, err := db.state.List(ctx, projection.ListOptions{Scope: projection.ScopeAll, Parent: walk[i], Limit: 1000})
			if err != nil {
				return nil, err
			}
			for _, t := range page.Threads {
				kids = append(kids, t.ID)
			}
		}
		for _, k := range kids {
			if seen[k] {
				continue
			}
			seen[k] = true
			ki, err := db.state.Thread(ctx, k)
			if errors.Is(err, projection.ErrNotFound) {
				continue // deleted already
			}
			if err != nil {
				return nil, err
			}
			walk = append(walk, k)
			if in(ki.Status) {
				tree = append(tree, k)
			}
		}
	}
	return tree, nil
}

// checkUnlocked fails if a thread is open in this DB or held by a writer
// elsewhere (rollout.ErrThreadLocked).
func (db *DB) checkUnlocked(ctx context.Context, id string) error {
	db.mu.Lock()
	_, open := db.threads[id]
	db.mu.Unlock()
	if open {
		return errors.WithHint(errors.Wrapf(ErrThreadOpen, "%s", id), "close the thread's handle first")
	}
	return db.log.Free(ctx, id)
}

// checkTreeFree fails, before anything is changed, if a writer elsewhere
// holds a thread of the tree (rollout.ErrThreadLocked): the operation would
// stop there and leave the tree split. Threads open in this DB are fine:
// the operation goes through their handle.
func (db *DB) checkTreeFree(ctx context.Context, tree []string, op string) error {
	for _, tid := range tree {
		db.mu.Lock()
		_, open := db.threads[tid]
		db.mu.Unlock()
		if open {
			continue
		}
		err := db.log.Free(ctx, tid)
		switch {
		case errors.Is(err, rollout.ErrThreadLocked):
			// The log's message (it names where the thread is) and mark,
			// with the operation's hint in place of the log's.
			return errors.WithHint(errors.Mark(errors.Newf("%s %s: %s", op, tid, err.Error()), rollout.ErrThreadLocked),
				"a host has this thread open; nothing was changed: close it there, then try again")
		case errors.Is(err, projection.ErrNotFound):
			return err
		case err != nil:
			return errors.Wrapf(err, "%s %s", op, tid)
		}
	}
	return nil
}

// withWriter runs fn with the thread's writer: the handle this DB holds,
// or a writer opened (and closed) for the call, which takes the thread's
// lock: a thread a live host holds elsewhere is refused
// (rollout.ErrThreadLocked).
func (db *DB) withWriter(ctx context.Context, id, loc string, fn func(w ThreadLog, open *Thread) error) error {
	db.mu.Lock()
	open := db.threads[id]
	db.mu.Unlock()
	if open != nil {
		err := fn(open.w, open)
		db.pokeHub(id)
		return err
	}
	defer db.pokeHub(id)
	from, _ := db.state.Anchor(ctx, id) // the tail only, if it still holds
	w, _, err := db.log.Open(ctx, id, loc, from)
	if err != nil {
		return err
	}
	err = fn(w, nil)
	return errors.CombineErrors(err, w.Close())
}

// appendLifecycle appends a lifecycle record with w, the thread's writer
// (open's, or one withWriter opened), and publishes it like any other
// frame. loc is where the rollout is once the operation is done.
func (db *DB) appendLifecycle(ctx context.Context, id string, w ThreadLog, open *Thread, rec rollout.Record, loc string) error {
	recs := []rollout.Record{rec}
	if open != nil {
		_, err := open.append(ctx, recs, rollout.AppendOptions{})
		return err
	}
	// w is the thread's only writer, and appends this one frame: it is
	// published in order by construction.
	res, err := w.Append(ctx, recs, rollout.AppendOptions{})
	if err != nil {
		return err
	}
	db.publish(&published{thread: id, fileID: w.Header().FileID, location: loc, res: res, recs: recs})
	return nil
}
