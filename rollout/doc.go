// Package rollout owns the on-disk form of a thread: the append-only rollout
// file, its records and frames, the durable writer and the damage-aware
// reader.
//
// A rollout file is a 128-byte file header followed by frames. A frame is the
// unit of atomicity: it carries one record or a batch of records (a turn
// commit), two CRC-32C checksums (one over the frame header, one over the
// payload), the file's random id, the seq of its first record, and the offset
// that was known durable when it was written. The full byte layout and the
// crash assumptions are drawn in docs/FORMAT.md and next to the code in
// frame.go and header.go.
//
//	file header | frame | frame | frame | ...
//
// Records are numbered 1, 2, 3... per thread with no gaps; seq 1 is always
// the thread_opened header record. Record bodies are msgpack. Kinds this
// version does not know are kept byte for byte and yielded by the reader, so
// that a newer writer's records survive an older reader and a repair.
//
// The Writer is the only way to append. There is one per thread across
// processes (an OS lock on the file; a second writer gets ErrThreadLocked at
// once). Append returns only when the frame is durable under the SyncPolicy;
// with SyncAlways concurrent appends share one fdatasync (group commit). A
// failed write or fsync never leaves an unacknowledged frame that a later
// append could be mistaken to follow: the file is cut back to the last frame
// known durable and synced before anything else is written, and only one
// fsync is ever in flight.
//
// With Options.Log, a SyncAlways append is made durable by a shared Log
// (the workspace journal, package journal) instead of an fdatasync of the
// rollout: the writer writes its frame and submits a copy, and the
// append returns once the log has the copy durable. Log is the whole
// contract between the two; a LogGroup syncs the writers' rollouts when
// the log asks, so that it can let its entries go.
//
// The Reader is an iterator in the shape of bufio.Scanner. It never trusts a
// length before a checksum covers it and bounds every allocation, so no input
// can make it panic, hang or exhaust memory. It tells apart a clean end, a
// torn tail (damage that no later frame vouches was ever durable: the
// residue of a crash, cut by the next writer together with anything after
// it) and mid-file damage (a later frame records a durable offset past it:
// acknowledged data destroyed; the reader resynchronises on the sync word,
// skips it and reports a *CorruptionError).
//
// This package imports no other package of the module but vfs (the file
// system seam): everything else is built on it.
package rollout
