package rolloutdb

import (
	"context"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/backup"
	"github.com/rolloutdb/rolloutdb/internal/location"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The backup types, as the backup package has them.
type (
	BackupOptions  = backup.Options
	BackupReport   = backup.Report
	BackupManifest = backup.Manifest
	RestoreReport  = backup.RestoreReport
)

// BackupManifestName is the manifest a backup writes last, in its data
// directory.
const BackupManifestName = backup.ManifestName

// Backup copies the workspace into dest while hosts go on writing (see
// backup.Run): each rollout up to a frame boundary that was durable when
// the backup reached it, state.db with its business state, the artifacts,
// workspace.json and a manifest. Into an earlier backup of this workspace
// it is incremental. dest is on the DB's file system (Options.FS): with
// vfs.MemFS the backup is in memory too, state.db included (SQLite copies
// it to the real disk, from where it is copied in). A dest written as a
// URL is refused (ErrUnsupportedURL).
//
// A fleet workspace's backup is a local workspace on the operating
// system's file system, written whole every time (see backupFleet): dest
// must be absent, empty, or an earlier fleet backup of the workspace.
func (db *DB) Backup(ctx context.Context, dest string, o BackupOptions) (BackupReport, error) {
	if err := location.Local("backup destination", dest); err != nil {
		return BackupReport{}, err
	}
	if db.fleet != nil {
		return db.backupFleet(ctx, dest, o)
	}
	return backup.Run(ctx, backupSource{db}, dest, o)
}

// VerifyBackup checks every file a backup's manifest lists against its
// size and digest, and returns those that differ (dataDir "" is ".craft").
// The backup is on the operating system's file system.
func VerifyBackup(dest, dataDir string) ([]string, error) {
	if err := location.Local("backup", dest); err != nil {
		return nil, err
	}
	return backup.Verify(dest, backup.VerifyOptions{DataDir: dataDir})
}

// RestoreBackup makes a new workspace at target from the backup in dir
// (see backup.Restore): target is the whole workspace or not there, and
// the copy is opened once, as a workspace, before it takes target's name.
// Both are on the operating system's file system.
func RestoreBackup(ctx context.Context, dir, target, dataDir string) (RestoreReport, error) {
	if err := errors.CombineErrors(location.Local("backup", dir), location.Local("workspace", target)); err != nil {
		return RestoreReport{}, err
	}
	return backup.Restore(ctx, dir, target, checkRestore, backup.RestoreOptions{DataDir: dataDir})
}

// checkRestore opens a restored copy (backup.Check).
func checkRestore(ctx context.Context, dir, dataDir string, sqliteChanged bool) (int, error) {
	db, err := Open(ctx, dir, Options{DataDir: dataDir, Host: "restore", NoJournal: true})
	if err != nil {
		return 0, errors.Wrap(err, "the copy does not open")
	}
	st := db.StateReport()
	ids, err := db.ListThreadIDs(ctx)
	if err == nil && (st.Corrupt || st.BusinessStateLost) {
		err = errors.Newf("its state.db does not open (%s): its business state would be lost", st.Reason)
	}
	if err == nil && sqliteChanged {
		var ir projection.IntegrityReport
		if ir, err = db.CheckIntegrity(ctx); err == nil && !ir.OK() {
			err = errors.Newf("its state.db changed since the backup and fails SQLite's integrity check: %v", ir)
		}
	}
	return len(ids), errors.CombineErrors(err, db.Close())
}

// backupSource is the DB as a backup.Source.
type backupSource struct{ db *DB }

func (s backupSource) Workspace() backup.Workspace {
	return backup.Workspace{ID: s.db.id, Path: s.db.workspace, DataDir: s.db.opts.DataDir, FS: s.db.fs}
}

// DurableEnd is this DB's acknowledged end of a thread it writes and has
// not archived.
func (s backupSource) DurableEnd(thread, rel string) (int64, bool) {
	s.db.mu.Lock()
	t := s.db.threads[thread]
	s.db.mu.Unlock()
	if t == nil || t.archived.Load() || !strings.HasPrefix(rel, rollout.ActiveDir+"/") {
		return 0, false
	}
	return t.follow.Durable(), true
}

func (s backupSource) HasThread(thread string) bool {
	_, err := s.db.log.Locate(context.Background(), thread)
	return err == nil
}

func (s backupSource) Appends() uint64 { return uint64(s.db.counters.frames.Load()) }

func (s backupSource) CopyState(ctx context.Context, path string) error {
	return s.db.state.CopyTo(ctx, path)
}
