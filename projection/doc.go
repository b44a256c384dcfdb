// Package projection owns state.db: the SQLite database beside the
// rollouts that answers the questions a rollout cannot answer cheaply
// (which threads exist, sorted and filtered; turn 900 to 950 of a huge
// thread; which items mention a word) and holds the business state that
// exists nowhere else.
//
// Two kinds of tables live in it, and the difference is the whole design:
//
//   - Projections (threads, thread_labels, turns, items, checkpoints,
//     artifact_refs) are computed from rollouts, by the same rules resume
//     follows (a property test holds projection = rebuild = resume). They
//     are an index, not a copy: an items row says where the item's shown
//     version is (its frame's offset), and bodies are read from the
//     rollout, checked, when a page, a search hit or the preview needs
//     them (frames.go). Each threads row records how far its rollout was
//     read (projected_offset and seq, the file id, the size seen, and the
//     last frame applied: the anchor), so a stale row is brought up to
//     date by reading only what follows, for as long as the file still
//     holds the anchor where it was; otherwise (a replaced file, frames
//     lost to a crash and written over) the thread is projected again from
//     the start. Projections can be dropped and rebuilt at any time
//     (Rebuild) and are never trusted over the rollout: reads are
//     filesystem-first (see Store.List).
//   - Business state (goals, plans, subagent_edges, mailbox, diagnostics)
//     is written only through its typed API. It has no foreign key to a
//     projection row, so no rebuild, read-repair or dropped row can take
//     it with it. Losing state.db loses it; Open says so loudly.
//
// The full-text index is search.db, a file of its own written by its own
// goroutine (index.go): it may lag, and Search catches it up first.
//
// The projector applies appended records after the rollout write, in
// batches, on its own goroutine (Store.Enqueue); it may lag, and a failure
// there never fails an append: the rollout is the authority and read-repair
// catches up from it. Applying a record costs the same at a turn's ten
// thousandth item as at its first: the turn in progress and each thread's
// row are kept between batches (items.go). Frames of one thread reach it in
// frame order (the facade publishes them so); a frame that does not follow
// the last one applied sends the thread to its rollout, and that catch-up
// takes the turn in progress from the applier before it (projector.go).
// While appends arrive, the projector and the index use at most
// GOMAXPROCS-1 processors (gate.go).
//
// Knowing what changed on disk costs two stats, not a listing: the
// versions of the two thread directories, stored with the position of the
// thread_changes log (rows made, dropped or moved, in this process or
// another) when they last matched the rows (catchup.go). A directory
// changed within its racy window (vfs.DirVersion.Settled: 50 ms on a
// local file system with fine timestamps, 2 s elsewhere) is listed anyway,
// and a listing made then is made again once it settles; a journal replay
// leaves journal.StaleMark, which makes the next Open re-check every
// rollout once.
//
// Open reads nothing of the file beyond its schema: corruption is found
// where a statement meets it (SQLITE_CORRUPT, SQLITE_NOTADB), returned as
// ErrCorrupt, marked on disk, and the next Open keeps the file aside and
// rebuilds (store.go). CheckIntegrity runs the whole-file check on
// demand.
//
// The schema is versioned by migrations recorded in schema_migrations; a
// database newer than this code is refused (ErrSchemaTooNew), an older one
// is migrated in place.
//
// It must never write to a rollout. It imports rollout and recovery only.
package projection
