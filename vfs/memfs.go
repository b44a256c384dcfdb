package vfs

import (
	"io"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"
)

// MemFS is an in-memory FS that models what a crash keeps. It exists for
// tests (here and in the packages built on this one) and for the crash
// harness: no test needs root, a special mount or a real power cut.
//
// The model, which is what docs/FORMAT.md assumes of a real disk:
//   - File data written since the file's last Sync may be lost on a crash,
//     in any part: each unsynced write survives whole, not at all, or as a
//     prefix (a torn write); unsynced truncates survive or not.
//   - Synced data survives.
//   - Directory entries (create, link, rename, remove) survive a crash only
//     once the directory was synced. Directories themselves are durable at
//     once when made or removed; a directory renamed is put back under its
//     old name by a crash until its parent (the old one or the new) is
//     synced, as a file's new name would be.
//
// Crash returns the file system as it could be after a power cut; the old
// one fails every later call with ErrCrashed.
type MemFS struct {
	mu      sync.Mutex
	dirs    map[string]*memDir
	crashed bool
	// lineage tells this file system (and what its crashes leave) from
	// another in a DirVersion.
	lineage int64
	// now stamps files' modification times (SetClock).
	now func() time.Time
	// renamed counts the directories with an origin (renamed, their
	// parent not synced since).
	renamed int
}

// SetClock sets the clock that stamps files' modification times (default
// time.Now): a test of an age (a grace period, a retention) moves it.
func (m *MemFS) SetClock(now func() time.Time) {
	m.mu.Lock()
	m.now = now
	m.mu.Unlock()
}

func (m *MemFS) stamp() time.Time {
	if m.now != nil {
		return m.now()
	}
	return time.Now()
}

// ErrCrashed is returned by a MemFS (and its files) after Crash.
var ErrCrashed = errors.New("memfs: file system crashed")

type memDir struct {
	names   map[string]*memInode // current entries
	durable map[string]*memInode // entries as of the last SyncDir
	changes int64                // changes to names (DirVersion)
	// origin is the path this directory had when its parent was last
	// synced, if it was renamed since: where a crash puts it back.
	origin string
}

type memInode struct {
	data    []byte
	synced  []byte   // content as of the last Sync
	pending []memOp  // unsynced changes, in order
	locked  *memFile // holder of the lock
	// lost are ranges a failed Sync dropped (LoseSync): marked clean, they
	// are never written by a later Sync.
	lost    [][2]int64
	modTime time.Time
}

type memOp struct {
	off      int64
	data     []byte
	truncate bool // truncate to off
}

type memFile struct {
	fs       *MemFS
	ino      *memInode
	name     string
	readOnly bool
	closed   bool
}

// NewMemFS returns an empty in-memory file system.
func NewMemFS() *MemFS {
	return &MemFS{dirs: map[string]*memDir{"/": newMemDir(), ".": newMemDir()}, lineage: rand.Int64()}
}

func newMemDir() *memDir {
	return &memDir{names: map[string]*memInode{}, durable: map[string]*memInode{}}
}

func (m *MemFS) lookup(name string) (*memDir, string, error) {
	if m.crashed {
		return nil, "", ErrCrashed
	}
	name = filepath.Clean(name)
	d, ok := m.dirs[filepath.Dir(name)]
	if !ok {
		return nil, "", &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return d, filepath.Base(name), nil
}

// Create implements FS.
func (m *MemFS) Create(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.lookup(name)
	if err != nil {
		return nil, err
	}
	if _, ok := d.names[base]; ok {
		return nil, &fs.PathError{Op: "create", Path: name, Err: fs.ErrExist}
	}
	ino := &memInode{modTime: m.stamp()}
	d.names[base] = ino
	d.changes++
	return &memFile{fs: m, ino: ino, name: name}, nil
}

func (m *MemFS) open(name string, ro bool) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.lookup(name)
	if err != nil {
		return nil, err
	}
	ino, ok := d.names[base]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &memFile{fs: m, ino: ino, name: name, readOnly: ro}, nil
}

// Open implements FS.
func (m *MemFS) Open(name string) (File, error) { return m.open(name, true) }

// OpenRW implements FS.
func (m *MemFS) OpenRW(name string) (File, error) { return m.open(name, false) }

// Link implements FS.
func (m *MemFS) Link(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	od, ob, err := m.lookup(oldname)
	if err != nil {
		return err
	}
	nd, nb, err := m.lookup(newname)
	if err != nil {
		return err
	}
	ino, ok := od.names[ob]
	if !ok {
		return &fs.PathError{Op: "link", Path: oldname, Err: fs.ErrNotExist}
	}
	if _, ok := nd.names[nb]; ok {
		return &fs.PathError{Op: "link", Path: newname, Err: fs.ErrExist}
	}
	nd.names[nb] = ino
	nd.changes++
	return nil
}

