// Package recovery turns a rollout back into a thread: it replays the
// surviving records, checks the thread's identity before anything else,
// applies rollbacks, restores the latest usable checkpoint, and rebuilds the
// model history of any turn whose exact history was rejected from that
// turn's items. It also repairs rollouts: cutting a torn tail, or rewriting a
// file with mid-file damage into one that holds every surviving record.
//
// Rules it keeps:
//   - Identity first. A rollout whose header is unreadable or not first,
//     whose thread id does not match the file or the request, whose
//     workspace id does not match the workspace, or which holds a second
//     header with another identity fails Resume with a typed error and no
//     partial state: continuing under the wrong identity is unsafe.
//   - Never mix partial exact history with the fallback. When a record that
//     carries (or may carry) a turn's exact model history was rejected, the
//     turn's whole model contribution is rebuilt from its surviving items.
//     Damage that cannot be tied to a turn costs no turn its history.
//   - Report everything: every skipped record or region (offset, length,
//     kind if known, seq gap, reason), the turns rebuilt, the checkpoint
//     used and those passed over, whether the tail was torn.
//
// Replay of a rollout of more than 1 MiB reads it on a second goroutine
// (frames, checksums, decompression, and bodies while the applier is busy)
// while the calling goroutine applies the records in file order; the
// result is the same as one goroutine's, which a test and the fuzz target
// check. Resume returns only after that goroutine has stopped.
//
// A reader that streams a thread larger than it should hold resumes it
// located (Options.Locate: where each item and exact-history record is,
// not its body) and reads the bodies back with a Locator, a turn at a
// time, to the same state (locate.go).
//
// It imports rollout and compaction only.
package recovery
