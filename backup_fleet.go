package rolloutdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// fleetBackupMarker is the file in a fleet backup's data directory that
// says which fleet workspace it copies: a later backup of that workspace
// may replace the directory, and nothing else may.
const fleetBackupMarker = "fleet-backup.json"

// fleetBackupFile is fleetBackupMarker's content.
type fleetBackupFile struct {
	WorkspaceID string    `json:"workspace_id"`
	Source      string    `json:"source"` // fleet:<workspace>/, for people
	Created     time.Time `json:"created"`
}

// backupFleet writes a fleet workspace into dest in the local on-disk
// format, so that the backup opens anywhere as a local workspace: each
// thread's rollout as Log.Read has it (file header and whole frames,
// byte for byte), the artifacts, workspace.json with the fleet's
// workspace id (the rollouts' headers name it, and recovery checks that
// they match), and state.db, built by opening the copy, with the
// business state copied in from the fleet's index.
//
// dest must be absent, an empty directory, or an earlier fleet backup of
// this workspace (its fleetBackupMarker names the same workspace id);
// anything else is refused with ErrNotABackup and left as it is. The
// backup is not incremental: every run writes the whole copy into a
// temporary directory beside dest, syncs it, and renames it into place,
// so a failed or interrupted run leaves dest as it was (or, cut by a
// power cut between moving an earlier backup aside and renaming the new
// one in, absent, with the earlier one at .<name>.fleet-old-* beside
// it). An earlier backup that was opened and written to since is
// replaced all the same: what was written there is not kept.
func (db *DB) backupFleet(ctx context.Context, dest string, o BackupOptions) (rep BackupReport, err error) {
	start := time.Now()
	dest, err = filepath.Abs(dest)
	if err != nil {
		return BackupReport{}, errors.Wrapf(err, "backup destination %s", dest)
	}
	rep.Dest = dest
	dataDir := db.opts.DataDir
	earlier, err := checkFleetDest(dest, dataDir, db.id)
	if err != nil {
		return BackupReport{}, err
	}
	parent := filepath.Dir(dest)
	if err := vfs.OS.MkdirAll(parent); err != nil {
		return BackupReport{}, errors.Wrapf(err, "create %s", parent)
	}
	tmp := filepath.Join(parent, "."+filepath.Base(dest)+".fleet-backup-"+randomSuffix())
	if err := vfs.OS.MkdirAll(tmp); err != nil {
		return BackupReport{}, errors.Wrapf(err, "create %s", tmp)
	}
	defer func() {
		if err != nil {
			err = errors.CombineErrors(err, vfs.RemoveAll(vfs.OS, tmp))
		}
	}()
	progress := func(rel string) error {
		if o.Progress == nil {
			return nil
		}
		return o.Progress(rel)
	}
	w := fleetCopy{db: db, root: filepath.Join(tmp, dataDir), progress: progress}
	if err := w.writeFiles(ctx, &rep); err != nil {
		return BackupReport{}, err
	}
	if err := w.copyState(ctx, tmp); err != nil {
		return BackupReport{}, errors.Wrap(err, "copy business state")
	}
	if err := syncTree(tmp); err != nil {
		return BackupReport{}, err
	}
	if err := swapInto(tmp, dest, earlier); err != nil {
		return BackupReport{}, err
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// checkFleetDest says whether dest may take a fleet backup of workspace
// id: absent or empty (earlier false), or an earlier fleet backup of it
// (earlier true). Anything else is ErrNotABackup.
func checkFleetDest(dest, dataDir, id string) (earlier bool, err error) {
	info, err := vfs.OS.Lstat(dest)
	if vfs.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, errors.Wrapf(err, "backup destination %s", dest)
	}
	refuse := func(why string) error {
		return errors.WithHint(errors.Wrapf(ErrNotABackup, "backup destination %s %s", dest, why),
			"back a fleet workspace up into a new or empty directory, or into an earlier backup of the same workspace")
	}
	if !info.Dir {
		return false, refuse("is not a directory")
	}
	names, err := vfs.OS.ReadDir(dest)
	if err != nil {
		return false, errors.Wrapf(err, "backup destination %s", dest)
	}
	if len(names) == 0 {
		return false, nil
	}
	b, err := vfs.ReadFile(vfs.OS, filepath.Join(dest, dataDir, fleetBackupMarker), 1<<20)
	if vfs.IsNotExist(err) {
		return false, refuse("is not empty and is not a fleet backup")
	}
	if err != nil {
		return false, errors.Wrapf(err, "backup destination %s", dest)
	}
	var m fleetBackupFile
	if err := json.Unmarshal(b, &m); err != nil || m.WorkspaceID != id {
		return false, refuse("is a backup of another workspace")
	}
	return true, nil
}

// fleetCopy writes a fleet DB's files into root, a local data directory.
type fleetCopy struct {
	db       *DB
	root     string
	progress func(rel string) error
}

// writeFiles writes workspace.json, the marker, every rollout and every
// artifact file, each synced.
func (w fleetCopy) writeFiles(ctx context.Context, rep *BackupReport) error {
	for _, d := range []string{rollout.ActiveDir, rollout.ArchivedDir} {
		if err := vfs.OS.MkdirAll(filepath.Join(w.root, d)); err != nil {
			return errors.Wrapf(err, "create %s", d)
		}
	}
	ws, _ := json.MarshalIndent(workspaceFile{WorkspaceID: w.db.id, FormatVersion: WorkspaceFormat}, "", "  ")
	marker, _ := json.MarshalIndent(fleetBackupFile{WorkspaceID: w.db.id, Source: w.db.fleet.Path(""), Created: time.Now().UTC()}, "", "  ")
	for _, f := range []struct {
		name string
		b    []byte
	}{{"workspace.json", ws}, {fleetBackupMarker, marker}} {
		if err := vfs.WriteFileAtomic(vfs.OS, filepath.Join(w.root, f.name), append(f.b, '\n')); err != nil {
			return err
		}
		rep.BytesCopied += int64(len(f.b) + 1)
	}
	// A thread archived or restored between the two lists is listed
	// twice, or not at all if it moves the other way: it is copied once,
	// to where its snapshot says it is, and a thread is missed only if it
	// moved while the backup ran.
	seen := map[string]bool{}
	for _, loc := range []string{projection.LocationActive, projection.LocationArchived} {
		ids, err := w.db.log.List(ctx, loc)
		if err != nil {
			return errors.Wrapf(err, "list %s threads", loc)
		}
		for _, id := range ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			rel, n, err := w.copyRollout(ctx, id)
			if errors.Is(err, projection.ErrNotFound) {
				continue // deleted since the list
			}
			if err != nil {
				return errors.Wrapf(err, "copy thread %s", id)
			}
			rep.Threads++
			rep.BytesCopied += n
			if err := w.progress(rel); err != nil {
				return err
			}
		}
	}
	for _, top := range []string{artifacts.ToolResultsDir, artifacts.AttachmentsDir, artifacts.TerminalsDir} {
		err := vfs.Walk(w.db.fs, "/"+top, func(path string, info vfs.Info) error {
			rel := strings.TrimPrefix(filepath.ToSlash(path), "/")
			if strings.HasPrefix(filepath.Base(path), ".") {
				return nil // a temporary file
			}
			f, err := w.db.fs.Open(path)
			if vfs.IsNotExist(err) {
				return nil // removed since the walk listed it
			}
			if err != nil {
				return err
			}
			defer f.Close()
			n, err := writeSynced(filepath.Join(w.root, filepath.FromSlash(rel)), io.NewSectionReader(f, 0, info.Size))
			if err != nil {
				return errors.Wrapf(err, "copy %s", rel)
			}
			rep.BytesCopied += n
			return w.progress(rel)
		})
		if err != nil {
			return errors.Wrapf(err, "copy %s", top)
		}
	}
	rep.BytesTotal = rep.BytesCopied
	return nil
}