// Rename implements FS. A directory is renamed with all it holds, to a
// name that does not exist.
func (m *MemFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d, ok := m.dirs[filepath.Clean(oldname)]; ok && !m.crashed {
		return m.renameDir(filepath.Clean(oldname), filepath.Clean(newname), d)
	}
	od, ob, err := m.lookup(oldname)
	if err != nil {
		return err
	}
	nd, nb, err := m.lookup(newname)
	if err != nil {
		return err
	}
	ino, ok := od.names[ob]
	if !ok {
		return &fs.PathError{Op: "rename", Path: oldname, Err: fs.ErrNotExist}
	}
	delete(od.names, ob)
	nd.names[nb] = ino
	od.changes++
	nd.changes++
	return nil
}

// renameDir moves the directory d at old, and every directory under it, to
// new.
func (m *MemFS) renameDir(old, new string, d *memDir) error {
	sep := string(filepath.Separator)
	if old == "/" || old == "." || new == old || strings.HasPrefix(new, old+sep) {
		return &fs.PathError{Op: "rename", Path: new, Err: fs.ErrInvalid}
	}
	parent, ok := m.dirs[filepath.Dir(new)]
	if !ok {
		return &fs.PathError{Op: "rename", Path: new, Err: fs.ErrNotExist}
	}
	if _, ok := parent.names[filepath.Base(new)]; ok {
		return &fs.PathError{Op: "rename", Path: new, Err: fs.ErrExist}
	}
	if _, ok := m.dirs[new]; ok {
		return &fs.PathError{Op: "rename", Path: new, Err: fs.ErrExist}
	}
	moved := map[string]*memDir{}
	for p, sub := range m.dirs {
		if p == old || strings.HasPrefix(p, old+sep) {
			moved[new+p[len(old):]] = sub
			delete(m.dirs, p)
			sub.changes++
			if sub != d && strings.HasPrefix(sub.origin, old+sep) {
				sub.origin = new + sub.origin[len(old):] // its parent moved with it
			}
		}
	}
	for p, sub := range moved {
		m.dirs[p] = sub
	}
	switch d.origin {
	case "":
		d.origin = old
		m.renamed++
	case new:
		d.origin = "" // back where it was
		m.renamed--
	}
	if op, ok := m.dirs[filepath.Dir(old)]; ok {
		op.changes++
	}
	parent.changes++
	return nil
}

// Remove implements FS. A directory is removed only if it is empty.
func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if dir, ok := m.dirs[filepath.Clean(name)]; ok && !m.crashed {
		return m.removeDir(filepath.Clean(name), dir)
	}
	d, base, err := m.lookup(name)
	if err != nil {
		return err
	}
	if _, ok := d.names[base]; !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(d.names, base)
	d.changes++
	return nil
}

// removeDir removes the empty directory dir (d).
func (m *MemFS) removeDir(dir string, d *memDir) error {
	if dir == "/" || dir == "." {
		return &fs.PathError{Op: "remove", Path: dir, Err: fs.ErrInvalid}
	}
	empty := len(d.names) == 0
	prefix := dir + string(filepath.Separator)
	for p := range m.dirs {
		empty = empty && !strings.HasPrefix(p, prefix)
	}
	if !empty {
		return &fs.PathError{Op: "remove", Path: dir, Err: syscall.ENOTEMPTY}
	}
	delete(m.dirs, dir)
	if d.origin != "" {
		m.renamed--
	}
	if parent, ok := m.dirs[filepath.Dir(dir)]; ok {
		parent.changes++
	}
	return nil
}

// MkdirAll implements FS.
func (m *MemFS) MkdirAll(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.crashed {
		return ErrCrashed
	}
	for dir = filepath.Clean(dir); ; dir = filepath.Dir(dir) {
		if _, ok := m.dirs[dir]; !ok {
			m.dirs[dir] = newMemDir()
			if parent, ok := m.dirs[filepath.Dir(dir)]; ok {
				parent.changes++ // a new name in its listing
			}
		}
		if dir == "/" || dir == "." {
			return nil
		}
	}
}

