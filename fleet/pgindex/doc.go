// Package pgindex is the fleet engine's index: what projection keeps in
// state.db for a local workspace (which threads exist, sorted and
// filtered; turn 900 to 950 of a huge thread; which items mention a word;
// the business state that exists nowhere else), kept in PostgreSQL, in
// the database of the fleet's log (package fleet), for every host of the
// workspace at once. A Store implements the facade's Index with
// projection.Store's semantics: projection's docs and tests are its spec.
//
// # Tables
//
// Every table is in the schema rolloutdb, beside the log's, with a ws
// column (several workspaces share a database); the layout is versioned
// on its own (index_schema_version, SchemaVersion; a newer one is
// refused), migrated under an advisory lock.
//
//	index_threads      one row per thread: projection's threads row
//	index_labels       one row per label of a thread, with its sort keys
//	index_turns        turns, for paged history
//	index_items        items of visible turns: where the shown version is,
//	                   and its words (a tsvector, GIN-indexed)
//	index_checkpoints  checkpoint records
//	index_artifact_refs artifacts records reference (what GC keeps)
//	index_meta         per workspace: rebuild watermark, change log position
//	index_changes      the change log: fleet threads made, deleted, moved
//	goals, plans, subagent_edges, mailbox, diagnostics, cleanup_queue
//	                   business state: never rebuilt (goals and mailbox
//	                   rows copied from another workspace keep its id and
//	                   theirs there: origin, origin_id)
//	index_expect       a function: raises unless the row a write names
//	                   is there (Writes)
//
// Projections are an index, not a copy: an items row says where its
// item's shown version is (the frame's offset), and bodies are read from
// the log, checked, when a page, a search hit or the preview needs them.
// Each index_threads row records how far its thread was read (projected
// offset and seq, the file id, where the frames ended, the last frame
// applied: the anchor), as state.db's do.
//
// # What it reads of the log
//
// Records come through a Source (a *fleet.Log, adapted): what a
// catch-up reads after the row's anchor, and the frames a page or a hit
// names. Where threads are and where their frames end it reads in SQL,
// from the fleet's tables (rolloutdb.threads and frames, layout
// fleetLayout), so that a page of a list is checked against the log in
// the query that reads it: a thread's end is its last frame's offset
// plus its length (which PostgreSQL reads from the value's header, not
// its bytes). Triggers on rolloutdb.threads write the change log, so a
// reader learns of threads another host made, deleted or moved (a
// fork, an archive) without comparing every row: it looks up what was
// logged since the oldest transaction running when it last looked (an
// entry's order of commit is not its order of insert; its transaction id
// tells).
//
// # Apply
//
// Enqueue hands the index each published frame of this host; an
// asynchronous applier applies them in cycles, one transaction a cycle,
// as projection's projector does (MaxLag bounds the lag; Settle waits).
// A frame that continues a row is applied from memory; the header frame
// of a thread this host made makes its row; anything else (a frame
// another host wrote first, a row whose anchor the log no longer holds)
// catches the thread up from the Source. Reads are log-first: a row
// behind its thread's frames is caught up before it is returned. See
// catchup.go for how hosts applying to the same rows at once stay
// consistent.
//
// # Business state
//
// Business writes are queued into a pgx.Batch (Writes) and sent as one
// implicit transaction: the Store's own methods send one each, and the
// facade puts them in a fleet append's batch after its frame
// (fleet.Thread.WritePreparedWith), so that a goal, a plan, an edge or a
// message commits with the frame or not at all. A write naming a row
// that is not there raises, and takes the batch with it.
//
// # Search
//
// An item's words are a tsvector made here of projection.Words (not by a
// text search configuration: nothing is stemmed or dropped), with
// positions; a literal query is every word (a word of several tokens as
// adjacent tokens), a raw query FTS5's syntax as state.db takes it
// (rawquery.go). Matches are ranked by ts_rank within the newest Window
// of them. Unlike search.db's, a query's cost grows with its matches (a
// GIN index finds them all before the newest are chosen), and a word
// over 2046 bytes is not indexed.
//
// # What differs from state.db
//
// The engine's difference shows in few places: RolloutPath names the
// thread in the fleet (Source.Path); CopyTo is refused (the database's
// backup copies the index with the log); CheckIntegrity checks the rows
// against each other and the log, not pages; a rebuild shows every host
// the threads rebuilt so far until it ends; hits are ranked by ts_rank,
// not BM25.
//
// It never writes the log. It imports rollout, recovery and projection
// (for their types and shared rules), not fleet.
package pgindex
