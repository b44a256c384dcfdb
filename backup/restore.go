package backup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"path/filepath"
	"syscall"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// Check opens the workspace a restore copied (at dir, data directory
// dataDir) and returns its active threads, or why it is not a restore:
// it does not open, or opens only by rebuilding state.db (business state
// lost), or, with sqliteChanged (its SQLite files differ from the
// manifest: the backup was opened since), state.db fails SQLite's
// integrity check.
type Check func(ctx context.Context, dir, dataDir string, sqliteChanged bool) (threads int, err error)

// RestoreOptions qualify a restore. The zero value works.
type RestoreOptions struct {
	// DataDir is the name of the data directory, in the backup and in the
	// workspace restored. Default: ".craft".
	DataDir string
	// FS is the file system the backup is on, and the target. Default:
	// vfs.OS.
	FS vfs.FS
}

// RestoreReport says what a restore did.
type RestoreReport struct {
	Target string `json:"target"`
	Files  int    `json:"files"`
	Bytes  int64  `json:"bytes"`
	// Threads are the active threads of the restored workspace, as
	// opened.
	Threads int `json:"threads"`
}

// Restore makes a new workspace at target from the backup in dir.
// It checks every file against the manifest first (a backup with a file
// that differs is refused, and nothing is written; one that cannot be
// read fails the restore with the cause), copies the files into a
// directory beside target, syncs them, opens the copy once to check it
// (check), and only then renames it to target and syncs the directories
// above it: target is either the whole workspace or not there. A restore
// that fails leaves target absent, or the empty directory it was, and
// nothing beside it; if only the syncs after the rename failed, target is
// whole. A power cut may leave the temporary directory (.<target's
// name>.restore-*) beside it. target must not exist, or be an empty
// directory, and must not be inside the backup (nor the backup inside
// it). Opening the backup as a workspace
// changes its SQLite files (state.db, search.db); those are restored as
// they are then, and the check is that the copy opens with its business
// state, not their digests. Restore from a backup no process has open.
// The manifest is not copied: the restore is a workspace, not a backup.
func Restore(ctx context.Context, dir, target string, check Check, o RestoreOptions) (RestoreReport, error) {
	if check == nil {
		return RestoreReport{}, errors.New("backup: Restore needs a Check of the copy")
	}
	dataDir := o.DataDir
	if dataDir == "" {
		dataDir = ".craft"
	}
	fsys := fsOf(o.FS)
	abs, err := filepath.Abs(target)
	if err != nil {
		return RestoreReport{}, err
	}
	rep := RestoreReport{Target: abs}
	if info, err := fsys.Lstat(abs); err == nil && !info.Dir {
		return rep, errors.Wrapf(ErrRestoreTarget, "%s is not a directory", abs)
	} else if err != nil && !vfs.IsNotExist(err) {
		return rep, errors.Wrapf(ErrRestoreTarget, "%s: %v", abs, err)
	}
	if names, err := fsys.ReadDir(abs); err == nil && len(names) > 0 {
		return rep, errors.Wrapf(ErrRestoreTarget, "%s", abs)
	} else if err != nil && !vfs.IsNotExist(err) {
		return rep, errors.Wrapf(ErrRestoreTarget, "%s: %v", abs, err)
	}
	src, err := filepath.Abs(dir)
	if err != nil {
		return rep, err
	}
	if r, err := evalLinks(fsys, src); err == nil {
		src = r
	}
	parent := resolved(fsys, filepath.Dir(abs))
	if within(filepath.Join(parent, filepath.Base(abs)), src) || within(src, filepath.Join(parent, filepath.Base(abs))) {
		return rep, errors.Wrapf(ErrRestoreTarget, "%s and the backup %s are inside one another", abs, src)
	}
	data := filepath.Join(src, dataDir)
	// Before the lock, which is a file: none is made where no backup is.
	if _, err := fsys.Stat(filepath.Join(data, ManifestName)); vfs.IsNotExist(err) {
		return rep, errors.Wrapf(ErrNotABackup, "%s: %v", dir, err)
	} else if err != nil {
		return rep, errors.Wrapf(err, "backup: read the manifest of %s", dir)
	}
	// Not while a backup into dir runs (the lock is the backup's).
	if lock, err := lockBackup(fsys, data); err == nil {
		defer lock.Close()
		if err := lock.Lock(); err != nil {
			return rep, errors.WithHint(errors.Wrapf(err, "restore from %s", dir), "a backup into it is running")
		}
	}
	m, err := loadManifest(fsys, dir, data)
	if err != nil {
		return rep, err
	}
	if !validManifest(m) {
		return rep, errors.Wrapf(ErrNotABackup, "%s: its manifest names paths outside the backup", dir)
	}
	// Where each file is (its copy, or the one a backup interrupted since
	// this manifest kept), and how much of it: a rollout's copy may go on
	// past the manifest.
	type source struct {
		path string
		size int64 // -1: all of it
	}
	var bad []string
	sources := make([]source, len(m.Files))
	sqlite := false
	for i, f := range m.Files {
		at, err := checkFile(fsys, data, f)
		sources[i] = source{at, f.Size}
		switch {
		case err == nil:
		case errors.Is(err, errDiffers) && isSQLite(f.Path):
			sqlite = true
			sources[i] = source{filepath.Join(data, filepath.FromSlash(f.Path)), -1} // as it is: checked by opening it
		case errors.Is(err, errDiffers) || vfs.IsNotExist(err):
			bad = append(bad, f.Path+": "+err.Error())
		default: // a failing disk, not a backup that differs
			return rep, errors.Wrapf(err, "restore %s: read %s", dir, f.Path)
		}
	}
	if len(bad) > 0 {
		return rep, errors.Newf("backup: restore of %s refused: %d files differ from its manifest (first: %s)", dir, len(bad), bad[0])
	}
	// The directories made for target, to sync once it is in place.
	made := []string{}
	for d := parent; ; d = filepath.Dir(d) {
		if _, err := fsys.Lstat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		made = append(made, d)
	}
	if err := fsys.MkdirAll(parent); err != nil {
		return rep, err
	}
	tmp, err := mkdirTemp(fsys, parent, "."+filepath.Base(abs)+".restore-")
	if err != nil {
		return rep, err
	}
	defer vfs.RemoveAll(fsys, tmp) // gone once renamed
	dirs := map[string]bool{tmp: true, filepath.Join(tmp, dataDir): true}
	for i, f := range m.Files {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		to := filepath.Join(tmp, dataDir, filepath.FromSlash(f.Path))
		if err := fsys.MkdirAll(filepath.Dir(to)); err != nil {
			return rep, err
		}
		n, err := copyFileSynced(fsys, sources[i].path, to, sources[i].size)
		if err != nil {
			return rep, errors.Wrapf(err, "restore %s", f.Path)
		}
		rep.Files++
		rep.Bytes += n
		for d := filepath.Dir(to); len(d) > len(tmp); d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	for d := range dirs {
		if err := fsys.MkdirAll(d); err != nil {
			return rep, err
		}
		if err := fsys.SyncDir(d); err != nil {
			return rep, errors.Wrapf(err, "restore: sync %s", d)
		}
	}
	// Open the copy before it takes the target's name: a copy that does
	// not open, or opens only by rebuilding its state.db (business state
	// lost), is not a restore.
	threads, err := check(ctx, tmp, dataDir, sqlite)
	if err != nil {
		return rep, errors.Wrapf(err, "restore %s", dir)
	}
	rep.Threads = threads
	if err := fsys.Remove(abs); errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
		return rep, errors.Wrapf(ErrRestoreTarget, "%s: %v", abs, err) // filled meanwhile
	} else if err != nil && !vfs.IsNotExist(err) {
		return rep, errors.Wrapf(err, "restore: remove the empty %s", abs)
	}
	if err := fsys.Rename(tmp, abs); err != nil {
		return rep, errors.Wrapf(err, "restore: rename %s", tmp)
	}
	if err := fsys.SyncDir(parent); err != nil { // target's entry
		return rep, errors.Wrapf(err, "restore: sync %s", parent)
	}
	for _, d := range made { // and those of the directories made for it
		if err := fsys.SyncDir(filepath.Dir(d)); err != nil {
			return rep, errors.Wrapf(err, "restore: sync %s", filepath.Dir(d))
		}
	}
	return rep, nil
}