// copyRollout writes a thread's records, as one Log.Read snapshot has
// them, to its rollout's path in the data directory for the location
// the snapshot names, and returns that path (relative).
func (w fleetCopy) copyRollout(ctx context.Context, id string) (string, int64, error) {
	td, err := w.db.log.Read(ctx, id)
	if err != nil {
		return "", 0, err
	}
	defer td.Close()
	dir := rollout.ActiveDir
	if td.Location == projection.LocationArchived {
		dir = rollout.ArchivedDir
	}
	rel := dir + "/" + id + rollout.RolloutExt
	n, err := writeSynced(filepath.Join(w.root, filepath.FromSlash(rel)), io.NewSectionReader(td.ReaderAt, 0, td.Size))
	return rel, n, err
}

// writeSynced creates path (and the directories above it) with r's bytes,
// synced. The directories are synced by syncTree, once, at the end.
func writeSynced(path string, r io.Reader) (n int64, err error) {
	if err := vfs.OS.MkdirAll(filepath.Dir(path)); err != nil {
		return 0, err
	}
	f, err := vfs.OS.Create(path)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.CombineErrors(err, f.Close()) }()
	buf := make([]byte, 1<<20)
	for {
		m, rerr := io.ReadFull(r, buf)
		if m > 0 {
			if _, err := f.WriteAt(buf[:m], n); err != nil {
				return n, vfs.WriteError(path, err)
			}
			n += int64(m)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return n, rerr
		}
	}
	return n, f.Sync()
}