// SyncDir implements FS.
func (m *MemFS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.crashed {
		return ErrCrashed
	}
	d, ok := m.dirs[filepath.Clean(dir)]
	if !ok {
		return &fs.PathError{Op: "sync", Path: dir, Err: fs.ErrNotExist}
	}
	d.durable = make(map[string]*memInode, len(d.names))
	for k, v := range d.names {
		d.durable[k] = v
	}
	if m.renamed > 0 {
		// A directory renamed into or out of this one keeps its new name.
		dir = filepath.Clean(dir)
		for p, sub := range m.dirs {
			if sub.origin != "" && (filepath.Dir(p) == dir || filepath.Dir(sub.origin) == dir) {
				sub.origin = ""
				m.renamed--
			}
		}
	}
	return nil
}

// ReadDir implements FS.
func (m *MemFS) ReadDir(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.crashed {
		return nil, ErrCrashed
	}
	d, ok := m.dirs[filepath.Clean(dir)]
	if !ok {
		return nil, &fs.PathError{Op: "readdir", Path: dir, Err: fs.ErrNotExist}
	}
	var names []string
	for k := range d.names {
		names = append(names, k)
	}
	// Subdirectories are listed too, as a real directory would.
	prefix := filepath.Clean(dir) + string(filepath.Separator)
	for p := range m.dirs {
		if rest, ok := strings.CutPrefix(p, prefix); ok && rest != "" && !strings.ContainsRune(rest, filepath.Separator) {
			names = append(names, rest)
		}
	}
	sort.Strings(names)
	return names, nil
}

// Stat implements FS.
func (m *MemFS) Stat(name string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.lookup(name)
	if err != nil {
		return 0, err
	}
	ino, ok := d.names[base]
	if !ok {
		return 0, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return int64(len(ino.data)), nil
}

// Lstat implements FS.
func (m *MemFS) Lstat(name string) (Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.crashed {
		return Info{}, ErrCrashed
	}
	if _, ok := m.dirs[filepath.Clean(name)]; ok {
		return Info{Dir: true}, nil
	}
	d, base, err := m.lookup(name)
	if err != nil {
		return Info{}, err
	}
	ino, ok := d.names[base]
	if !ok {
		return Info{}, &fs.PathError{Op: "lstat", Path: name, Err: fs.ErrNotExist}
	}
	return Info{Size: int64(len(ino.data)), Regular: true, ModTime: ino.modTime}, nil
}

// Crash returns what the file system could hold after a power cut, choosing
// what unsynced data survives with rng; keepAll keeps every unsynced write
// whole (a process kill rather than a power cut: the page cache survives).
// The receiver is dead afterwards.
func (m *MemFS) Crash(rng *rand.Rand, keepAll bool) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.crashed = true
	out := &MemFS{dirs: map[string]*memDir{}, lineage: m.lineage, now: m.now}
	seen := map[*memInode]*memInode{}
	for p, d := range m.dirs {
		nd := newMemDir()
		nd.changes = d.changes + 1 // entries may have gone back
		src := d.durable
		if keepAll {
			src = d.names
		}
		for name, ino := range src {
			ni, ok := seen[ino]
			if !ok {
				ni = &memInode{data: ino.crashContent(rng, keepAll), modTime: ino.modTime}
				ni.synced = append([]byte(nil), ni.data...)
				seen[ino] = ni
			}
			nd.names[name], nd.durable[name] = ni, ni
		}
		out.dirs[p] = nd
	}
	if !keepAll && m.renamed > 0 {
		out.undoRenames(m.dirs)
	}
	return out
}

// undoRenames puts every directory renamed since its parent was last
// synced back under its old name (before is the crashed file system's
// directories), the deepest first, so that one renamed inside another
// goes back inside it; unless something took the old name meanwhile.
func (m *MemFS) undoRenames(before map[string]*memDir) {
	type undo struct{ path, origin string }
	var undos []undo
	for p, d := range before {
		if d.origin != "" {
			undos = append(undos, undo{p, d.origin})
		}
	}
	sort.Slice(undos, func(i, j int) bool { return len(undos[i].path) > len(undos[j].path) })
	sep := string(filepath.Separator)
	for i, u := range undos {
		_, taken := m.dirs[u.origin]
		parent, ok := m.dirs[filepath.Dir(u.origin)]
		if !ok || taken || parent.names[filepath.Base(u.origin)] != nil {
			continue
		}
		moved := map[string]*memDir{}
		for p, d := range m.dirs {
			if p == u.path || strings.HasPrefix(p, u.path+sep) {
				moved[u.origin+p[len(u.path):]] = d
				delete(m.dirs, p)
			}
		}
		for p, d := range moved {
			m.dirs[p] = d
		}
		// The outer renames still to undo hold their paths as they were:
		// one inside this directory moved with it.
		for j := i + 1; j < len(undos); j++ {
			if strings.HasPrefix(undos[j].origin, u.path+sep) {
				undos[j].origin = u.origin + undos[j].origin[len(u.path):]
			}
		}
	}
}

