package rolloutdb

import (
	"context"
	"io"

	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/journal"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The engine seam. What is under the facade is an engine: a durable log,
// an index and blobs (DESIGN.md, "Engine"), each reached through an
// interface below. A local workspace's are rollout files with the
// workspace journal (localLog), state.db and search.db
// (*projection.Store), and the artifact files (*artifacts.Store).
//
// The facade asks the log for everything of a thread's records by thread
// id and location: create, open, read, list, move (archive, restore),
// delete, write (fork) and whether a writer elsewhere holds it. What only
// the local log does, the facade reaches by a type assertion, and does
// without on another log: cold compression (compressor: CompressArchived
// says errors.ErrUnsupported) and GC's sweep of temporary files
// (tempSweeper). The local log settles what a crash left (journals,
// interrupted moves and compressions) when Open makes it. What only the
// fleet does is an append that commits business writes with its frame
// (writeBusiness: its thread and its index share one database); on
// another engine BusinessWrites are refused with errors.ErrUnsupported.
//
// What the local engine keeps bound to its files: its index reads the
// rollouts itself (projection.Options Root and FS: catch-up, rebuild and
// paged history read frames by path); follow of another process's thread
// tails its rollout, and Watch watches the thread directories
// (follow.Config Root and FS); backup copies the files (backup.Source);
// and Open lays out the data directory (threads/active and archived,
// workspace.json, .gitignore).
//
// The second engine is a fleet's (engine_fleet.go): the log is package
// fleet (frames in PostgreSQL, byte for byte, with leases and fencing),
// the index fleet/pgindex (the same rows in PostgreSQL, reading frames
// through the log), the blobs package artifacts over fleet.Files. Its
// follow and watch are fleet.Follower and fleet.Watcher, woken by the
// hosts' notices. Its backup writes the local format (backup_fleet.go).

// A Log is where threads' records are durable: the facade appends through
// it and nothing is acknowledged before it says so. Thread ids and
// locations (projection.LocationActive, LocationArchived) name what it
// holds; it knows nothing of the index.
type Log interface {
	// Create makes a new active thread with its header record (seq 1):
	// rollout.ErrThreadExists if the id is taken in any location.
	Create(ctx context.Context, opened rollout.ThreadOpened) (ThreadLog, error)
	// Open opens a thread for appending, taking its single-writer lock
	// (rollout.ErrThreadLocked if another writer holds it). from names a
	// frame the index applied: the log may resume from there. A thread
	// that is not in loc is an error marked projection.ErrNotFound.
	Open(ctx context.Context, id, loc string, from rollout.Anchor) (ThreadLog, rollout.OpenReport, error)
	// Locate returns where a thread's records are (projection.LocationActive
	// or LocationArchived), or an error marked projection.ErrNotFound.
	Locate(ctx context.Context, id string) (string, error)
	// List returns the ids of the threads in a location, sorted.
	List(ctx context.Context, loc string) ([]string, error)
	// Read opens a thread's records, wherever they are, as rollout bytes
	// (file header first): what fork, resume and import read.
	Read(ctx context.Context, id string) (ThreadData, error)
	// Free fails with rollout.ErrThreadLocked, naming where the log keeps
	// the thread, when a writer holds it: another process's, or one this
	// DB holds (the facade asks only of threads it does not hold).
	Free(ctx context.Context, id string) error
	// Move moves a thread's records between locations durably. held is
	// the writer this DB holds for the thread, or nil: then the log takes
	// the thread's lock for the move (rollout.ErrThreadLocked if it
	// cannot).
	Move(ctx context.Context, id, from, to string, held ThreadLog) error
	// Delete removes a thread's records for good. Before anything
	// changes it calls queue once, with what it would leave behind if
	// interrupted (the local log's renamed rollout, relative to the data
	// directory; nothing, for a log that deletes in one transaction), and
	// fails with queue's error. Then it makes the thread unreachable in
	// one step, taking its lock (rollout.ErrThreadLocked). If Delete fails
	// and Locate still finds the thread, nothing of it changed.
	Delete(ctx context.Context, id string, queue func(leftovers ...string) error) error
	// Leftover tells what Delete queued from anything else, and names its
	// thread.
	Leftover(entry string) (id string, ok bool)
	// Purge removes a leftover Delete queued, once its thread is
	// unreachable; one already gone is no error.
	Purge(ctx context.Context, entry string) error
	// Write makes a new thread from whole frames (records numbered from 1,
	// the header first), there whole or not at all:
	// rollout.ErrThreadExists if the id is taken in any location.
	Write(ctx context.Context, id string, frames [][]rollout.Record) error
	// Metrics returns the log's commit counters.
	Metrics() journal.Metrics
	// Close ends the log once every ThreadLog is closed.
	Close() error
}

// A ThreadLog appends to one thread: *rollout.Writer's methods, with its
// semantics (rollout's docs say them).
type ThreadLog interface {
	Prepare(recs []rollout.Record) (*rollout.Prepared, error)
	WritePrepared(ctx context.Context, p *rollout.Prepared, opt rollout.AppendOptions) (rollout.Pending, error)
	Wait(p rollout.Pending) (rollout.AppendResult, error)
	Append(ctx context.Context, recs []rollout.Record, opt rollout.AppendOptions) (rollout.AppendResult, error)
	Sync(ctx context.Context) error
	LastSeq() uint64
	End() int64
	Header() rollout.FileHeader
	// Created returns the header frame of a thread Create made (ok false
	// after Open): the facade publishes it.
	Created() (res rollout.AppendResult, rec rollout.Record, ok bool)
	// Path is where the log keeps the thread, for messages.
	Path() string
	Close() error
}

var _ ThreadLog = (*rollout.Writer)(nil)

// ThreadData is a thread's records as a rollout's bytes, file header
// first, wherever the log keeps them (Log.Read).
type ThreadData struct {
	io.ReaderAt
	Size int64
	// Path names the records in messages: where the log keeps them.
	Path string
	// Location is where the thread is (projection.LocationActive or
	// LocationArchived).
	Location string
	// Close releases what Read opened.
	Close func() error
}

// Everything the facade asks of the workspace's index goes through an
// Index. A local workspace's is state.db
// and search.db (*projection.Store); a fleet engine keeps the same rows in
// its own database and implements the same methods, with the same
// semantics (projection's docs say them), so that the facade above does
// not change.
//
// The index is fed in one place: the ordered publish (publish.go) hands
// it every durable frame of this process, in frame order (Enqueue). It is
// filesystem-first: a read whose rows are behind the log catches them up
// before it answers.
type Index interface {
	IndexReader
	BusinessState
	// Enqueue hands the index one published frame; the index may lag.
	// It is called by the thread's publisher, so every appender of the
	// thread waits while it runs: state.db's blocks only once MaxLag
	// records are unapplied, and an index of another engine must not
	// block longer.
	Enqueue(b projection.Batch)
	// Settle waits until everything enqueued before it is applied.
	Settle(ctx context.Context) error
	// Anchor names the last frame the index applied of a thread, if the
	// log still holds it: a writer opens the thread from there.
	Anchor(ctx context.Context, id string) (rollout.Anchor, bool)
	// Forget drops threads' rows (a delete).
	Forget(ctx context.Context, ids ...string) error
	// The durable cleanup queue of deletes (artifacts to remove).
	EnqueueCleanup(ctx context.Context, reason string, paths ...string) error
	PendingCleanup(ctx context.Context) ([]projection.CleanupItem, error)
	CleanupDone(ctx context.Context, id int64) error
	CleanupFailed(ctx context.Context, id int64, cause error) error
	// Maintenance and reports.
	Rebuild(ctx context.Context, o projection.RebuildOptions) (projection.RebuildReport, error)
	CheckIntegrity(ctx context.Context) (projection.IntegrityReport, error)
	CopyTo(ctx context.Context, path string) error
	Report() projection.OpenReport
	Metrics() projection.Metrics
	Close() error
}

// IndexReader is the index's read side: lists, pages, search and counts.
type IndexReader interface {
	List(ctx context.Context, o projection.ListOptions) (projection.Page, error)
	Thread(ctx context.Context, id string) (projection.ThreadInfo, error)
	Turns(ctx context.Context, thread string, from, to int64) ([]projection.TurnInfo, error)
	TurnIDs(ctx context.Context, thread string) ([]string, error)
	Checkpoints(ctx context.Context, thread string) ([]projection.Checkpoint, error)
	Search(ctx context.Context, query string, o projection.SearchOptions) ([]projection.Hit, error)
	Summary(ctx context.Context) (projection.Summary, error)
	ArtifactRefs(ctx context.Context) ([]projection.ArtifactRef, error)
}

// BusinessState is what the index holds that the log does not: goals,
// plans, subagent edges, the mailbox and diagnostics. It is never rebuilt
// from the log.
type BusinessState interface {
	AddGoal(ctx context.Context, thread, text string) (projection.Goal, error)
	SetGoalStatus(ctx context.Context, id int64, status string) error
	Goals(ctx context.Context, thread string) ([]projection.Goal, error)
	SetPlan(ctx context.Context, thread string, steps []projection.PlanStep) error
	Plan(ctx context.Context, thread string) ([]projection.PlanStep, error)
	OpenEdge(ctx context.Context, parent, child string) error
	CloseEdge(ctx context.Context, parent, child string) error
	Edges(ctx context.Context, f projection.EdgeFilter) ([]projection.Edge, error)
	Send(ctx context.Context, from, to, body string) (projection.Message, error)
	Inbox(ctx context.Context, to string, unreadOnly bool) ([]projection.Message, error)
	MarkRead(ctx context.Context, id int64) error
	RecordResumeReport(ctx context.Context, thread string, rep recovery.Report) error
	Diagnostics(ctx context.Context, thread string) ([]projection.Diagnostic, error)
	DeleteBusinessState(ctx context.Context, threads []string) error
	ExportBusiness(ctx context.Context) (projection.BusinessExport, error)
}

// A businessImporter merges another workspace's business state in,
// keyed by where it came from (the fleet's index; state.db has no origin
// keys, so a local workspace does without: Business.Import says
// errors.ErrUnsupported).
type businessImporter interface {
	ImportBusiness(ctx context.Context, origin string, e projection.BusinessExport) (projection.BusinessImport, error)
}

// The local engine's index is state.db.
var _ Index = (*projection.Store)(nil)

// Blobs is the engine seam's blob part: the bytes that do not belong in
// the log (spilled tool outputs, attachments, terminal records and logs).
// A local workspace keeps them as files beside the rollouts
// (*artifacts.Store); a fleet engine keeps them as objects. A host reaches
// them through DB.Artifacts.
type Blobs interface {
	SpillToolResult(thread, call string, output []byte) (artifacts.ToolResult, error)
	PutAttachment(b []byte) (artifacts.Ref, error)
	Read(ref artifacts.Ref) ([]byte, error)
	StartTerminal(thread, id, command string) (artifacts.Terminal, error)
	AppendLog(thread, id string, b []byte) (int, error)
	EndTerminal(thread, id string, exitCode int) (artifacts.Terminal, error)
	Terminals(thread string) ([]artifacts.Terminal, error)
	MarkLost(live func(thread string) bool) ([]artifacts.Terminal, error)
	SweepTerminals() ([]artifacts.Terminal, error)
	GC(o artifacts.GCOptions) (artifacts.GCReport, error)
	// RemoveAll removes a deleted thread's artifacts (a delete queues
	// tool-results/<id> and terminals/<id>) but those keep holds.
	RemoveAll(rel string, keep map[string]bool) error
}

// The local engine's blobs are files.
var _ Blobs = (*artifacts.Store)(nil)
