package journal

import (
	"bytes"
	"context"
	"hash/crc32"
	"io"
	"path/filepath"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// Report says what Recover found and did.
type Report struct {
	// Journals is the number of dead journals (their lock free) replayed
	// and removed.
	Journals int `json:"journals"`
	// Entries is the journal entries read; Written the frames written back
	// into rollouts that lacked them (or held a torn copy); Present those
	// found already in place; Obsolete those of a rollout since replaced,
	// deleted or compressed (it was synced before that happened).
	Entries  int `json:"entries"`
	Written  int `json:"written"`
	Present  int `json:"present"`
	Obsolete int `json:"obsolete"`
	// Threads are the rollouts written to, sorted.
	Threads []string `json:"threads,omitempty"`
	// Problems are entries that could not be replayed and damage found in
	// a segment. Anything here may be acknowledged data lost: it is worth
	// an error in the host's log.
	Problems []Problem `json:"problems,omitempty"`
}

// Problem is one entry not replayed, or one damaged segment region.
type Problem struct {
	Journal string `json:"journal"`
	Segment string `json:"segment"`
	Thread  string `json:"thread,omitempty"`
	Offset  int64  `json:"offset,omitempty"` // in the rollout (an entry) or the segment (damage)
	Reason  string `json:"reason"`
}

// Recover replays every journal in root's journal directory whose
// lock is free (its process is gone) into the rollouts, then removes it.
// It must run before any rollout of the workspace is resumed, written or
// repaired after a crash; rolloutdb.Open does it first.
//
// Replay is idempotent: an entry whose frame is in its rollout already is
// written again, the same bytes (the rollout may hold them only in pages a
// failed fsync marked clean); one whose rollout lacks it (or holds a torn
// copy) is written back, only after checking that the frame it follows is intact there, so
// a replay never leaves a hole. A rollout replaced since (another file id),
// deleted or compressed is skipped: it was synced before that. A valid
// frame where an entry belongs is never overwritten (it is reported). The
// rollouts written are synced before the journal is removed; a crash at any
// point leaves the journal to replay again.
//
// Only one process replays at a time (journal/recovery.lock); another
// waits, up to ctx, so that it never finds a journal half replayed and
// takes it for a live one.
func Recover(ctx context.Context, fsys vfs.FS, root string) (Report, error) {
	var rep Report
	if fsys == nil {
		fsys = vfs.OS
	}
	dir := filepath.Join(root, Dir)
	names, err := fsys.ReadDir(dir)
	if vfs.IsNotExist(err) {
		return rep, nil
	}
	if err != nil {
		return rep, errors.Wrapf(err, "list %s", dir)
	}
	if !hasJournals(names) {
		return rep, nil
	}
	unlock, err := lockRecovery(ctx, fsys, dir)
	if err != nil {
		return rep, err
	}
	defer unlock()
	if names, err = fsys.ReadDir(dir); err != nil { // again, under the lock
		return rep, errors.Wrapf(err, "list %s", dir)
	}
	journals := map[string][]segRange{}
	for _, n := range names {
		jid, num, kind, ok := parseJournalName(n)
		if !ok {
			continue
		}
		if _, seen := journals[jid]; !seen {
			journals[jid] = nil
		}
		if kind == journalSegExt {
			journals[jid] = append(journals[jid], segRange{path: filepath.Join(dir, n), stem: segmentStem(jid, num), num: num, size: -1})
		}
	}
	ids := make([]string, 0, len(journals))
	for id := range journals {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, jid := range ids {
		lock, held, err := tryJournalLock(fsys, dir, jid)
		if err != nil {
			return rep, err
		}
		if held {
			continue // a live process's journal
		}
		segs := journals[jid]
		slices.SortFunc(segs, func(a, b segRange) int { return int(a.num) - int(b.num) })
		rp := newReplayer(fsys, root, &rep)
		for _, s := range segs {
			if err := rp.segment(ctx, jid, s); err != nil {
				rp.close()
				closeFile(lock)
				return rep, errors.Wrapf(err, "replay journal %s", jid)
			}
		}
		if err := rp.finish(); err != nil {
			closeFile(lock)
			return rep, errors.Wrapf(err, "replay journal %s", jid)
		}
		// Everything it held is durable in the rollouts now. Projections
		// its process kept may not have caught up with them: say so
		// before the journal, the only other sign of the crash, goes.
		if err := markProjectionsStale(fsys, dir); err != nil {
			closeFile(lock)
			return rep, err
		}
		err = removeJournalFiles(fsys, root, jid)
		closeFile(lock)
		if err != nil {
			return rep, err
		}
		rep.Journals++
	}
	slices.Sort(rep.Threads)
	rep.Threads = slices.Compact(rep.Threads)
	return rep, nil
}

// StaleMark is the file Recover leaves in the journal directory
// when it replays a dead journal: a process died (or the power was cut)
// holding a journal, and projections built from the rollouts (state.db)
// may be behind what it acknowledged. Whoever keeps projections checks
// every rollout once and removes the mark (projection.Open does).
const StaleMark = "projections-stale"

func markProjectionsStale(fsys vfs.FS, dir string) error {
	f, err := fsys.Create(filepath.Join(dir, StaleMark))
	if vfs.IsExist(err) {
		return nil
	}
	if err != nil {
		return errors.Wrapf(err, "mark projections stale in %s", dir)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return errors.Wrapf(fsys.SyncDir(dir), "mark projections stale in %s", dir)
}

func closeFile(f vfs.File) {
	if f != nil {
		_ = f.Close()
	}
}

func hasJournals(names []string) bool {
	for _, n := range names {
		if _, _, _, ok := parseJournalName(n); ok {
			return true
		}
	}
	return false
}

// lockRecovery takes journal/recovery.lock, waiting for another process's
// replay to finish (the FS's lock does not block: it is retried).
func lockRecovery(ctx context.Context, fsys vfs.FS, dir string) (func(), error) {
	path := filepath.Join(dir, recoveryLockName)
	f, err := fsys.OpenRW(path)
	if vfs.IsNotExist(err) {
		f, err = fsys.Create(path)
		if vfs.IsExist(err) {
			f, err = fsys.OpenRW(path)
		}
	}
	if err != nil {
		return nil, withPath(err, "open %s", path)
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := f.Lock()
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, rollout.ErrThreadLocked) {
			_ = f.Close()
			return nil, errors.Wrapf(err, "lock %s", path)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, errors.Wrapf(ctx.Err(), "waiting for another process's journal replay (%s)", path)
		case <-time.After(wait):
		}
	}
}

// tryJournalLock takes a journal's lock if it is free. A journal whose
// lock file is gone (a removal cut short) is dead too.
func tryJournalLock(fsys vfs.FS, dir, jid string) (vfs.File, bool, error) {
	path := filepath.Join(dir, jid+journalLockExt)
	f, err := fsys.OpenRW(path)
	if vfs.IsNotExist(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, withPath(err, "open %s", path)
	}
	if err := f.Lock(); err != nil {
		_ = f.Close()
		if errors.Is(err, rollout.ErrThreadLocked) {
			return nil, true, nil
		}
		return nil, false, errors.Wrapf(err, "lock %s", path)
	}
	return f, false, nil
}

// segRange is a segment to replay: its file, the stem its header must
// name, and how much of it (-1: all; a live journal's own segment: its
// durable part).
type segRange struct {
	path, stem string
	num        uint64
	size       int64
}

// replayer writes journal entries back into rollouts.
type replayer struct {
	fs      vfs.FS
	root    string
	rep     *Report
	targets map[string]*replayTarget
	// only restricts the replay to one thread, whose rollout is open as
	// onlyFile (a live journal restoring a thread it holds frames of).
	only, onlyPath string
	onlyFile       vfs.File
}

type replayTarget struct {
	id, path string
	f        vfs.File
	own      bool // opened (and locked) by the replayer
	fileID   uint64
	skip     string // why the rest of this rollout's entries are not replayed
	// last is the frame last found or written in this replay: an entry
	// that follows it needs no check of its predecessor.
	lastEnd int64
	lastSeq uint64
	dirty   bool
}

func newReplayer(fsys vfs.FS, root string, rep *Report) *replayer {
	if rep == nil {
		rep = &Report{}
	}
	return &replayer{fs: fsys, root: root, rep: rep, targets: map[string]*replayTarget{}}
}

func (rp *replayer) problem(jid, seg, thread string, off int64, reason string) {
	rp.rep.Problems = append(rp.rep.Problems, Problem{Journal: jid, Segment: filepath.Base(seg), Thread: thread, Offset: off, Reason: reason})
}

// segment replays every entry of one segment. A segment whose header does
// not name it (a file renamed for reuse, then cut short) holds nothing
// current and is passed over.
func (rp *replayer) segment(ctx context.Context, jid string, s segRange) error {
	f, err := rp.fs.Open(s.path)
	if err != nil {
		if vfs.IsNotExist(err) {
			return nil
		}
		return withPath(err, "open %s", s.path)
	}
	defer f.Close()
	size := s.size
	if size < 0 {
		if size, err = f.Size(); err != nil {
			return errors.Wrapf(err, "stat %s", s.path)
		}
	}
	r, err := rollout.NewReader(f, size, rollout.ReaderOptions{Path: s.path, ReadAhead: 4 << 20, Journal: true})
	if err != nil {
		var ce *rollout.CorruptionError
		if errors.As(err, &ce) {
			return nil // not a segment of this journal now (prepared, or reused, and cut short)
		}
		return err
	}
	if r.Header().ThreadID != s.stem {
		return nil // renamed for reuse before its new header was written
	}
	damaged := 0
	for r.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		for ; damaged < len(r.Damage()); damaged++ {
			d := r.Damage()[damaged]
			rp.problem(jid, s.path, "", d.Offset, "journal segment damaged (acknowledged frames may be lost): "+d.Error())
		}
		rec := r.Record()
		e, err := decodeJournalEntry(rec)
		if err != nil {
			rp.problem(jid, s.path, "", r.FrameOffset(), "journal entry rejected: "+err.Error())
			continue
		}
		rp.rep.Entries++
		if err := rp.apply(jid, s.path, e); err != nil {
			return err
		}
	}
	if err := r.Err(); err != nil {
		return err
	}
	for ; damaged < len(r.Damage()); damaged++ {
		d := r.Damage()[damaged]
		rp.problem(jid, s.path, "", d.Offset, "journal segment damaged (acknowledged frames may be lost): "+d.Error())
	}
	return nil
}

// target opens the rollout of a thread for replay (once per replay).
func (rp *replayer) target(id string) (*replayTarget, error) {
	if t, ok := rp.targets[id]; ok {
		return t, nil
	}
	t := &replayTarget{id: id}
	rp.targets[id] = t
	if rp.only != "" {
		t.path, t.f = rp.onlyPath, rp.onlyFile
	} else {
		for _, p := range []func(string, string) (string, error){rollout.ActivePath, rollout.ArchivedPath} {
			path, err := p(rp.root, id)
			if err != nil {
				t.skip = "invalid thread id"
				return t, nil
			}
			f, err := rp.fs.OpenRW(path)
			if vfs.IsNotExist(err) {
				continue
			}
			if err != nil {
				return nil, withPath(err, "open %s", path)
			}
			if err := f.Lock(); err != nil {
				_ = f.Close()
				if errors.Is(err, rollout.ErrThreadLocked) {
					t.skip = "its rollout is held by a live writer"
					return t, nil
				}
				return nil, err
			}
			t.path, t.f, t.own = path, f, true
			break
		}
		if t.f == nil {
			t.skip = "obsolete" // deleted, or compressed (synced before that)
			return t, nil
		}
	}
	hb := make([]byte, rollout.FileHeaderSize)
	if _, err := t.f.ReadAt(hb, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, withPath(err, "read %s", t.path)
	}
	h, err := rollout.ParseFileHeader(hb)
	if err != nil || h.Flags != 0 {
		t.skip = "its rollout's file header is unreadable"
		return t, nil
	}
	t.fileID = h.FileID
	return t, nil
}

// apply replays one entry.
func (rp *replayer) apply(jid, seg string, e journalEntry) error {
	if rp.only != "" && e.Thread != rp.only {
		return nil
	}
	t, err := rp.target(e.Thread)
	if err != nil {
		return err
	}
	switch {
	case t.skip == "obsolete" || (t.skip == "" && e.FileID != t.fileID):
		rp.rep.Obsolete++ // another incarnation of the thread's rollout
		return nil
	case t.skip != "":
		rp.problem(jid, seg, e.Thread, e.Offset, t.skip)
		return nil
	}
	have := make([]byte, len(e.Frame))
	n, err := t.f.ReadAt(have, e.Offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return withPath(err, "read %s", t.path)
	}
	lastSeq := e.FirstSeq + uint64(e.Header.Count) - 1
	if n == len(have) && bytes.Equal(have, e.Frame) {
		// In place already, but perhaps only in the page cache: a failed
		// fsync marks the pages it dropped clean, and the next fsync does
		// not write them. Writing the same bytes again dirties them, so
		// the sync that follows the replay makes them durable.
		rp.rep.Present++
		if n, err := t.f.WriteAt(e.Frame, e.Offset); err != nil || n != len(e.Frame) {
			return writeError(t.path, err)
		}
		t.dirty = true
		t.lastEnd, t.lastSeq = e.Offset+int64(len(e.Frame)), lastSeq
		return nil
	}
	if valid, err := validFrameAt(t, e.Offset, have[:n]); err != nil {
		return err
	} else if valid {
		t.skip = "another valid frame is in the rollout where the journal's belongs; not overwritten"
		rp.problem(jid, seg, e.Thread, e.Offset, t.skip)
		return nil
	}
	if ok, err := rp.follows(t, e); err != nil || !ok {
		if err == nil {
			t.skip = "the frame before it is not intact in the rollout; not written (it would leave a hole)"
			rp.problem(jid, seg, e.Thread, e.Offset, t.skip)
		}
		return err
	}
	if n, err := t.f.WriteAt(e.Frame, e.Offset); err != nil || n != len(e.Frame) {
		return writeError(t.path, err)
	}
	rp.rep.Written++
	rp.rep.Threads = append(rp.rep.Threads, e.Thread)
	t.dirty = true
	t.lastEnd, t.lastSeq = e.Offset+int64(len(e.Frame)), lastSeq
	return nil
}

// validFrameAt reports whether the rollout holds a whole, valid frame of
// its own at off (head is what was read there already).
func validFrameAt(t *replayTarget, off int64, head []byte) (bool, error) {
	if len(head) < rollout.FrameHeaderSize {
		return false, nil
	}
	h, reason := rollout.ParseFrameHeader(head)
	if reason != "" || h.FileID != t.fileID {
		return false, nil
	}
	p := make([]byte, h.Length)
	n, err := t.f.ReadAt(p, off+rollout.FrameHeaderSize)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, withPath(err, "read %s", t.path)
	}
	return n == len(p) && crc32.Checksum(p, castagnoli) == h.DataCRC, nil
}

