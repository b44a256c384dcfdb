package backup

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/artifacts"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// ManifestName is the manifest a backup writes last, in its data
// directory: what it holds, with sizes and digests.
const ManifestName = "backup.json"

// Manifest describes a backup: every file with its size and digest,
// and each rollout's last seq and frame.
type Manifest struct {
	Format      int       `json:"format"`
	WorkspaceID string    `json:"workspace_id"`
	Source      string    `json:"source"` // the workspace backed up
	Created     time.Time `json:"created"`
	Files       []File    `json:"files"`
	Rollouts    []Rollout `json:"rollouts"`
}

// File is one file of a backup, relative to its data directory.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// ModTime is the source file's (artifacts: changed ones are copied
	// again).
	ModTime time.Time `json:"mod_time,omitzero"`
}

// Rollout is one rollout of a backup: copied up to a frame boundary
// that was durable when the backup reached it.
type Rollout struct {
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

// Options qualify a backup. The zero value works.
type Options struct {
	// Progress, if set, is called after each file is copied, with its path
	// in the data directory. An error it returns stops the backup there;
	// the next run into the same destination finishes it.
	Progress func(rel string) error
}

// Errors a caller branches on with errors.Is.
var (
	// ErrNotABackup is returned when a backup's destination holds
	// something that is not a backup of this workspace.
	ErrNotABackup = errors.New("backup: not a backup of this workspace")
	// ErrRestoreTarget is returned when a restore's target exists and is
	// not an empty directory.
	ErrRestoreTarget = errors.New("backup: restore target is not empty")
)

// Workspace says where a workspace is.
type Workspace struct {
	ID      string // the workspace id (workspace.json)
	Path    string // its directory, absolute
	DataDir string // the data directory's name in it (".craft")
	// FS is the file system the workspace is on, and the one a backup of
	// it is written to. Default: vfs.OS.
	FS vfs.FS
}

// fsOf is fsys, or vfs.OS if it is nil.
func fsOf(fsys vfs.FS) vfs.FS {
	if fsys == nil {
		return vfs.OS
	}
	return fsys
}

// Root is the absolute data directory.
func (w Workspace) Root() string { return filepath.Join(w.Path, w.DataDir) }

// Source is what a backup needs of an open workspace.
type Source interface {
	Workspace() Workspace
	// DurableEnd is how far this process knows the rollout of thread, at
	// rel in the data directory, durable; ok false if it does not write
	// it (the backup then syncs the file and copies what it holds).
	DurableEnd(thread, rel string) (end int64, ok bool)
	// HasThread reports whether the workspace still has the thread.
	HasThread(thread string) bool
	// Appends counts the frames this process has acknowledged.
	Appends() uint64
	// CopyState writes a consistent copy of state.db, business state
	// included, at path.
	CopyState(ctx context.Context, path string) error
}

// Report says what a backup did.
type Report struct {
	Dest        string        `json:"dest"`
	Threads     int           `json:"threads"`
	Incremental bool          `json:"incremental"` // it continued an earlier backup
	BytesCopied int64         `json:"bytes_copied"`
	BytesTotal  int64         `json:"bytes_total"`
	Elapsed     time.Duration `json:"elapsed"`
}

const backupFormat = 1

// Run copies the workspace into dest while hosts go on writing: each
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
func Run(ctx context.Context, src Source, dest string, o Options) (Report, error) {
	start := time.Now()
	ws := src.Workspace()
	fsys := fsOf(ws.FS)
	abs, err := filepath.Abs(dest)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Dest: abs}
	if insideWorkspace(fsys, ws, abs) {
		return rep, errors.Wrapf(ErrNotABackup, "%s is inside the workspace %s", abs, ws.Path)
	}
	data := filepath.Join(abs, ws.DataDir)
	prev, err := readManifest(fsys, ws, abs, data)
	if err != nil {
		return rep, err
	}
	// One backup at a time into a destination.
	if err := fsys.MkdirAll(data); err != nil {
		return rep, errors.Wrapf(err, "backup: create %s", data)
	}
	lock, err := lockBackup(fsys, data)
	if err != nil {
		return rep, errors.Wrap(err, "backup: lock")
	}
	defer lock.Close()
	if err := lock.Lock(); err != nil {
		return rep, errors.WithHint(errors.Wrapf(err, "backup into %s", abs), "another backup into it is running")
	}
	rep.Incremental = prev != nil
	m := &Manifest{Format: backupFormat, WorkspaceID: ws.ID, Source: ws.Path, Created: time.Now().UTC()}
	b := &run{src: src, fs: fsys, root: ws.Root(), ctx: ctx, data: data, prev: prev, m: m, rep: &rep, o: o}
	for _, d := range []string{rollout.ActiveDir, rollout.ArchivedDir} {
		if err := fsys.MkdirAll(filepath.Join(data, d)); err != nil {
			return rep, errors.Wrapf(err, "backup: create %s", data)
		}
	}
	// workspace.json first: it marks the destination as this workspace's
	// backup, so that a run interrupted before its manifest is finished
	// by the next one, not refused.
	if err := b.copyWhole("workspace.json", filepath.Join(ws.Root(), "workspace.json"), time.Time{}); err != nil {
		return rep, err
	}
	// Durably, before any copy that is not scaffolding: else a power cut
	// could keep a directory made for a copy and take workspace.json's
	// name, and the next run would refuse the destination.
	if err := b.syncChanged(); err != nil {
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
	// (deleted threads, collected artifacts, the old name of a moved
	// rollout) goes, and what this run (or one interrupted before it)
	// kept of the previous backup while it replaced it.
	if prev != nil {
		now := map[string]bool{}
		for _, f := range m.Files {
			now[f.Path] = true
		}
		for _, f := range prev.Files {
			if !filepath.IsLocal(filepath.FromSlash(f.Path)) {
				continue
			}
			path := filepath.Join(data, filepath.FromSlash(f.Path))
			if !now[f.Path] {
				_ = fsys.Remove(path)
			}
			_ = fsys.Remove(path + prevSuffix)
		}
	}
	rep.Threads = len(m.Rollouts)
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// lockBackup opens the lock file of the backup whose data directory is
// data, making it if it is not there.
func lockBackup(fsys vfs.FS, data string) (vfs.File, error) {
	path := filepath.Join(data, "backup.lock")
	if f, err := fsys.Create(path); err == nil {
		_ = f.Close()
	}
	return fsys.OpenRW(path)
}

// evalLinks is path with its symbolic links resolved, on the operating
// system's file system; on another (MemFS has no links) it is path, if it
// exists.
func evalLinks(fsys vfs.FS, path string) (string, error) {
	if fsys == vfs.OS {
		return filepath.EvalSymlinks(path)
	}
	if _, err := fsys.Lstat(path); err != nil {
		return "", err
	}
	return filepath.Clean(path), nil
}

// resolved is path with the symbolic links of its deepest existing
// ancestor resolved (the rest does not exist yet).
func resolved(fsys vfs.FS, path string) string {
	rest := ""
	for d := path; ; d = filepath.Dir(d) {
		if r, err := evalLinks(fsys, d); err == nil {
			return filepath.Join(r, rest)
		}
		if filepath.Dir(d) == d {
			return path
		}
		rest = filepath.Join(filepath.Base(d), rest)
	}
}

// insideWorkspace reports whether path is the workspace or inside it,
// through symbolic links too.
func insideWorkspace(fsys vfs.FS, w Workspace, path string) bool {
	ws, err := evalLinks(fsys, w.Path)
	if err != nil {
		ws = w.Path
	}
	// The destination may not exist yet: resolve what of it does.
	if p := resolved(fsys, path); within(p, ws) {
		return true
	}
	if fsys != vfs.OS {
		return false
	}
	a, err1 := os.Stat(filepath.Join(path, w.DataDir))
	b, err2 := os.Stat(w.Root())
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// onlyScaffolding reports whether dest holds nothing but what a backup
// makes before it copies anything: the data directory, its lock, its
// empty thread directories, and the temporary file of its first copy
// (workspace.json's: a process killed while it wrote it leaves it).
func onlyScaffolding(fsys vfs.FS, dest, data string) bool {
	var walk func(dir string) bool
	walk = func(dir string) bool {
		names, err := fsys.ReadDir(dir)
		if err != nil {
			return false
		}
		for _, n := range names {
			path := filepath.Join(dir, n)
			info, err := fsys.Lstat(path)
			switch {
			case err != nil:
				return false
			case info.Dir && (path == data || within(path, filepath.Join(data, "threads"))):
				if !walk(path) {
					return false
				}
			case path == filepath.Join(data, "backup.lock"), dir == data && strings.HasSuffix(n, tmpSuffix):
			default:
				return false
			}
		}
		return true
	}
	return walk(dest)
}

// validManifest checks that every path a manifest names stays in the
// backup and has the shape it should.
func validManifest(m *Manifest) bool {
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

// maxManifest bounds the manifest a backup reads: some millions of
// files.
const maxManifest = 1 << 30

// readManifest returns dest's manifest; nil for an empty or absent dest;
// ErrNotABackup for anything else.
func readManifest(fsys vfs.FS, w Workspace, dest, data string) (*Manifest, error) {
	ents, err := fsys.ReadDir(dest)
	if vfs.IsNotExist(err) || err == nil && len(ents) == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, errors.Wrapf(err, "backup: read %s", dest)
	}
	b, err := vfs.ReadFile(fsys, filepath.Join(data, ManifestName), maxManifest)
	if vfs.IsNotExist(err) {
		if onlyScaffolding(fsys, dest, data) {
			return nil, nil // a first backup interrupted before it copied anything
		}
		// A first backup interrupted before its manifest: the copies are
		// made again whole.
		var ws struct {
			WorkspaceID string `json:"workspace_id"`
		}
		if b, err := vfs.ReadFile(fsys, filepath.Join(data, "workspace.json"), 1<<20); err == nil && json.Unmarshal(b, &ws) == nil && ws.WorkspaceID == w.ID {
			return &Manifest{}, nil
		}
		return nil, errors.WithHint(errors.Wrapf(ErrNotABackup, "%s is not empty and holds no %s", dest, ManifestName),
			"back up into an empty directory, or into an earlier backup of this workspace")
	}
	if err != nil {
		return nil, errors.Wrapf(err, "backup: read the manifest of %s", dest)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil || m.Format != backupFormat || !validManifest(&m) {
		return nil, errors.Wrapf(ErrNotABackup, "%s: its manifest is unreadable, of another format, or names paths outside the backup", dest)
	}
	if m.WorkspaceID != w.ID {
		return nil, errors.Wrapf(ErrNotABackup, "%s is a backup of workspace %s, not %s", dest, m.WorkspaceID, w.ID)
	}
	return &m, nil
}

type run struct {
	src  Source
	fs   vfs.FS // the workspace's, and the backup's
	root string // the workspace's data directory
	ctx  context.Context
	data string
	prev *Manifest
	m    *Manifest
	rep  *Report
	o    Options

	prevFiles map[string]File // the previous manifest's, by path
	// dirty are the directories whose entries this run changed (a file
	// renamed into place, a directory made): synced before the manifest,
	// which must never name a copy a power cut could take away.
	dirty map[string]bool
}

func (b *run) done(rel string) error {
	if err := b.ctx.Err(); err != nil {
		return err
	}
	if b.o.Progress != nil {
		return b.o.Progress(rel)
	}
	return nil
}

// changed records that dir's entries changed, and its parents' up to the
// destination (a directory made there).
func (b *run) changed(dir string) {
	if b.dirty == nil {
		b.dirty = map[string]bool{}
	}
	top := filepath.Dir(b.data)
	for d := filepath.Clean(dir); !b.dirty[d]; d = filepath.Dir(d) {
		b.dirty[d] = true
		if d == top || d == filepath.Dir(d) {
			break
		}
	}
}

// syncChanged syncs every directory changed, deepest first.
func (b *run) syncChanged() error {
	dirs := make([]string, 0, len(b.dirty))
	for d := range b.dirty {
		dirs = append(dirs, d)
	}
	slices.SortFunc(dirs, func(x, y string) int { return len(y) - len(x) })
	for _, d := range dirs {
		if err := b.fs.SyncDir(d); err != nil {
			return errors.Wrapf(err, "backup: sync %s", d)
		}
	}
	b.dirty = nil
	return nil
}

// rollouts copies every rollout, active and archived.
func (b *run) rollouts() error {
	// By path; and by thread, so that a rollout archived or restored since
	// the last backup is moved in the backup too, and continued there.
	byPath, byThread := map[string]Rollout{}, map[string]Rollout{}
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
		names, err := b.fs.ReadDir(filepath.Join(b.root, dir))
		if err != nil && !vfs.IsNotExist(err) {
			return errors.Wrap(err, "backup")
		}
		for _, name := range names {
			id, ext, _ := strings.Cut(name, ".")
			if rollout.ValidateThreadID(id) != nil {
				continue
			}
			if info, err := b.fs.Lstat(filepath.Join(b.root, dir, name)); err != nil || !info.Regular {
				continue // not a file, or gone since the listing
			}
			rel := dir + "/" + name
			switch "." + ext {
			case rollout.RolloutExt:
				p, ok := byPath[rel]
				pf, _ := b.prevFile(rel)
				if t := byThread[id]; !ok && t.Path != "" && t.Path != rel {
					// Moved since: the copy too, if it is there and nothing
					// is where it goes. Linked, not renamed: the previous
					// manifest names the old path until this run's is
					// durable, and the old name goes after it.
					from, to := filepath.Join(b.data, filepath.FromSlash(t.Path)), filepath.Join(b.data, filepath.FromSlash(rel))
					if _, err := b.fs.Lstat(to); vfs.IsNotExist(err) {
						if err := b.fs.Link(from, to); err == nil {
							b.changed(filepath.Dir(to))
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
				} else if err := b.copyWhole(rel, filepath.Join(b.root, filepath.FromSlash(rel)), time.Time{}); err != nil {
					return err
				}
				b.m.Rollouts = append(b.m.Rollouts, Rollout{Thread: id, Path: rel})
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
		if !b.src.HasThread(id) {
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
func (b *run) prevFile(rel string) (File, bool) {
	if b.prevFiles == nil {
		b.prevFiles = map[string]File{}
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
// previous manifest says (a damaged or changed copy is made again); a
// rollout's copy may go on past it.
func (b *run) copyMatches(rel string, f File) bool {
	return mismatch(b.fs, filepath.Join(b.data, filepath.FromSlash(rel)), f) == nil
}

// keepPrevious keeps the copy of rel the previous manifest names, before
// a new copy (at dst) replaces it whole: at dst+prevSuffix, until this
// run's manifest is durable. Verify and Restore read it there meanwhile,
// so a run that fails or is cut by a power cut before its manifest leaves
// the previous backup whole.
func (b *run) keepPrevious(rel, dst string) error {
	f, ok := b.prevFile(rel)
	if !ok {
		return nil
	}
	if mismatch(b.fs, dst+prevSuffix, f) == nil {
		return nil // kept by a run interrupted since that manifest
	}
	if err := b.fs.Rename(dst, dst+prevSuffix); err != nil && !vfs.IsNotExist(err) {
		return err
	}
	return nil
}

// rollout copies one rollout up to its durable frame boundary, from where
// the previous copy (prev, its file pf) ended when that copy is intact;
// false if the rollout was gone by then (moved or deleted since the
// listing).
func (b *run) rollout(id, rel string, prev Rollout, pf File) (bool, error) {
	src := filepath.Join(b.root, filepath.FromSlash(rel))
	f, err := b.fs.Open(src)
	if vfs.IsNotExist(err) {
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
	entry := Rollout{Thread: id, Path: rel, Size: end, LastSeq: last.Seq + uint64(last.Count) - 1, LastFrame: last.off, FrameCRC: last.DataCRC, FileID: fh.FileID}
	if end == from && from > 0 {
		entry = prev
	}
	dst := filepath.Join(b.data, filepath.FromSlash(rel))
	n, err := b.copyRange(f, rel, dst, from, end)
	if err != nil {
		return false, errors.Wrapf(err, "backup %s", rel)
	}
	b.rep.BytesCopied += n
	b.rep.BytesTotal += end
	sum, err := fileDigest(b.fs, dst)
	if err != nil {
		return false, err
	}
	b.m.Files = append(b.m.Files, File{Path: rel, Size: end, SHA256: sum})
	b.m.Rollouts = append(b.m.Rollouts, entry)
	return true, b.done(rel)
}

// durableEnd is how far the rollout is durable now: this DB's
// acknowledged end for a thread it writes, else all of it once synced.
func (b *run) durableEnd(id, rel string, f vfs.File) (int64, error) {
	if end, ok := b.src.DurableEnd(id, rel); ok {
		return end, nil
	}
	size, err := f.Size()
	if err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, errors.Wrapf(err, "backup: sync %s", rel)
	}
	return size, nil
}

type frameAt struct {
	rollout.FrameHeader
	off int64
}

// lastFrame reads the whole, valid frames from 'from' up to bound and
// returns where the last one ends (from itself if there are none: then
// last is the previous copy's).
func lastFrame(f vfs.File, rel string, from, bound int64, prev Rollout) (int64, frameAt, error) {
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

// copyRange makes dst (the copy of rel) hold src's bytes [0, end),
// copying [from, end) onto the first from bytes dst holds already (from
// 0: a new file, put in place by rename). dst is synced.
func (b *run) copyRange(src io.ReaderAt, rel, dst string, from, end int64) (int64, error) {
	if from == 0 {
		tmp := dst + tmpSuffix
		_ = b.fs.Remove(tmp) // of an interrupted run
		out, err := b.fs.Create(tmp)
		if err != nil {
			return 0, err
		}
		n, err := b.copy(out, tmp, src, 0, end)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = b.keepPrevious(rel, dst)
		}
		if err == nil {
			err = b.fs.Rename(tmp, dst)
		}
		if err != nil {
			_ = b.fs.Remove(tmp)
		}
		b.changed(filepath.Dir(dst))
		return n, err
	}
	// Appended in place: the previous manifest's copy is the first from
	// bytes, which stay as they are (Verify reads a rollout's copy that far).
	out, err := b.fs.OpenRW(dst)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	// What an interrupted run appended past the last manifest goes.
	if err := out.Truncate(from); err != nil {
		return 0, err
	}
	return b.copy(out, dst, src, from, end)
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

// tmpSuffix names the temporary file a copy is made in before it is
// renamed into place.
const tmpSuffix = ".backup-tmp"

// copy copies src's [from, end) to out (at path) at the same offsets and
// syncs it.
func (b *run) copy(out vfs.File, path string, src io.ReaderAt, from, end int64) (int64, error) {
	buf := make([]byte, min(backupChunk, max(end-from, 0))) // small files are most artifacts
	var n, unsynced int64
	frames := b.src.Appends()
	for off := from; off < end; {
		if err := b.ctx.Err(); err != nil {
			return n, err
		}
		t0 := time.Now()
		k := min(int64(len(buf)), end-off)
		if m, err := src.ReadAt(buf[:k], off); m < int(k) {
			if err == nil || err == io.EOF {
				err = errors.Newf("the source ends at %d, before %d", off+int64(m), end)
			}
			return n, err
		}
		if m, err := out.WriteAt(buf[:k], off); err != nil || m < int(k) {
			return n, vfs.WriteError(path, err)
		}
		off, n, unsynced = off+k, n+k, unsynced+k
		if unsynced >= backupSyncEvery {
			if err := out.Sync(); err != nil {
				return n, vfs.WithPath(err, "sync %s", path)
			}
			unsynced = 0
		}
		if now := b.src.Appends(); now != frames {
			frames = now
			want := time.Duration(float64(k) / backupPacedRate * float64(time.Second))
			if d := want - time.Since(t0); d > 0 {
				time.Sleep(d)
			}
		}
	}
	if err := out.Sync(); err != nil {
		return n, vfs.WithPath(err, "sync %s", path)
	}
	return n, nil
}

// stateDB copies state.db (VACUUM INTO: consistent, business state
// included). The search index is not copied: Open of the backup makes it
// anew.
//
// SQLite writes the copy, and SQLite knows only the operating system's
// files: on vfs.OS it writes it in the destination, synced and renamed
// into place through the FS; on another FS (MemFS: tests, the crash
// harness) into a temporary file on the real disk, then copied in
// through the FS like any other file.
func (b *run) stateDB() error {
	dst := filepath.Join(b.data, "state.db")
	tmp := dst + tmpSuffix
	_ = b.fs.Remove(tmp)
	if b.fs == vfs.OS {
		if err := b.src.CopyState(b.ctx, tmp); err != nil {
			return errors.Wrap(err, "backup")
		}
		if err := b.syncFile(tmp); err != nil {
			return err
		}
	} else if err := b.stateThroughFS(tmp); err != nil {
		return err
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		_ = b.fs.Remove(dst + suffix) // of a state.db opened in the backup since
	}
	if err := b.keepPrevious("state.db", dst); err != nil {
		return errors.Wrap(err, "backup: state.db")
	}
	if err := b.fs.Rename(tmp, dst); err != nil {
		return errors.Wrap(err, "backup")
	}
	b.changed(b.data)
	size, err := b.fs.Stat(dst)
	if err != nil {
		return err
	}
	sum, err := fileDigest(b.fs, dst)
	if err != nil {
		return err
	}
	b.rep.BytesCopied += size
	b.rep.BytesTotal += size
	b.m.Files = append(b.m.Files, File{Path: "state.db", Size: size, SHA256: sum})
	return b.done("state.db")
}

// stateThroughFS has SQLite copy state.db to the real disk and copies
// that into tmp through the FS, synced.
func (b *run) stateThroughFS(tmp string) error {
	dir, err := os.MkdirTemp("", "rolloutdb-backup-")
	if err != nil {
		return errors.Wrap(err, "backup: state.db")
	}
	defer os.RemoveAll(dir)
	real := filepath.Join(dir, "state.db")
	if err := b.src.CopyState(b.ctx, real); err != nil {
		return errors.Wrap(err, "backup")
	}
	in, err := os.Open(real)
	if err != nil {
		return errors.Wrap(err, "backup: state.db")
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return errors.Wrap(err, "backup: state.db")
	}
	out, err := b.fs.Create(tmp)
	if err != nil {
		return errors.Wrap(err, "backup: state.db")
	}
	_, err = b.copy(out, tmp, in, 0, st.Size())
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = b.fs.Remove(tmp)
		return errors.Wrap(err, "backup: state.db")
	}
	return nil
}

// artifacts copies the artifact trees, new or changed files only.
func (b *run) artifacts() error {
	prev := map[string]File{}
	if b.prev != nil {
		for _, f := range b.prev.Files {
			prev[f.Path] = f
		}
	}
	for _, top := range []string{artifacts.ToolResultsDir, artifacts.AttachmentsDir, artifacts.TerminalsDir} {
		// Regular files only, links not followed (vfs.Walk); one removed
		// since the listing (gc, a terminal's cleanup) is passed over.
		err := vfs.Walk(b.fs, filepath.Join(b.root, top), func(path string, info vfs.Info) error {
			r, _ := filepath.Rel(b.root, path)
			rel := filepath.ToSlash(r)
			if p, ok := prev[rel]; ok && p.Size == info.Size && p.ModTime.Equal(info.ModTime.UTC()) && b.copyMatches(rel, p) {
				b.m.Files = append(b.m.Files, p)
				b.rep.BytesTotal += p.Size
				return nil
			}
			return b.copyWhole(rel, path, info.ModTime.UTC())
		})
		if err != nil {
			return errors.Wrap(err, "backup: artifacts")
		}
	}
	return nil
}

// copyWhole copies one file whole into the backup.
func (b *run) copyWhole(rel, src string, mod time.Time) error {
	f, err := b.fs.Open(src)
	if vfs.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return errors.Wrap(err, "backup")
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return err
	}
	dst := filepath.Join(b.data, filepath.FromSlash(rel))
	if err := b.fs.MkdirAll(filepath.Dir(dst)); err != nil {
		return err
	}
	n, err := b.copyRange(f, rel, dst, 0, size)
	if err != nil {
		return errors.Wrapf(err, "backup %s", rel)
	}
	sum, err := fileDigest(b.fs, dst)
	if err != nil {
		return err
	}
	b.rep.BytesCopied += n
	b.rep.BytesTotal += n
	b.m.Files = append(b.m.Files, File{Path: rel, Size: n, SHA256: sum, ModTime: mod})
	return b.done(rel)
}

func (b *run) writeManifest() error {
	if err := b.syncChanged(); err != nil {
		return err
	}
	slices.SortFunc(b.m.Files, func(x, y File) int { return strings.Compare(x.Path, y.Path) })
	slices.SortFunc(b.m.Rollouts, func(x, y Rollout) int { return strings.Compare(x.Path, y.Path) })
	out, err := json.MarshalIndent(b.m, "", "  ")
	if err != nil {
		return err
	}
	// A temporary file, synced, renamed over the last manifest, and the
	// data directory synced: a crash leaves the old manifest or this one.
	if err := vfs.WriteFileAtomic(b.fs, filepath.Join(b.data, ManifestName), out); err != nil {
		return errors.Wrap(err, "backup: manifest")
	}
	return nil
}

// syncFile syncs the file at path.
func (b *run) syncFile(path string) error {
	f, err := b.fs.OpenRW(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	return errors.CombineErrors(err, f.Close())
}