func (ino *memInode) crashContent(rng *rand.Rand, keepAll bool) []byte {
	if keepAll {
		return append([]byte(nil), ino.data...)
	}
	b := append([]byte(nil), ino.synced...)
	for _, op := range ino.pending {
		switch {
		case op.truncate:
			if rng.IntN(2) == 0 {
				b = resize(b, op.off)
			}
		default:
			n := len(op.data)
			switch rng.IntN(3) {
			case 0:
				n = 0
			case 1:
				n = rng.IntN(n + 1) // a torn write keeps a prefix
			}
			if n > 0 {
				if end := op.off + int64(n); end > int64(len(b)) {
					b = resize(b, end)
				}
				copy(b[op.off:], op.data[:n])
			}
		}
	}
	return b
}

func resize(b []byte, n int64) []byte {
	if n <= int64(len(b)) {
		return b[:n]
	}
	return append(b, make([]byte, n-int64(len(b)))...)
}

func (f *memFile) check() error {
	if f.fs.crashed {
		return ErrCrashed
	}
	if f.closed {
		return fs.ErrClosed
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(); err != nil {
		return 0, err
	}
	if off >= int64(len(f.ino.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.ino.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(); err != nil {
		return 0, err
	}
	if f.readOnly {
		return 0, &fs.PathError{Op: "write", Path: f.name, Err: fs.ErrPermission}
	}
	if end := off + int64(len(p)); end > int64(len(f.ino.data)) {
		f.ino.data = resize(f.ino.data, end)
	}
	copy(f.ino.data[off:], p)
	f.ino.pending = append(f.ino.pending, memOp{off: off, data: append([]byte(nil), p...)})
	f.ino.lost = cutRanges(f.ino.lost, off, off+int64(len(p))) // rewritten pages are dirty again
	f.ino.modTime = f.fs.stamp()
	return len(p), nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(); err != nil {
		return err
	}
	f.ino.data = resize(f.ino.data, size)
	f.ino.pending = append(f.ino.pending, memOp{off: size, truncate: true})
	f.ino.lost = cutRanges(f.ino.lost, size, 1<<62) // what lay past size is gone
	f.ino.modTime = f.fs.stamp()
	return nil
}

// cutRanges returns ranges without [from, to).
func cutRanges(ranges [][2]int64, from, to int64) [][2]int64 {
	if len(ranges) == 0 {
		return ranges
	}
	out := ranges[:0:0]
	for _, r := range ranges {
		if r[1] <= from || r[0] >= to {
			out = append(out, r)
			continue
		}
		if r[0] < from {
			out = append(out, [2]int64{r[0], from})
		}
		if r[1] > to {
			out = append(out, [2]int64{to, r[1]})
		}
	}
	return out
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(); err != nil {
		return err
	}
	f.ino.synced = append(f.ino.synced[:0], f.ino.data...)
	for _, r := range f.ino.lost {
		for i := r[0]; i < r[1] && i < int64(len(f.ino.synced)); i++ {
			f.ino.synced[i] = 0
		}
	}
	f.ino.pending = nil
	return nil
}

// LoseSync fails a Sync of f, a file of this MemFS, as Linux fails an
// fsync whose writeback failed (docs/FORMAT.md, the disk's assumptions):
// the dirty pages it was flushing are dropped and marked clean, so that a
// later Sync that succeeds does not write them and a crash leaves zeros
// there. It returns err. A test's File wrapper calls it in place of Sync.
func (m *MemFS) LoseSync(f File, err error) error {
	mf, ok := f.(*memFile)
	if !ok || mf.fs != m {
		return errors.Newf("memfs: LoseSync of a file of another file system")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if cerr := mf.check(); cerr != nil {
		return cerr
	}
	for _, op := range mf.ino.pending {
		if !op.truncate {
			mf.ino.lost = append(mf.ino.lost, [2]int64{op.off, op.off + int64(len(op.data))})
		}
	}
	mf.ino.pending = nil
	return err
}

func (f *memFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(); err != nil {
		return 0, err
	}
	return int64(len(f.ino.data)), nil
}

func (f *memFile) Lock() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(); err != nil {
		return err
	}
	if f.ino.locked != nil && f.ino.locked != f {
		return errors.Wrapf(ErrLocked, "%s", f.name)
	}
	f.ino.locked = f
	return nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return fs.ErrClosed
	}
	f.closed = true
	if f.ino.locked == f {
		f.ino.locked = nil
	}
	return nil
}