// follows reports whether the rollout holds, intact, the frame an entry
// follows: the one at its prev offset, ending where it starts, with the
// seq before its first.
func (rp *replayer) follows(t *replayTarget, e journalEntry) (bool, error) {
	if t.lastEnd == e.Offset && t.lastSeq+1 == e.FirstSeq {
		return true, nil
	}
	h, err := rollout.ReadFrameHeader(t.f, e.Prev)
	if err != nil {
		var ce *rollout.CorruptionError
		if errors.As(err, &ce) {
			return false, nil
		}
		return false, err
	}
	if h.FileID != t.fileID || e.Prev+rollout.FrameHeaderSize+int64(h.Length) != e.Offset || h.Seq+uint64(h.Count) != e.FirstSeq {
		return false, nil
	}
	p := make([]byte, h.Length)
	if _, err := t.f.ReadAt(p, e.Prev+rollout.FrameHeaderSize); err != nil && !errors.Is(err, io.EOF) {
		return false, withPath(err, "read %s", t.path)
	}
	return crc32.Checksum(p, castagnoli) == h.DataCRC, nil
}

// finish syncs every rollout written and closes what the replay opened.
func (rp *replayer) finish() error {
	var err error
	for _, t := range rp.targets {
		if t.dirty && t.f != nil {
			if serr := t.f.Sync(); serr != nil && err == nil {
				err = errors.Wrapf(serr, "sync %s", t.path)
			}
		}
	}
	rp.close()
	return err
}

func (rp *replayer) close() {
	for _, t := range rp.targets {
		if t.own && t.f != nil {
			_ = t.f.Close()
		}
		t.f = nil
	}
}
