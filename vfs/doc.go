// Package vfs owns the file-system seam: every file operation of rolloutdb
// goes through an FS, so that tests inject what disks do.
//
//   - OS is the operating system's file system: File.Sync is fdatasync,
//     File.Lock an exclusive BSD lock (flock), and opens refuse symbolic
//     links.
//   - MemFS keeps files in memory and models the disk assumptions of
//     docs/FORMAT.md exactly: what was not synced (a file's data, a
//     directory's names) may be lost at Crash, in part; a failed fsync
//     drops the pages it was flushing (LoseSync).
//   - FaultFS wraps an FS and fails the operations its Hook names: a short
//     write, ENOSPC, EIO, a failed fsync, rename or remove.
//
// A DirVersion tells whether a directory's names changed, at the cost of
// one stat (VersionOf); state.db uses it to know what changed on disk
// without listing a thread directory.
//
// The package imports nothing of rolloutdb's, and must never: it is the
// bottom of the dependency graph.
package vfs
