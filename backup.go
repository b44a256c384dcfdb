package rolloutdb

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// BackupManifestName is the manifest a backup writes last, in its data
// directory: what it holds, with sizes and digests.
const BackupManifestName = "backup.json"

// BackupManifest describes a backup: every file with its size and digest,
// and each rollout's last seq and frame.
type BackupManifest struct {
	Format      int             `json:"format"`
	WorkspaceID string          `json:"workspace_id"`
	Source      string          `json:"source"` // the workspace backed up
	Created     time.Time       `json:"created"`
	Files       []BackupFile    `json:"files"`
	Rollouts    []BackupRollout `json:"rollouts"`
}

// BackupFile is one file of a backup, relative to its data directory.
type BackupFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// ModTime is the source file's (artifacts: changed ones are copied
	// again).
	ModTime time.Time `json:"mod_time,omitzero"`
}

// BackupRollout is one rollout of a backup: copied up to a frame boundary
// that was durable when the backup reached it.
type BackupRollout struct {
	Thread  string `json:"thread"`
	Path    string `json:"path"` // relative to the data directory
	Size    int64  `json:"size"`
	LastSeq uint64 `json:"last_seq"`
	// LastFrame is the offset of the last frame copied, and FrameCRC its
	// payload checksum: an incremental backup copies on from Size only if
	// the source still holds that frame there.
	LastFrame int64  `json:"last_frame"`
	FrameCRC  uint32 `json:"frame_crc"`
	// FileID is the rollout's file id (a repair writes a new one: the
	// copy is then made again whole).
	FileID uint64 `json:"file_id,omitempty"`
}

// BackupOptions qualify a backup.
type BackupOptions struct {
	// afterFile, in tests, is called after each file is copied; an error
	// stops the backup there (an interrupted run).
	afterFile func(rel string) error
}

// BackupReport says what a backup did.
type BackupReport struct {
	Dest        string        `json:"dest"`
	Threads     int           `json:"threads"`
	Incremental bool          `json:"incremental"` // it continued an earlier backup
	BytesCopied int64         `json:"bytes_copied"`
	BytesTotal  int64         `json:"bytes_total"`
	Elapsed     time.Duration `json:"elapsed"`
}

const backupFormat = 1

