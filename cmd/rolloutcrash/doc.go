// Command rolloutcrash is the crash-and-fault harness of rolloutdb: it
// writes conversations the way a host does, interrupts the writing in the
// ways a real machine can (a killed process, a power cut, a full or failing
// disk, a second process on the same workspace), and checks what is left
// against what the library acknowledged.
//
//	rolloutcrash [--mode kill|power|fault|twoproc|all] [--iterations N] [--seed S] [--dir DIR] [--json]
//	rolloutcrash --fleet [--faults kill,stop,pgkill,promote,partition] [--lease D] [--iterations N] ...
//
// # The workload
//
// Several goroutines write to several threads at once, each as an agent
// session does: turns opened with StartTurn (the user's input in the same
// frame, mostly), items appended as they happen (an agent message streamed
// in progress, reasoning, tool calls and results, file changes, errors),
// then a Commit (final items, exact model history, now and then a post-turn
// checkpoint) or an Abort, or the turn left open and the thread closed and
// resumed. Between turns: a manual checkpoint, or a rollback. Texts are
// mostly short, some a few KiB, and occasionally large (40-340 KiB;
// compressible or not; a large tool output is spilled to an artifact on a
// real file system). In half the iterations a second goroutine appends
// metadata updates to the same threads, so that appends to one rollout
// share fsyncs (group commit) and interleave; another lists, pages and
// searches, so read-repair runs while the projector lags.
//
// Every call is journaled: before it, the keys of the records it will write
// (a digest of each record's kind, turn and canonical body; every record
// the workload writes is unique); after it returned nil, the
// acknowledgement, with the seqs when the caller can know them; after an
// error, the failure. The parent thus knows a superset of what may be on
// disk and a subset of what must be.
//
// # Modes
//
// kill: a child process (this binary again, told so by the ROLLOUTCRASH_CHILD
// environment variable) opens a workspace on the real disk with SyncAlways
// and writes; its journal is a pipe (file descriptor 3), each line written
// only after the call returned. The parent kills it with SIGKILL at a
// random moment: most often a random delay after it is ready, sometimes a
// random delay after it starts (inside Open). The kernel keeps what was
// written, so this tests the writer's and the projector's consistency, not
// fsync.
//
// power: the same in-process on vfs.MemFS, with state.db on the real
// disk. A FaultFS hook cuts the power (MemFS.Crash: each unsynced write
// survives whole, as a prefix, or not at all; unsynced directory entries
// are lost) at a random file-system operation, while the other goroutines
// are inside or about to enter the file system (every later operation
// fails with ErrCrashed). state.db survives whole: it may hold rows of
// frames the cut took away, which read-repair must notice. The cut is
// placed among all operations in two iterations of five; in the others
// among the rarer moments the workspace journal brings: a rollout's
// fdatasync (which the journal does in the background to release a
// segment), a segment's release (the rename that reuses it, or its
// removal), or the next open, which replays the journal the first cut
// left (the power is cut again during it, and the workspace opened once
// more). The summary counts each kind (cut_*).
//
// fault: in-process on MemFS, writes and fsyncs fail at random (ENOSPC, EIO,
// short writes), and truncates, creates, links, removes and directory
// syncs now and then, for a random number of operations; every failed call
// is retried with the same content on the same handle, as a host would.
// Then the faults stop: every call begun afterwards must succeed and every
// thread must make progress (the library promises the writer works again
// once the cause is gone). The rollouts are checked as the process left
// them, then again after a power cut.
//
// twoproc: this process writes while a second process opens the same
// workspace: its attempts to become a second writer of a thread
// (DB.OpenThread, DB.Resume, rollout.Open) must fail with
// rollout.ErrThreadLocked; its read-only reads must see a gapless prefix
// without damage (a torn tail at the very end, a frame being written, is
// allowed) that reaches every record acknowledged before the read began
// (this process tells it over its stdin) and holds only records some writer
// attempted, never changing one it saw before; its ThreadInfo and Turns must
// be at least as far as the acknowledged records and show only attempted
// items. Then this process closes its threads, and the second must be able
// to open each and append.
//
// fleet (--fleet, or --mode fleet; not part of "all", as it needs
// PostgreSQL 15's binaries, which `make deps` installs): the run starts a
// throwaway PostgreSQL primary with a streaming standby that is
// synchronous (every commit waits for the standby's flush), a TCP proxy
// per host slot in front of the primary, and three host processes (this
// binary again) that open one fleet workspace through the facade, each
// with its own host name and a short lease (--lease, 1s). Every host runs
// a worker for every thread of the workspace: the threads are contended,
// one writer at a time across the fleet. A worker that cannot open its
// thread (another host owns it, it does not exist yet, PostgreSQL is
// away) waits and tries again; an append that fails with ErrUnavailable
// is retried with the same content, as a host would; one that fails with
// ErrFenced (the thread was taken over) loses the thread, and the worker
// goes back to waiting for it. A worker that opened a thread waits up to
// a second before it writes, as a conversation nobody types into yet does,
// so that a fenced host's late appends fall into a window where nothing
// but the fence keeps them out. Each iteration has one fault, the faults
// taking turns (--faults): kill, a host that owns threads is killed with
// SIGKILL mid-turn and started again (a new incarnation); stop, it is
// stopped with SIGSTOP past its lease, the others take its threads over,
// and it is continued with SIGCONT, a zombie whose appends in flight must
// all be refused; pgkill, PostgreSQL is stopped as by pg_ctl stop -m
// immediate and restarted after up to a second; promote, the primary is
// killed and its synchronous standby promoted, the proxies send the hosts
// to it, and it gets a standby of its own; partition, the proxy of a host
// that owns threads holds its traffic (or resets its connections) for up
// to the lease plus 1.5 s, so that its commits time out, its lease can run
// out, and the statements it sent may land late. Then every host is
// killed.
//
// The fleet's checks: PostgreSQL is read through the fleet's log as a
// rollout per thread, checked as every rollout is (below); an audit
// trigger the run installs on the frames table records every frame
// inserted whose epoch is not its thread's at that moment (the inserting
// statement holds the thread's row lock, and every change of epoch takes
// it exclusively, so none commits in between): each is a frame accepted
// from a fenced epoch and a failed check, as is a frame of a lower epoch
// after one of a higher in any thread. (The owner's lease is not audited
// per frame: a commit round begun under the lease may land after it ran
// out, which is sound, since no takeover can commit before the round's
// row lock is gone.) Once the dead hosts'
// leases ran out, the workspace is opened as another host: its index
// (read-repaired) is compared with a local rebuild of a backup of the
// workspace (DB.Backup writes the local format), every field but where
// each keeps the rollout; every thread resumes there, its resumed turns
// equal its indexed ones, and it takes an append.
//
// Each mode continues its workspace for --continue iterations (8 by
// default): the next iteration resumes threads the last one left (torn
// tails, interrupted turns and a stale state.db included) and creates new
// ones. That is a stronger test than a fresh workspace each time, which
// --continue 1 gives.
//
// # What the checks prove
//
// After every interruption the workspace is opened with the state.db it
// has, and for every rollout:
//   - it opens and reads: its header is the thread's, seqs run from 1
//     without a gap, no damage is reported (only a torn tail, which the
//     reader leaves out): no rollout is unreadable;
//   - every acknowledged call's records are there, intact (same key, so
//     the same content; a spilled tool output is read back from its
//     artifact and checked against its reference) and, when the seqs were
//     known, at the seqs acknowledged: nothing acknowledged is lost;
//   - every record on disk was attempted by some writer, and only once:
//     nothing appears that was never written, nor twice;
//   - every call's records are all there, contiguous and in order, or none
//     is: a frame is atomic;
//   - a call acknowledged before another was attempted precedes it on
//     disk;
//   - in fault mode, a call that failed has no record on disk once a later
//     call of the thread was acknowledged (the writer cuts a failed frame
//     before anything follows it; otherwise a retry would leave it twice).
//
// Then the projections (List in every scope, each thread's ThreadInfo, all
// its Turns with their items) are compared, every field, with those of the
// workspace opened a second time with a fresh state.db, which Open builds
// from the rollouts: read-repair must make a stale state.db say exactly
// what a rebuild does. Every thread is resumed (DB.Resume, which cuts a
// torn tail): its replayed turns must equal its projected ones (projection =
// resume), its interrupted turns are aborted, and it must take a new
// append, at the seq after the last one read. The projections are compared
// with a rebuild again. The next iteration's writers then continue from
// there.
//
// # Output
//
// Each failed check is printed on stderr as it is found, with the mode,
// the seed and the iteration, the thread, the seq or op, and what was
// expected and found. The summary counts iterations, records acknowledged,
// records lost, rollouts unreadable and projection mismatches (and, per
// mode, what happened: kills, power cuts, faults injected, torn tails cut,
// records present though never acknowledged...); --json prints it as one
// JSON document. The exit code is 0 only if nothing was lost, no rollout
// was unreadable, no projection differed and no other check failed;
// otherwise 1, and the run's directory (workspaces, state.dbs) is kept and
// named. The same seed makes the same choices (threads, contents, kill
// delays, crash points, faults), not the same interleavings. Setting
// ROLLOUTCRASH_DEBUG prints progress.
package main
