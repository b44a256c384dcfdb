// Package fleet keeps a workspace's threads in PostgreSQL, so that many
// host processes on many machines share one workspace: any host can serve
// any thread, one at a time, and nothing a host acknowledged goes with its
// machine.
//
// This package is the fleet engine's log: the durable frames, the hosts'
// leases and the threads' ownership. It stores each thread as its rollout
// would be (package rollout): a file header and frames, byte for byte, so
// that everything that reads a rollout (resume, replay, fork, export,
// backup) reads a fleet thread through Log.Read unchanged.
//
// # Tables
//
// Every table is in the schema rolloutdb. A workspace is a row of
// workspaces, and a namespace: several workspaces share one database.
//
//	schema_version (version)           the layout; a newer one is refused
//	workspaces (ws, name, id)          one row per workspace
//	hosts (ws, host, incarnation,      one row per host name; its lease, on
//	       lease_until)                database time
//	threads (tid, ws, id, location,    one row per thread: where it is, its
//	         file_id, header, owner,   rollout file header, the host that
//	         owner_inc, epoch)         owns it and the ownership's epoch
//	frames (tid, off, seq, epoch,      one row per frame, keyed by its
//	        data)                      offset in the thread's rollout
//	files (ws, path, data, mtime)      the artifacts' files (Files)
//	fence(held, thread)                a function: raises unless held
//	                                   (an append with other writes)
//
// # Appends and acknowledgement
//
// A host commits the frames its threads wrote since its last commit in
// one statement, one implicit transaction: a group commit, as the local
// journal's. An append is acknowledged after that COMMIT returns, so it is
// as durable as PostgreSQL's commit is (synchronous_commit, and with
// Options.RequireSyncStandby a synchronous standby, checked at Open).
// One commit round is in flight at a time, so a thread's frames commit in
// order and a failed round leaves no later frame of its threads behind.
// A round may wait up to Options.RoundWindow for the threads of the round
// before it to append again: appenders that each wait for their ack then
// share one round instead of alternating between two half-full ones.
//
// # Ownership and fencing
//
// A host holds a lease, renewed on database time by one heartbeat per host
// (not per thread). A thread is owned by one host incarnation at a time,
// with an epoch that each new owner increments. Every append checks, in
// the statement that inserts the frames, that the thread's owner and epoch
// are still the appender's and that its host's lease is live, and locks
// the thread's row (FOR KEY SHARE) until it commits; taking a thread over
// locks the row FOR UPDATE. So a host whose lease expired, or whose
// thread was taken over (a paused or partitioned zombie), inserts nothing
// and gets ErrFenced, and a new owner reads the tail after every frame
// the old owner committed.
//
// Taking over a thread whose owner is alive is refused with an error that
// matches rollout.ErrThreadLocked and names the owner (OwnerError), so a
// router can forward there. A thread released by Close is free at once; a
// dead host's threads are free once its lease expires.
//
// # Commits whose outcome is unknown
//
// A commit that fails without an answer (a lost connection, a timeout) is
// retried with the same frames until Options.CommitTimeout after the
// oldest was submitted: a frame already there with the same bytes counts
// as committed, a different one as fenced. When the deadline passes, the
// round's appends fail with ErrUnavailable (none acknowledged), and the
// threads concerned are in doubt: before their next append, what the lost
// commit may have left past the last acknowledged frame is deleted, and the
// thread's epoch incremented, under the row lock every insert holds until
// it commits; so a retried append is in the thread exactly once, and the
// lost attempt, should it reach PostgreSQL later, inserts nothing.
//
// # Appends with other writes
//
// WritePreparedWith commits one frame and statements of the caller's
// (the facade's: business state in the index's tables) in one
// transaction, under the fence: both or neither. It is not part of a
// commit round; it goes alone, after its thread's frames before it, as
// one batch run in one implicit transaction. A batch whose answer was
// lost is never cut back, since what its other statements changed cannot
// be undone here: its outcome is settled under the thread's row lock
// (committed whole, or never to commit), and if that cannot be done
// within the commit timeout the append fails with ErrInDoubt and the
// handle is done (commitwith.go).
//
// # Notices
//
// After each commit round that committed frames, and after a thread is
// created, moved, deleted or cut back, the host tells the workspace's
// other hosts with a notice: a PostgreSQL notification on the channel
// rolloutdb_ws_<ws> whose payload lists the threads (their tid) and where
// their frames now end (notice.go draws it). It is sent from a connection
// of the notifier's own, never in the append's transaction: a pending
// NOTIFY takes a lock global to the database at commit. The notifier
// coalesces (while one notice is in flight, the rounds after it go in the
// next one), so it never holds a commit round back, and its failure never
// fails an append. A notice is a wake-up, never the data.
//
// # Follow
//
// A Follower, on any host, reads one thread by offset: the frames after
// the last one it read, decoded as a rollout's, so it yields every
// record once and in seq order whatever order hosts' rounds commit in
// (no global sequence is involved). Notices wake it, through one
// listening connection per Log, shared by all its followers; it also
// looks every Options.PollInterval, so a lost notice or a broken
// listening connection delays a record, never loses it. A follower
// yields what is committed; a commit of unknown outcome that its writer
// then cut back is reported (CutError), with the seq up to which what it
// yielded stands.
//
// A Watcher tells which threads changed (created, updated, archived,
// restored, deleted), from the same notices, and from a look at every
// thread of the workspace each poll interval, one query per Log.
package fleet
