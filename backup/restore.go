package backup

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

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
// that differs is refused, and nothing is written), copies the files into
// a directory beside target, syncs them, opens the copy once to check it
// (check; dataDir "" is ".craft"), and only then renames it to target and syncs
// the directories above it: target is either the whole workspace or not
// there. target must not exist, or be an empty directory, and must not be
// inside the backup (nor the backup inside it). Opening the backup as a
// workspace changes its SQLite files (state.db, search.db); those are
// restored as they are then, and the check is that the copy opens with
// its business state, not their digests. Restore from a backup no process
// has open. The manifest is not copied: the restore is a workspace, not a
// backup.
func Restore(ctx context.Context, dir, target, dataDir string, check Check) (RestoreReport, error) {
	if check == nil {
		return RestoreReport{}, errors.New("backup: Restore needs a Check of the copy")
	}
	if dataDir == "" {
		dataDir = ".craft"
	}
	abs, err := filepath.Abs(target)
	if err != nil {
		return RestoreReport{}, err
	}
	rep := RestoreReport{Target: abs}
	if ents, err := os.ReadDir(abs); err == nil && len(ents) > 0 {
		return rep, errors.Wrapf(ErrRestoreTarget, "%s", abs)
	} else if err != nil && !os.IsNotExist(err) {
		return rep, errors.Wrapf(ErrRestoreTarget, "%s: %v", abs, err)
	}
	src, err := filepath.Abs(dir)
	if err != nil {
		return rep, err
	}
	if r, err := filepath.EvalSymlinks(src); err == nil {
		src = r
	}
	parent := resolved(filepath.Dir(abs))
	if within(filepath.Join(parent, filepath.Base(abs)), src) || within(src, filepath.Join(parent, filepath.Base(abs))) {
		return rep, errors.Wrapf(ErrRestoreTarget, "%s and the backup %s are inside one another", abs, src)
	}
	data := filepath.Join(src, dataDir)
	if _, err := os.Stat(filepath.Join(data, ManifestName)); err != nil {
		return rep, errors.Wrapf(ErrNotABackup, "%s: %v", dir, err)
	}
	// Not while a backup into dir runs (the lock is the backup's).
	lockPath := filepath.Join(data, "backup.lock")
	if f, err := vfs.OS.Create(lockPath); err == nil {
		_ = f.Close()
	}
	if lock, err := vfs.OS.OpenRW(lockPath); err == nil {
		defer lock.Close()
		if err := lock.Lock(); err != nil {
			return rep, errors.WithHint(errors.Wrapf(err, "restore from %s", dir), "a backup into it is running")
		}
	}
	var m Manifest
	b, err := os.ReadFile(filepath.Join(data, ManifestName))
	if err != nil {
		return rep, errors.Wrapf(ErrNotABackup, "%s: %v", dir, err)
	}
	if err := json.Unmarshal(b, &m); err != nil || !validManifest(&m) {
		return rep, errors.Wrapf(ErrNotABackup, "%s: manifest not readable, or naming paths outside the backup (%v)", dir, err)
	}
	bad, err := Verify(src, dataDir)
	if err != nil {
		return rep, err
	}
	sqlite := false
	bad = slices.DeleteFunc(bad, func(b string) bool {
		if (strings.HasPrefix(b, "state.db: size or digest differs") || strings.HasPrefix(b, "search.db: size or digest differs")) && !strings.Contains(b, "\n") {
			sqlite = true
			return true
		}
		return false
	})
	if len(bad) > 0 {
		return rep, errors.Newf("backup: restore of %s refused: %d files differ from its manifest (first: %s)", dir, len(bad), bad[0])
	}
	// The directories made for target, to sync once it is in place.
	made := []string{}
	for d := parent; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		made = append(made, d)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return rep, err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(abs)+".restore-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(tmp) // gone once renamed
	if err := os.Chmod(tmp, 0o755); err != nil {
		return rep, err
	}
	dirs := map[string]bool{tmp: true, filepath.Join(tmp, dataDir): true}
	for _, f := range m.Files {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		rel := filepath.FromSlash(f.Path)
		from, to := filepath.Join(data, rel), filepath.Join(tmp, dataDir, rel)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return rep, err
		}
		n, err := copyFileSynced(from, to)
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
		if err := os.MkdirAll(d, 0o755); err != nil {
			return rep, err
		}
		if err := vfs.OS.SyncDir(d); err != nil {
			return rep, err
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
	if err := os.Remove(abs); err != nil && !os.IsNotExist(err) {
		return rep, errors.Wrapf(ErrRestoreTarget, "%s: %v", abs, err)
	}
	if err := os.Rename(tmp, abs); err != nil {
		return rep, err
	}
	if err := vfs.OS.SyncDir(parent); err != nil { // target's entry
		return rep, err
	}
	for _, d := range made { // and those of the directories made for it
		if err := vfs.OS.SyncDir(filepath.Dir(d)); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// resolved is path with the symbolic links of its deepest existing
// ancestor resolved (the rest does not exist yet).
func resolved(path string) string {
	rest := ""
	for d := path; ; d = filepath.Dir(d) {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			return filepath.Join(r, rest)
		}
		if filepath.Dir(d) == d {
			return path
		}
		rest = filepath.Join(filepath.Base(d), rest)
	}
}

// within reports whether path is root or inside it.
func within(path, root string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}

// copyFileSynced copies src to a new file dst and syncs it.
func copyFileSynced(src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	return n, errors.CombineErrors(err, out.Close())
}
