// Package backup copies a workspace while hosts write into it, and restores
// it: each rollout up to a frame boundary that was durable when the backup
// reached it, state.db through SQLite's online copy, the artifacts,
// workspace.json, and last a manifest (backup.json) of every file's size
// and digest. A backup is a workspace: open it, or copy it anywhere.
//
// It works over a Source, the little it needs of an open workspace: where
// it is, how far this process knows a thread's rollout durable, whether a
// thread still exists, a count of acknowledged appends (the copy slows
// down while they move), and a consistent copy of state.db. The facade is
// one Source; an engine that keeps its log elsewhere is another.
//
// Every file operation goes through a vfs.FS: the workspace's
// (Workspace.FS) for a backup, which is written to the same file system;
// RestoreOptions.FS and VerifyOptions.FS for a restore and a check;
// vfs.OS by default. So the fault tests fail writes, fsyncs, renames and
// directory syncs, and cut the power, on vfs.MemFS. The one exception is
// the copy of state.db, which SQLite makes (VACUUM INTO) and which
// SQLite writes to the real disk: in the destination on vfs.OS, and on
// another FS into a temporary file there, copied in through the FS.
//
// # The manifest
//
// A backup (Run; DB.Backup and rolloutctl backup in the facade) is a
// workspace directory whose data directory also holds backup.json,
// written last (temporary file, fsync, rename):
//
//	{
//	  "format": 1,
//	  "workspace_id": "...", "source": "/abs/path/of/the/workspace", "created": "...",
//	  "files": [{"path": "threads/active/<id>.rollout", "size": 12345, "sha256": "...", "mod_time": "..."}],
//	  "rollouts": [{"thread": "<id>", "path": "threads/active/<id>.rollout", "size": 12345,
//	                "last_seq": 40, "last_frame": 12001, "frame_crc": 305419896, "file_id": 81985529216486895}]
//	}
//
// Paths are relative to the data directory. files lists every copied file
// (rollouts, state.db, artifacts, workspace.json) with the size and
// SHA-256 of the copy; mod_time is the source's, for artifacts (changed
// ones are copied again). rollouts says where each copy ends: a frame
// boundary (size), the last frame's offset and payload CRC and its last
// seq, and the rollout's file_id (its file header's: a repair writes a
// new one). An incremental backup continues a rollout from size only if
// the copy still matches its files entry (its first size bytes: see
// below), the source has the same file id and still holds that frame
// there; otherwise it copies it whole. A destination with files and no
// backup.json is refused unless its workspace.json names the same
// workspace, or it
// holds only what a backup makes first (its directories, lock and
// workspace.json's temporary file): a first backup interrupted before its
// manifest is finished by the next run. workspace.json is copied first,
// and its name synced before anything else is copied, so that a power cut
// never leaves a destination that is neither. backup.lock in the data
// directory, held (flock) for the whole run, keeps a second backup out.
//
// # An interrupted backup
//
// A run into an earlier backup leaves every file the earlier manifest
// names as that manifest has it until its own manifest is durable, so a
// run that fails (a full disk, a failed fsync) or is cut by a power cut
// anywhere leaves the earlier backup whole: it verifies and restores as
// the workspace was then, and the next run finishes the new one.
//
//   - A rollout's copy is only appended to: a files entry of a rollout
//     (threads/*/<id>.rollout) names its first size bytes, and what lies
//     past them is a later run's, cut by the next one. Verify reads that
//     far; Restore copies that far.
//   - A rollout archived or restored since is linked to its new path; its
//     old name goes once the new manifest is durable.
//   - A file copied again whole in place of one the manifest names
//     (state.db at every run, a terminal's record or log, a rollout whose
//     file id changed, workspace.json) first moves that one aside, to
//     <path>.backup-prev, removed once the new manifest is durable.
//     Verify and Restore read a file there when its path does not match.
//
// # Restore
//
// A restore (Restore; RestoreBackup and rolloutctl backup restore in the
// facade) takes the same lock, refuses a manifest naming a path outside
// the data directory, checks every files entry, copies the files into a
// temporary directory beside the target, syncs each file and directory,
// opens the copy there (a copy whose state.db does not open, so that its
// business state would be lost, is refused and removed), and only then
// renames it to the target and syncs the directories above it: a
// restore that fails, or is cut by a power cut, leaves no part of a
// workspace at the target (a power cut may leave the temporary directory,
// .<name>.restore-*, beside it), and one that returned survives a power
// cut. backup.json is not copied. state.db
// and search.db are the files opening a backup as a workspace changes: a
// mismatch there is taken, and the copy must open cleanly and pass SQLite's
// integrity check instead. A target inside the backup (or the backup
// inside it), links resolved, is refused.
package backup