// copyState opens the copy at dir, which builds its state.db from the
// rollouts, and copies the fleet's business state into it through the
// Index: subagent edges, then every thread's goals, plan and mailbox.
// The copy's goals and messages get ids of its own (its index assigns
// them); what refers to them by id elsewhere does not follow. Diagnostics
// are not copied: opening and resuming the copy finds its own.
func (w fleetCopy) copyState(ctx context.Context, dir string) (err error) {
	cp, err := Open(ctx, dir, Options{DataDir: w.db.opts.DataDir, Host: "fleet-backup", NoJournal: true,
		Logger: slog.New(errorsOnly{w.db.logger().Handler()})})
	if err != nil {
		return errors.Wrap(err, "open the copy")
	}
	defer func() { err = errors.CombineErrors(err, cp.Close()) }()
	src, dst := w.db.state, cp.state
	edges, err := src.Edges(ctx, projection.EdgeFilter{})
	if err != nil {
		return err
	}
	for _, e := range edges {
		if err := dst.OpenEdge(ctx, e.Parent, e.Child); err != nil {
			return err
		}
		if e.Status == projection.EdgeClosed {
			if err := dst.CloseEdge(ctx, e.Parent, e.Child); err != nil {
				return err
			}
		}
	}
	var threads []string
	for _, loc := range []string{projection.LocationActive, projection.LocationArchived} {
		ids, err := cp.log.List(ctx, loc)
		if err != nil {
			return err
		}
		threads = append(threads, ids...)
	}
	for _, id := range threads {
		goals, err := src.Goals(ctx, id)
		if err != nil {
			return err
		}
		for _, g := range goals {
			ng, err := dst.AddGoal(ctx, id, g.Text)
			if err != nil {
				return err
			}
			if g.Status != ng.Status {
				if err := dst.SetGoalStatus(ctx, ng.ID, g.Status); err != nil {
					return err
				}
			}
		}
		plan, err := src.Plan(ctx, id)
		if err != nil {
			return err
		}
		if len(plan) > 0 {
			if err := dst.SetPlan(ctx, id, plan); err != nil {
				return err
			}
		}
		inbox, err := src.Inbox(ctx, id, false)
		if err != nil {
			return err
		}
		for _, m := range inbox {
			nm, err := dst.Send(ctx, m.From, m.To, m.Body)
			if err != nil {
				return err
			}
			if m.ReadAt != nil {
				if err := dst.MarkRead(ctx, nm.ID); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// errorsOnly passes on a logger's errors only: opening a backup's copy
// says its new state.db lost business state, which copyState then puts
// in.
type errorsOnly struct{ slog.Handler }

func (h errorsOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError && h.Handler.Enabled(ctx, l)
}

func (h errorsOnly) WithAttrs(as []slog.Attr) slog.Handler {
	return errorsOnly{h.Handler.WithAttrs(as)}
}
func (h errorsOnly) WithGroup(name string) slog.Handler { return errorsOnly{h.Handler.WithGroup(name)} }

// syncTree syncs every directory under dir, dir included, deepest first
// (the files in them were synced as they were written).
func syncTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return err
	})
	if err != nil {
		return errors.Wrapf(err, "sync %s", dir)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := vfs.OS.SyncDir(dirs[i]); err != nil {
			return errors.Wrapf(err, "sync %s", dirs[i])
		}
	}
	return nil
}

// swapInto renames the finished copy tmp to dest. An empty dest is
// removed first; an earlier backup there is moved aside, and removed
// once the new one has its name.
func swapInto(tmp, dest string, earlier bool) error {
	parent := filepath.Dir(dest)
	old := ""
	if earlier {
		old = filepath.Join(parent, "."+filepath.Base(dest)+".fleet-old-"+randomSuffix())
		if err := vfs.OS.Rename(dest, old); err != nil {
			return errors.Wrapf(err, "move the earlier backup %s aside", dest)
		}
	} else if err := vfs.OS.Remove(dest); err != nil && !vfs.IsNotExist(err) {
		return errors.Wrapf(err, "remove the empty %s", dest)
	}
	if err := vfs.OS.Rename(tmp, dest); err != nil {
		if old != "" {
			err = errors.CombineErrors(err, vfs.OS.Rename(old, dest))
		}
		return errors.Wrapf(err, "rename the backup to %s", dest)
	}
	if err := vfs.OS.SyncDir(parent); err != nil {
		return errors.Wrapf(err, "sync %s", parent)
	}
	if old != "" {
		return errors.Wrapf(vfs.RemoveAll(vfs.OS, old), "remove the earlier backup, moved to %s", old)
	}
	return nil
}

func randomSuffix() string {
	var r [6]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}