// Backup copies the workspace into dest while hosts go on writing: each
// rollout up to a frame boundary that was durable when the backup reached
// it (this DB's acknowledged end for a thread it writes; for another
// process's, what a sync of the file made durable), state.db with its
// business state (SQLite's VACUUM INTO, one read transaction), the
// artifacts, workspace.json, and last a manifest (backup.json) with every
// file's size and digest. dest is a workspace: Open it, or copy it
// anywhere and Open it there.
//
// For a thread another process writes, the copy ends where the file did
// when the backup synced it: a frame that process had written and then
// failed to make durable (its journal's write failed) can be in the copy,
// as it can survive a crash of that process; it is never one of a torn
// tail (whole, checked frames only).
//
// Into a destination holding an earlier backup of this workspace, Backup
// is incremental: a rollout whose source still holds the last frame
// copied gets only its new bytes, an artifact only if it changed. An
// interrupted backup is finished by running it again. A destination that
// holds anything else is refused (ErrNotABackup).
func (db *DB) Backup(ctx context.Context, dest string, o BackupOptions) (BackupReport, error) {
	start := time.Now()
	if db.fs != vfs.OS {
		return BackupReport{}, errors.New("rolloutdb: backup needs the operating system's file system")
	}
	abs, err := filepath.Abs(dest)
	if err != nil {
		return BackupReport{}, err
	}
	rep := BackupReport{Dest: abs}
	if db.insideWorkspace(abs) {
		return rep, errors.Wrapf(ErrNotABackup, "%s is inside the workspace %s", abs, db.workspace)
	}
	data := filepath.Join(abs, db.opts.DataDir)
	prev, err := db.readBackupManifest(abs, data)
	if err != nil {
		return rep, err
	}
	// One backup at a time into a destination.
	if err := os.MkdirAll(data, 0o755); err != nil {
		return rep, errors.Wrapf(err, "backup: create %s", data)
	}
	lockPath := filepath.Join(data, "backup.lock")
	if f, err := vfs.OS.Create(lockPath); err == nil {
		_ = f.Close()
	}
	lock, err := vfs.OS.OpenRW(lockPath)
	if err != nil {
		return rep, errors.Wrap(err, "backup: lock")
	}
	defer lock.Close()
	if err := lock.Lock(); err != nil {
		return rep, errors.WithHint(errors.Wrapf(err, "backup into %s", abs), "another backup into it is running")
	}
	rep.Incremental = prev != nil
	m := &BackupManifest{Format: backupFormat, WorkspaceID: db.id, Source: db.workspace, Created: time.Now().UTC()}
	b := &backupRun{db: db, ctx: ctx, data: data, prev: prev, m: m, rep: &rep, o: o}
	for _, d := range []string{rollout.ActiveDir, rollout.ArchivedDir} {
		if err := os.MkdirAll(filepath.Join(data, d), 0o755); err != nil {
			return rep, errors.Wrapf(err, "backup: create %s", data)
		}
	}
	// workspace.json first: it marks the destination as this workspace's
	// backup, so that a run interrupted before its manifest is finished
	// by the next one, not refused.
	if err := b.copyWhole("workspace.json", filepath.Join(db.root, "workspace.json"), time.Time{}); err != nil {
		return rep, err
	}
	if err := b.rollouts(); err != nil {
		return rep, err
	}
	if err := b.stateDB(); err != nil {
		return rep, err
	}
	if err := b.artifacts(); err != nil {
		return rep, err
	}
	if err := b.writeManifest(); err != nil {
		return rep, err
	}
	// What the previous backup held and the workspace no longer does
	// (deleted threads, collected artifacts) goes.
	if prev != nil {
		now := map[string]bool{}
		for _, f := range m.Files {
			now[f.Path] = true
		}
		for _, f := range prev.Files {
			if !now[f.Path] && filepath.IsLocal(filepath.FromSlash(f.Path)) {
				_ = os.Remove(filepath.Join(data, filepath.FromSlash(f.Path)))
			}
		}
	}
	rep.Threads = len(m.Rollouts)
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// insideWorkspace reports whether path is the workspace or inside it,
// through symbolic links too.
func (db *DB) insideWorkspace(path string) bool {
	ws, err := filepath.EvalSymlinks(db.workspace)
	if err != nil {
		ws = db.workspace
	}
	// The destination may not exist yet: resolve what of it does.
	p, rest := path, ""
	for {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = filepath.Join(r, rest)
			break
		}
		parent := filepath.Dir(p)
		if parent == p {
			p = path
			break
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
	if p == ws || strings.HasPrefix(p, ws+string(filepath.Separator)) {
		return true
	}
	a, err1 := os.Stat(filepath.Join(path, db.opts.DataDir))
	b, err2 := os.Stat(db.root)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// onlyScaffolding reports whether dest holds nothing but what a backup
// makes before it copies anything: the data directory, its lock and its
// empty thread directories.
func onlyScaffolding(dest, data string) bool {
	ok := true
	err := filepath.WalkDir(dest, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir() && (path == dest || path == data || strings.HasPrefix(path, filepath.Join(data, "threads"))):
		case path == filepath.Join(data, "backup.lock"):
		default:
			ok = false
			return filepath.SkipAll
		}
		return nil
	})
	return err == nil && ok
}

// validManifest checks that every path a manifest names stays in the
// backup and has the shape it should.
func validManifest(m *BackupManifest) bool {
	for _, f := range m.Files {
		if !filepath.IsLocal(filepath.FromSlash(f.Path)) || strings.Contains(f.Path, `\`) {
			return false
		}
	}
	for _, r := range m.Rollouts {
		dir, name := filepath.Split(filepath.FromSlash(r.Path))
		dir = filepath.ToSlash(filepath.Clean(dir))
		if dir != rollout.ActiveDir && dir != rollout.ArchivedDir || rollout.ValidateThreadID(r.Thread) != nil ||
			name != r.Thread+rollout.RolloutExt && name != r.Thread+rollout.RolloutExt+rollout.ColdExt {
			return false
		}
	}
	return true
}

// readBackupManifest returns dest's manifest; nil for an empty or absent
// dest; ErrNotABackup for anything else.
func (db *DB) readBackupManifest(dest, data string) (*BackupManifest, error) {
	ents, err := os.ReadDir(dest)
	if errors.Is(err, fs.ErrNotExist) || err == nil && len(ents) == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, errors.Wrapf(err, "backup: read %s", dest)
	}
	b, err := os.ReadFile(filepath.Join(data, BackupManifestName))
	if errors.Is(err, fs.ErrNotExist) {
		if onlyScaffolding(dest, data) {
			return nil, nil // a first backup interrupted before it copied anything
		}
		if _, serr := os.Stat(filepath.Join(data, "workspace.json")); serr == nil {
			// A first backup interrupted before its manifest: the copies
			// are made again whole.
			var ws workspaceFile
			if b, err := os.ReadFile(filepath.Join(data, "workspace.json")); err == nil && json.Unmarshal(b, &ws) == nil && ws.WorkspaceID == db.id {
				return &BackupManifest{}, nil
			}
		}
		return nil, errors.WithHint(errors.Wrapf(ErrNotABackup, "%s is not empty and holds no %s", dest, BackupManifestName),
			"back up into an empty directory, or into an earlier backup of this workspace")
	}
	if err != nil {
		return nil, errors.Wrapf(err, "backup: read the manifest of %s", dest)
	}
	var m BackupManifest
	if err := json.Unmarshal(b, &m); err != nil || m.Format != backupFormat || !validManifest(&m) {
		return nil, errors.Wrapf(ErrNotABackup, "%s: its manifest is unreadable, of another format, or names paths outside the backup", dest)
	}
	if m.WorkspaceID != db.id {
		return nil, errors.Wrapf(ErrNotABackup, "%s is a backup of workspace %s, not %s", dest, m.WorkspaceID, db.id)
	}
	return &m, nil
}

type backupRun struct {
	db   *DB
	ctx  context.Context
	data string
	prev *BackupManifest
	m    *BackupManifest
	rep  *BackupReport
	o    BackupOptions

	prevFiles map[string]BackupFile // the previous manifest's, by path
}

func (b *backupRun) done(rel string) error {
	if b.o.afterFile != nil {
		return b.o.afterFile(rel)
	}
	return b.ctx.Err()
}

// rollouts copies every rollout, active and archived.
func (b *backupRun) rollouts() error {
	// By path; and by thread, so that a rollout archived or restored since
	// the last backup is moved in the backup too, and continued there.
	byPath, byThread := map[string]BackupRollout{}, map[string]BackupRollout{}
	if b.prev != nil {
		for _, r := range b.prev.Rollouts {
			byPath[r.Path] = r
			if strings.HasSuffix(r.Path, rollout.RolloutExt) {
				byThread[r.Thread] = r
			}
		}
	}
	seen := map[string]bool{}
	for _, dir := range []string{rollout.ActiveDir, rollout.ArchivedDir} {
		ents, err := os.ReadDir(filepath.Join(b.db.root, dir))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return errors.Wrap(err, "backup")
		}
		for _, e := range ents {
			name := e.Name()
			id, ext, _ := strings.Cut(name, ".")
			if !e.Type().IsRegular() || rollout.ValidateThreadID(id) != nil {
				continue
			}
			rel := dir + "/" + name
			switch "." + ext {
			case rollout.RolloutExt:
				p, ok := byPath[rel]
				pf, _ := b.prevFile(rel)
				if t := byThread[id]; !ok && t.Path != "" && t.Path != rel {
					// Moved since: move the copy too, if it is there and
					// nothing is where it goes.
					from, to := filepath.Join(b.data, filepath.FromSlash(t.Path)), filepath.Join(b.data, filepath.FromSlash(rel))
					if _, err := os.Stat(to); errors.Is(err, fs.ErrNotExist) {
						if err := os.Rename(from, to); err == nil {
							pf, _ = b.prevFile(t.Path)
							t.Path, p, pf.Path = rel, t, rel
						}
					}
				}
				copied, err := b.rollout(id, rel, p, pf)
				if err != nil {
					return err
				}
				seen[id] = seen[id] || copied
			case rollout.RolloutExt + rollout.ColdExt:
				// A compressed archived rollout never changes: copied
				// whole the first time, kept after.
				if p, ok := b.prevFile(rel); ok && b.copyMatches(rel, p) {
					b.m.Files = append(b.m.Files, p)
					b.rep.BytesTotal += p.Size
				} else if err := b.copyWhole(rel, filepath.Join(b.db.root, filepath.FromSlash(rel)), time.Time{}); err != nil {
					return err
				}
				b.m.Rollouts = append(b.m.Rollouts, BackupRollout{Thread: id, Path: rel})
				seen[id] = true
			}
		}
	}
	// A thread moved between the two listings (a restore, an archive
	// meanwhile) was in neither: its previous copy stays, as it was,
	// while the workspace still has the thread.
	for id, p := range byThread {
		if seen[id] {
			continue
		}
		if _, err := b.db.rolloutPath(id); err != nil {
			continue // deleted: its copy goes
		}
		if f, ok := b.prevFile(p.Path); ok && b.copyMatches(p.Path, f) {
			b.m.Rollouts = append(b.m.Rollouts, p)
			b.m.Files = append(b.m.Files, f)
			b.rep.BytesTotal += f.Size
		}
	}
	return nil
}

// prevFile is the previous manifest's entry for a file.
func (b *backupRun) prevFile(rel string) (BackupFile, bool) {
	if b.prevFiles == nil {
		b.prevFiles = map[string]BackupFile{}
		if b.prev != nil {
			for _, f := range b.prev.Files {
				b.prevFiles[f.Path] = f
			}
		}
	}
	f, ok := b.prevFiles[rel]
	return f, ok
}

// copyMatches reports whether the backup's copy of rel is still what the
// previous manifest says (a damaged or changed copy is made again).
func (b *backupRun) copyMatches(rel string, f BackupFile) bool {
	path := filepath.Join(b.data, filepath.FromSlash(rel))
	st, err := os.Stat(path)
	if err != nil || st.Size() != f.Size {
		return false
	}
	sum, err := fileDigest(path)
	return err == nil && sum == f.SHA256
}

// rollout copies one rollout up to its durable frame boundary, from where
// the previous copy (prev, its file pf) ended when that copy is intact;
// false if the rollout was gone by then (moved or deleted since the
// listing).
func (b *backupRun) rollout(id, rel string, prev BackupRollout, pf BackupFile) (bool, error) {
	src := filepath.Join(b.db.root, filepath.FromSlash(rel))
	f, err := os.Open(src)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, errors.Wrap(err, "backup")
	}
	defer f.Close()
	bound, err := b.durableEnd(id, rel, f)
	if err != nil {
		return false, err
	}
	hb := make([]byte, rollout.FileHeaderSize)
	if _, err := f.ReadAt(hb, 0); err != nil {
		return false, errors.Wrapf(err, "backup: read %s", rel)
	}
	fh, err := rollout.ParseFileHeader(hb)
	if err != nil {
		return false, errors.Wrapf(err, "backup %s", rel)
	}
	// From the previous copy's end, if the copy is as the manifest says
	// and the source is the same file and still holds the copy's last
	// frame where it was; else from the start.
	from := int64(0)
	if pf.Path == rel && prev.Size > 0 && prev.Size <= bound && prev.FileID == fh.FileID && b.copyMatches(rel, pf) {
		if h, err := rollout.ReadFrameHeader(f, prev.LastFrame); err == nil && h.FileID == fh.FileID && h.Seq+uint64(h.Count)-1 == prev.LastSeq && h.DataCRC == prev.FrameCRC &&
			prev.LastFrame+rollout.FrameHeaderSize+int64(h.Length) == prev.Size {
			from = prev.Size
		}
	}
	// Whole frames only: the last one that ends by bound.
	end, last, err := lastFrame(f, rel, max(from, rollout.FileHeaderSize), bound, prev)
	if err != nil {
		return false, err
	}
	entry := BackupRollout{Thread: id, Path: rel, Size: end, LastSeq: last.Seq + uint64(last.Count) - 1, LastFrame: last.off, FrameCRC: last.DataCRC, FileID: fh.FileID}
	if end == from && from > 0 {
		entry = prev
	}
	dst := filepath.Join(b.data, filepath.FromSlash(rel))
	n, err := b.copyRange(f, dst, from, end)
	if err != nil {
		return false, errors.Wrapf(err, "backup %s", rel)
	}
	b.rep.BytesCopied += n
	b.rep.BytesTotal += end
	sum, err := fileDigest(dst)
	if err != nil {
		return false, err
	}
	b.m.Files = append(b.m.Files, BackupFile{Path: rel, Size: end, SHA256: sum})
	b.m.Rollouts = append(b.m.Rollouts, entry)
	return true, b.done(rel)
}

// durableEnd is how far the rollout is durable now: this DB's
// acknowledged end for a thread it writes, else all of it once synced.
func (b *backupRun) durableEnd(id, rel string, f *os.File) (int64, error) {
	b.db.mu.Lock()
	t := b.db.threads[id]
	b.db.mu.Unlock()
	if t != nil && !t.archived.Load() && strings.HasPrefix(rel, rollout.ActiveDir+"/") {
		return t.hub.durable(), nil
	}
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, errors.Wrapf(err, "backup: sync %s", rel)
	}
	return st.Size(), nil
}

type frameAt struct {
	rollout.FrameHeader
	off int64
}

// lastFrame reads the whole, valid frames from 'from' up to bound and
// returns where the last one ends (from itself if there are none: then
// last is the previous copy's).
func lastFrame(f *os.File, rel string, from, bound int64, prev BackupRollout) (int64, frameAt, error) {
	last := frameAt{off: prev.LastFrame, FrameHeader: rollout.FrameHeader{DataCRC: prev.FrameCRC, Seq: prev.LastSeq, Count: 1}}
	end := from
	r, err := rollout.NewReader(f, bound, rollout.ReaderOptions{Path: rel, StartOffset: from})
	if err != nil {
		return 0, last, errors.Wrapf(err, "backup %s", rel)
	}
	for r.Next() {
		h := r.FrameHeader()
		if r.Record().Seq == h.Seq+uint64(h.Count)-1 {
			last = frameAt{FrameHeader: h, off: r.FrameOffset()}
			end = r.FrameOffset() + rollout.FrameHeaderSize + int64(h.Length)
		}
	}
	if err := r.Err(); err != nil {
		return 0, last, errors.Wrapf(err, "backup %s", rel)
	}
	if from <= rollout.FileHeaderSize && end == from {
		end = 0 // not even a header frame: nothing to copy
	}
	return end, last, nil
}

// copyRange makes dst hold src's bytes [0, end), copying [from, end) onto
// the first from bytes dst holds already (from 0: a new file, put in place
// by rename). dst is synced.
func (b *backupRun) copyRange(src *os.File, dst string, from, end int64) (int64, error) {
	if from == 0 {
		tmp := dst + ".backup-tmp"
		out, err := os.Create(tmp)
		if err != nil {
			return 0, err
		}
		n, err := b.copy(out, src, 0, end)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp, dst)
		}
		if err != nil {
			_ = os.Remove(tmp)
		}
		return n, err
	}
	out, err := os.OpenFile(dst, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	// What an interrupted run appended past the last manifest goes.
	if err := out.Truncate(from); err != nil {
		return 0, err
	}
	return b.copy(out, src, from, end)
}

// Pacing of the copy: the backup shares the disk with the hosts' appends,
// whose every acknowledgement waits for a flush behind what the backup
// wrote. It copies in chunks, syncs every few, and while appends are
// acknowledged it keeps to backupPacedRate.
const (
	backupChunk     = 1 << 20
	backupSyncEvery = 1 << 20
	backupPacedRate = 32 << 20 // bytes/s while appends are acknowledged
)

// copy copies src's [from, end) to out at the same offsets and syncs it.
func (b *backupRun) copy(out *os.File, src *os.File, from, end int64) (int64, error) {
	buf := make([]byte, backupChunk)
	var n, unsynced int64
	frames := b.db.counters.frames.Load()
	for off := from; off < end; {
		if err := b.ctx.Err(); err != nil {
			return n, err
		}
		t0 := time.Now()
		k := min(int64(len(buf)), end-off)
		if _, err := src.ReadAt(buf[:k], off); err != nil {
			return n, err
		}
		if _, err := out.WriteAt(buf[:k], off); err != nil {
			return n, err
		}
		off, n, unsynced = off+k, n+k, unsynced+k
		if unsynced >= backupSyncEvery {
			if err := out.Sync(); err != nil {
				return n, err
			}
			unsynced = 0
		}
		if now := b.db.counters.frames.Load(); now != frames {
			frames = now
			want := time.Duration(float64(k) / backupPacedRate * float64(time.Second))
			if d := want - time.Since(t0); d > 0 {
				time.Sleep(d)
			}
		}
	}
	return n, out.Sync()
}

// stateDB copies state.db (VACUUM INTO: consistent, business state
// included). The search index is not copied: Open of the backup makes it
// anew.
func (b *backupRun) stateDB() error {
	dst := filepath.Join(b.data, "state.db")
	tmp := dst + ".backup-tmp"
	_ = os.Remove(tmp)
	if err := b.db.state.CopyTo(b.ctx, tmp); err != nil {
		return errors.Wrap(err, "backup")
	}
	if err := syncFile(tmp); err != nil {
		return err
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		_ = os.Remove(dst + suffix) // of a state.db opened in the backup since
	}
	if err := os.Rename(tmp, dst); err != nil {
		return errors.Wrap(err, "backup")
	}
	st, err := os.Stat(dst)
	if err != nil {
		return err
	}
	sum, err := fileDigest(dst)
	if err != nil {
		return err
	}
	b.rep.BytesCopied += st.Size()
	b.rep.BytesTotal += st.Size()
	b.m.Files = append(b.m.Files, BackupFile{Path: "state.db", Size: st.Size(), SHA256: sum})
	return b.done("state.db")
}

// artifacts copies the artifact trees, new or changed files only.
func (b *backupRun) artifacts() error {
	prev := map[string]BackupFile{}
	if b.prev != nil {
		for _, f := range b.prev.Files {
			prev[f.Path] = f
		}
	}
	for _, top := range []string{artifacts.ToolResultsDir, artifacts.AttachmentsDir, artifacts.TerminalsDir} {
		root := filepath.Join(b.db.root, top)
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			info, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed since the listing (gc, a terminal's cleanup)
			}
			if err != nil {
				return err
			}
			r, _ := filepath.Rel(b.db.root, path)
			rel := filepath.ToSlash(r)
			if p, ok := prev[rel]; ok && p.Size == info.Size() && p.ModTime.Equal(info.ModTime().UTC()) && b.copyMatches(rel, p) {
				b.m.Files = append(b.m.Files, p)
				b.rep.BytesTotal += p.Size
				return nil
			}
			return b.copyWhole(rel, path, info.ModTime().UTC())
		})
		if err != nil {
			return errors.Wrap(err, "backup: artifacts")
		}
	}
	return nil
}

// copyWhole copies one file whole into the backup.
func (b *backupRun) copyWhole(rel, src string, mod time.Time) error {
	f, err := os.Open(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return errors.Wrap(err, "backup")
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	dst := filepath.Join(b.data, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	n, err := b.copyRange(f, dst, 0, st.Size())
	if err != nil {
		return errors.Wrapf(err, "backup %s", rel)
	}
	sum, err := fileDigest(dst)
	if err != nil {
		return err
	}
	b.rep.BytesCopied += n
	b.rep.BytesTotal += n
	b.m.Files = append(b.m.Files, BackupFile{Path: rel, Size: n, SHA256: sum, ModTime: mod})
	return b.done(rel)
}

func (b *backupRun) writeManifest() error {
	slices.SortFunc(b.m.Files, func(x, y BackupFile) int { return strings.Compare(x.Path, y.Path) })
	slices.SortFunc(b.m.Rollouts, func(x, y BackupRollout) int { return strings.Compare(x.Path, y.Path) })
	out, err := json.MarshalIndent(b.m, "", "  ")
	if err != nil {
		return err
	}
	dst := filepath.Join(b.data, BackupManifestName)
	tmp := dst + ".backup-tmp"
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return errors.Wrap(err, "backup: manifest")
	}
	if err := syncFile(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return errors.Wrap(err, "backup: manifest")
	}
	return vfs.OS.SyncDir(b.data)
}

// VerifyBackup reads every file a backup's manifest lists and checks its
// size and digest; it returns the files that do not match (none: the
// backup is as it was written).
func VerifyBackup(dest string, dataDir string) (bad []string, err error) {
	if dataDir == "" {
		dataDir = ".craft"
	}
	data := filepath.Join(dest, dataDir)
	b, err := os.ReadFile(filepath.Join(data, BackupManifestName))
	if err != nil {
		return nil, errors.Wrapf(ErrNotABackup, "%s: %v", dest, err)
	}
	var m BackupManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, errors.Wrapf(ErrNotABackup, "%s: manifest: %v", dest, err)
	}
	for _, f := range m.Files {
		path := filepath.Join(data, filepath.FromSlash(f.Path))
		if !filepath.IsLocal(filepath.FromSlash(f.Path)) {
			bad = append(bad, f.Path+": leaves the backup")
			continue
		}
		st, err := os.Stat(path)
		if err != nil {
			bad = append(bad, f.Path+": "+err.Error())
			continue
		}
		sum, err := fileDigest(path)
		if err != nil || st.Size() != f.Size || sum != f.SHA256 {
			why := ": size or digest differs"
			if strings.HasSuffix(f.Path, ".db") && !strings.Contains(f.Path, "/") {
				why += " (opening the backup as a workspace changes its SQLite files)"
			}
			bad = append(bad, f.Path+why)
		}
	}
	return bad, nil
}

func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", errors.Wrapf(err, "digest %s", path)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	return errors.CombineErrors(err, f.Close())
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

// RestoreBackup makes a new workspace at target from the backup in dir.
// It checks every file against the manifest first (a backup with a file
// that differs is refused, and nothing is written), copies the files into
// a directory beside target, syncs them, opens the copy once to check it
// (dataDir "" is ".craft"), and only then renames it to target and syncs
// the directories above it: target is either the whole workspace or not
// there. target must not exist, or be an empty directory, and must not be
// inside the backup (nor the backup inside it). Opening the backup as a
// workspace changes its SQLite files (state.db, search.db); those are
// restored as they are then, and the check is that the copy opens with
// its business state, not their digests. Restore from a backup no process
// has open. The manifest is not copied: the restore is a workspace, not a
// backup.
func RestoreBackup(ctx context.Context, dir, target, dataDir string) (RestoreReport, error) {
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
	if _, err := os.Stat(filepath.Join(data, BackupManifestName)); err != nil {
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
	var m BackupManifest
	b, err := os.ReadFile(filepath.Join(data, BackupManifestName))
	if err != nil {
		return rep, errors.Wrapf(ErrNotABackup, "%s: %v", dir, err)
	}
	if err := json.Unmarshal(b, &m); err != nil || !validManifest(&m) {
		return rep, errors.Wrapf(ErrNotABackup, "%s: manifest not readable, or naming paths outside the backup (%v)", dir, err)
	}
	bad, err := VerifyBackup(src, dataDir)
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
		return rep, errors.Newf("rolloutdb: restore of %s refused: %d files differ from its manifest (first: %s)", dir, len(bad), bad[0])
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
	db, err := Open(ctx, tmp, Options{DataDir: dataDir, Host: "restore", NoJournal: true})
	if err != nil {
		return rep, errors.Wrapf(err, "restore %s: the copy does not open", dir)
	}
	st := db.StateReport()
	ids, err := db.ListThreadIDs(ctx)
	rep.Threads = len(ids)
	if err == nil && (st.Corrupt || st.BusinessStateLost) {
		err = errors.Newf("rolloutdb: restore of %s refused: its state.db does not open (%s): its business state would be lost", dir, st.Reason)
	}
	if err == nil && sqlite {
		var ir projection.IntegrityReport
		if ir, err = db.CheckIntegrity(ctx); err == nil && !ir.OK() {
			err = errors.Newf("rolloutdb: restore of %s refused: its state.db changed since the backup and fails SQLite's integrity check: %v", dir, ir)
		}
	}
	if err = errors.CombineErrors(err, db.Close()); err != nil {
		return rep, err
	}
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
