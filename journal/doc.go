// Package journal is the workspace journal: the group-committed log
// through which a writing process makes its rollout appends durable with
// one fdatasync for many threads, instead of one per rollout.
//
// A Journal implements rollout.Log. A rollout.Writer writes each frame to
// its rollout and submits a copy; the journal writes the copies of every
// thread into its current segment and syncs it, and the append is
// acknowledged once the copy is durable. The rollouts stay the authority:
// readers never look at the journal. Segments are released once every
// rollout they hold entries of is synced past them (rollout.LogGroup does
// the syncing and releasing), and reused.
//
// After a crash, Recover replays the journals of dead processes into the
// rollouts before anything reads them, and leaves StaleMark for the
// projections. The file layout, the entry format and the failure rules
// are in docs/FORMAT.md ("The journal").
//
// The journal knows nothing of its writers: it is told what to hold
// (Submit), what it may let go (Release) and when a stream may submit
// again after a failure (Reset), and asked for what it holds (WriteBack).
// That interface is what a log of another engine implements.
package journal
