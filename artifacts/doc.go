// Package artifacts keeps the bytes that do not belong in a rollout: large
// tool outputs, attachments and background terminal logs, as files beside
// the rollouts in the workspace data directory:
//
//	tool-results/<thread>/<call>[-n].out    a spilled tool output
//	attachments/<sha256[:2]>/<sha256>       attachment bytes, by content
//	terminals/<thread>/<terminal>.json      a background terminal's record
//	terminals/<thread>/<terminal>.log       and its output, capped
//
// A record in a rollout references an artifact by a Ref: its path relative
// to the data directory (so a workspace moved or copied elsewhere still
// finds it), its size and its SHA-256. Reading a Ref checks that the path
// stays inside the data directory and that the bytes still hash to it.
//
// Writes are create-new: a file is written under a temporary name, synced,
// linked to its name only if that name is free, and the directory synced.
// A retried call never overwrites what an earlier one wrote. Terminal
// records are replaced atomically (vfs.WriteFileAtomic).
//
// Every file operation goes through Options.FS (vfs), so the fault tests
// fail writes, fsyncs, links and renames, and crash the file system, on
// vfs.MemFS; GC goes by the FS's modification times.
//
// The package never decides what is referenced: GC is told (by the caller,
// from the rollouts' projection) which paths and threads are alive. It
// imports vfs and nothing else of ours.
package artifacts