// mkdirTemp makes a new directory in dir whose name starts with prefix.
func mkdirTemp(fsys vfs.FS, dir, prefix string) (string, error) {
	for range 100 {
		var r [8]byte
		_, _ = rand.Read(r[:])
		path := filepath.Join(dir, prefix+hex.EncodeToString(r[:]))
		if _, err := fsys.Lstat(path); !vfs.IsNotExist(err) {
			continue // taken (or unreadable): another name
		}
		if err := fsys.MkdirAll(path); err != nil {
			return "", err
		}
		return path, nil
	}
	return "", errors.Newf("backup: no free name for a directory in %s", dir)
}

// within reports whether path is root or inside it.
func within(path, root string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}

// copyFileSynced copies the first size bytes of src (all of it if size
// < 0) to a new file dst and syncs it.
func copyFileSynced(fsys vfs.FS, src, dst string, size int64) (int64, error) {
	in, err := fsys.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	if size < 0 {
		if size, err = in.Size(); err != nil {
			return 0, err
		}
	}
	out, err := fsys.Create(dst)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, min(1<<20, size))
	var n int64
	for n < size && err == nil {
		var k int
		want := int(min(int64(len(buf)), size-n))
		if k, err = in.ReadAt(buf[:want], n); k == want && err == io.EOF {
			err = nil
		}
		if k > 0 {
			var w int
			if w, err = out.WriteAt(buf[:k], n); err != nil || w < k {
				err = vfs.WriteError(dst, err)
			}
			n += int64(k)
		}
		if err == nil && k == 0 {
			err = errors.Newf("%s: short read at %d of %d bytes", src, n, size)
		}
	}
	if err == nil {
		err = out.Sync()
	}
	return n, errors.CombineErrors(err, out.Close())
}
