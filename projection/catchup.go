package projection

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// Locations of a rollout, and the directory each is in.
const (
	LocationActive   = "active"
	LocationArchived = "archived"
)

func locationDir(loc string) string {
	if loc == LocationArchived {
		return rollout.ArchivedDir
	}
	return rollout.ActiveDir
}

// rolloutFile is a rollout found on disk; cold: compressed (archived).
type rolloutFile struct {
	id, location string
	cold         bool
}

func (f rolloutFile) rel() string {
	name := f.id + rollout.RolloutExt
	if f.cold {
		name += rollout.ColdExt
	}
	return filepath.ToSlash(filepath.Join(locationDir(f.location), name))
}

// fileAt is the rollout a row's path names.
func fileAt(id, rel string) rolloutFile {
	loc := LocationActive
	if strings.HasPrefix(rel, rollout.ArchivedDir+"/") {
		loc = LocationArchived
	}
	return rolloutFile{id: id, location: loc, cold: strings.HasSuffix(rel, rollout.ColdExt)}
}

// listRollouts lists the rollouts in threads/active and threads/archived.
// A name that is not a valid thread id is not a rollout of ours and is
// left alone.
func (s *Store) listRollouts() (map[string]rolloutFile, error) {
	files := map[string]rolloutFile{}
	for _, loc := range []string{LocationArchived, LocationActive} { // active wins a duplicate
		names, err := s.opts.FS.ReadDir(filepath.Join(s.opts.Root, locationDir(loc)))
		if vfs.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, errors.Wrapf(err, "list %s threads", loc)
		}
		for _, n := range names {
			cold := loc == LocationArchived && strings.HasSuffix(n, rollout.RolloutExt+rollout.ColdExt)
			id, ok := strings.CutSuffix(strings.TrimSuffix(n, rollout.ColdExt), rollout.RolloutExt)
			if !ok || rollout.ValidateThreadID(id) != nil || (!cold && !strings.HasSuffix(n, rollout.RolloutExt)) {
				continue
			}
			if prev, seen := files[id]; seen && prev.location == loc && !prev.cold {
				continue // both forms (a compression cut short): the plain one
			}
			files[id] = rolloutFile{id: id, location: loc, cold: cold}
		}
	}
	return files, nil
}

// problemRow replaces a thread's rows with one that lists it with a
// problem (an identity error). size is the file size it was seen at: the
// row is looked at again when the file changes (-1: at every read).
func (s *Store) problemRow(ctx context.Context, tx *sql.Tx, f rolloutFile, size int64, problem string) error {
	tid, err := s.deleteThreadRows(ctx, tx, f.id, true)
	if err != nil {
		return err
	}
	row := &threadRow{TID: tid, ID: f.id, Location: f.location, RolloutPath: f.rel(), FileSize: size, IdentityError: problem}
	return s.newApplier(ctx, tx, row, true).finish()
}

// catchUp brings a thread's rows up to its rollout file, in tx (wmu held).
// It reads only what follows the projected offset (from the last frame
// applied, the anchor, which must still be there) unless the file is not
// the one projected (another file id, shorter than the projection, or the
// anchor gone), in which case the thread is projected again from the
// start. It returns the number of records applied.
func (s *Store) catchUp(ctx context.Context, tx *sql.Tx, f rolloutFile) (int, error) {
	s.catchUps.Add(1)
	if err := rollout.ValidateThreadID(f.id); err != nil {
		return 0, err
	}
	th, err := s.loadThread(ctx, tx, f.id)
	if err != nil {
		return 0, err
	}
	path := filepath.Join(s.opts.Root, filepath.FromSlash(f.rel()))
	file, size, statSize, closeFile, err := s.openRollout(f, path)
	if err != nil {
		if vfs.IsNotExist(err) || ctx.Err() != nil {
			return 0, err
		}
		// A rollout that cannot be read (a compressed one that does not
		// decompress, a directory under a rollout's name, an I/O error) is
		// listed with its problem rather than failing every read of the
		// workspace or hiding a file an operator must look at.
		var ce *rollout.CorruptionError
		what := "rollout unreadable: "
		if f.cold && (errors.As(err, &ce) || errors.Is(err, rollout.ErrTooLarge)) {
			what = "compressed rollout unreadable: "
			statSize, _ = s.opts.FS.Stat(path) // for good: until the file changes
		} else {
			statSize = -1 // maybe passing: tried again at every read
		}
		return 0, s.problemRow(ctx, tx, f, statSize, what+err.Error())
	}
	defer closeFile()
	r, err := rollout.NewReader(file, size, rollout.ReaderOptions{Path: path, ReadAhead: 256 << 10})
	if err != nil {
		if ctx.Err() != nil {
			return 0, err
		}
		var ce *rollout.CorruptionError
		if errors.As(err, &ce) {
			return 0, s.problemRow(ctx, tx, f, statSize, "unreadable file header: "+string(ce.Reason))
		}
		return 0, s.problemRow(ctx, tx, f, -1, "rollout unreadable: "+err.Error())
	}
	fileID := r.Header().FileID
	fresh := th == nil || th.FileID != fileID || th.ProjectedOffset == 0 || size < th.ProjectedOffset || !anchored(file, th)
	if !fresh {
		moved := th.RolloutPath != f.rel()
		th.Location, th.RolloutPath = f.location, f.rel()
		if size == th.ProjectedOffset && statSize == th.FileSize {
			if moved {
				return 0, s.saveThread(ctx, tx, th)
			}
			return 0, nil
		}
		r, err = rollout.NewReader(file, size, rollout.ReaderOptions{Path: path, StartOffset: th.AnchorOffset, ReadAhead: 256 << 10})
		if err != nil {
			return 0, err
		}
	}
	for attempt := 0; ; attempt++ {
		if fresh {
			// Rows without a threads row (lost by hand, say) go too:
			// fresh means nothing to look up.
			tid, err := s.deleteThreadRows(ctx, tx, f.id, true)
			if err != nil {
				return 0, err
			}
			th = &threadRow{TID: tid, ID: f.id, Location: f.location, RolloutPath: f.rel(), FileID: fileID}
			if r.Header().ThreadID != f.id {
				th.IdentityError = "file header names thread " + r.Header().ThreadID
			}
		}
		a := s.newApplier(ctx, tx, th, fresh)
		n, continuous, err := a.readAll(r)
		if err != nil {
			return n, err
		}
		if !continuous && attempt == 0 {
			// The anchor frame is not where the reader started: start over.
			fresh = true
			if r, err = rollout.NewReader(file, size, rollout.ReaderOptions{Path: path, ReadAhead: 256 << 10}); err != nil {
				return 0, err
			}
			continue
		}
		if end := r.End(); end > th.ProjectedOffset {
			// The anchor is the last frame applied, as it was read: read
			// again, the file could hold another frame there by now (a
			// frame cut after a failed fsync, and its retry written over
			// it).
			h := a.lastHeader
			th.ProjectedOffset = a.lastFrame + rollout.FrameHeaderSize + int64(h.Length)
			th.AnchorOffset, th.AnchorSeq, th.AnchorCRC = a.lastFrame, h.Seq, h.DataCRC
		}
		th.FileSize = statSize
		return n, a.finish()
	}
}

// openRollout opens a rollout for reading: the file itself, or a
// compressed one decompressed in memory (within rollout.MaxColdSize). size
// is the rollout's, statSize the file's on disk (what freshness checks
// compare).
func (s *Store) openRollout(f rolloutFile, path string) (src io.ReaderAt, size, statSize int64, closeFn func(), err error) {
	src, size, closeFn, err = rollout.OpenRead(s.opts.FS, path)
	if err != nil {
		return nil, 0, 0, nil, errors.Wrapf(err, "open %s", path)
	}
	statSize = size
	if f.cold {
		if statSize, err = s.opts.FS.Stat(path); err != nil {
			closeFn()
			return nil, 0, 0, nil, errors.Wrapf(err, "stat %s", path)
		}
	}
	return src, size, statSize, closeFn, nil
}

// anchored reports whether the file still holds, where it was, the last
// frame the row applied, ending at the projected offset.
func anchored(file io.ReaderAt, th *threadRow) bool {
	if th.AnchorOffset < rollout.FileHeaderSize {
		return false
	}
	h, err := rollout.ReadFrameHeader(file, th.AnchorOffset)
	return err == nil && h.FileID == th.FileID && h.Seq == th.AnchorSeq && h.DataCRC == th.AnchorCRC &&
		th.AnchorOffset+rollout.FrameHeaderSize+int64(h.Length) == th.ProjectedOffset
}

// readAll applies every record and damaged region the reader yields.
// continuous is false when, reading on from a row's anchor, the first
// frame read is not the anchor.
func (a *applier) readAll(r *rollout.Reader) (n int, continuous bool, err error) {
	damaged := 0
	check := !a.fresh
	for r.Next() {
		rec := r.Record()
		if check {
			check = false
			if len(r.Damage()) > 0 || r.FrameOffset() != a.th.AnchorOffset || rec.Seq != a.th.AnchorSeq {
				return n, false, nil
			}
		}
		for ; damaged < len(r.Damage()); damaged++ {
			if err := a.damage(r.Damage()[damaged]); err != nil {
				return n, true, err
			}
		}
		if err := a.record(r.FrameOffset(), rec); err != nil {
			return n, true, err
		}
		a.lastFrame, a.lastHeader = r.FrameOffset(), r.FrameHeader()
		n++
	}
	if err := r.Err(); err != nil {
		return n, true, err
	}
	if check {
		return n, false, nil // not even the anchor frame could be read
	}
	for ; damaged < len(r.Damage()); damaged++ {
		if err := a.damage(r.Damage()[damaged]); err != nil {
			return n, true, err
		}
	}
	return n, true, nil
}

// rowState is what read-repair compares with the file system.
type rowState struct {
	location string
	path     string // rollout_path
	fileSize int64
}

// loadRowStates reads every thread's location and the size last seen.
func (s *Store) loadRowStates(ctx context.Context) (map[string]rowState, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, location, rollout_path, file_size FROM threads`)
	if err != nil {
		return nil, errors.Wrap(err, "read threads")
	}
	defer rows.Close()
	out := map[string]rowState{}
	for rows.Next() {
		var id string
		var st rowState
		if err := rows.Scan(&id, &st.location, &st.path, &st.fileSize); err != nil {
			return nil, errors.Wrap(err, "read threads")
		}
		out[id] = st
	}
	return out, errors.Wrap(rows.Err(), "read threads")
}

// repairBatch is how many threads read-repair brings up to date in one
// transaction, so that a large repair does not hold the writer for long.
const repairBatch = 64

// repair catches up the given rollouts and drops the rows of the given ids
// whose rollout is gone.
func (s *Store) repair(ctx context.Context, stale []rolloutFile, gone []string) error {
	for len(stale) > 0 || len(gone) > 0 {
		n := min(len(stale), repairBatch)
		batch := stale[:n]
		stale = stale[n:]
		g := gone
		gone = nil
		err := s.write(ctx, func(tx *sql.Tx) error {
			for _, id := range g {
				if _, err := s.deleteThreadRows(ctx, tx, id, false); err != nil {
					return err
				}
			}
			for _, f := range batch {
				if _, err := s.catchUp(ctx, tx, f); err != nil {
					if vfs.IsNotExist(err) {
						if _, err := s.deleteThreadRows(ctx, tx, f.id, false); err != nil {
							return err
						}
						continue
					}
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Refresh makes every row agree with the rollouts: rows for rollouts that
// have none, rows behind their rollout brought forward (from their
// projected offset), rows whose rollout is gone dropped. It lists the
// thread directories and stats every rollout; List and Search do less
// (see reconcile).
func (s *Store) Refresh(ctx context.Context) (err error) {
	defer s.guard(&err)
	if err := s.Flush(ctx); err != nil {
		return err
	}
	return s.reconcile(ctx, true)
}

// reconcile makes the rows agree with the thread directories: rollouts
// with no row are projected, rows whose rollout moved are updated, rows
// whose rollout is gone are dropped. With statAll it also compares every
// rollout's size with the size last projected (Refresh).
//
// Without statAll it looks only at what can have changed since the rows
// last matched the directories, on two cheap signals:
//   - each directory's version (vfs.DirVersion: device, inode,
//     modification and change time; two stats). Unchanged and settled
//     (older than vfs.RacyWindow), no name was created, removed or
//     renamed there: the directories need no listing. Changed, they are
//     listed and the listing compared with the last one, so only the
//     names that differ are looked up;
//   - the rows' change log (thread_changes, kept by triggers for every
//     row that appears, goes or moves, by any process or by hand): only
//     the threads logged since are compared with the file system.
//
// What matched (the versions and the log's position, read before looking)
// is also kept in state.db (dirsKey), so a new process on a quiet
// workspace lists nothing either. A rollout appended to by a process that
// did not project it (it crashed first) is behind, not missing: reads
// stat the rows they return (refreshThreads), Refresh stats them all.
func (s *Store) reconcile(ctx context.Context, statAll bool) error {
	vers, err := s.dirVersions()
	if err != nil {
		return err
	}
	chg, err := s.lastChange(ctx)
	if err != nil {
		return err
	}
	s.recMu.Lock()
	prev := s.rec
	s.recMu.Unlock()
	rebuilding := s.rebuilding.Load()
	if !statAll && !rebuilding && !prev.valid {
		// A new process: what state.db last vouched for.
		if v, ok := s.metaRead(ctx, dirsKey); ok {
			if key, at, ok := parseMatched(v); ok {
				prev = reconciled{valid: true, vers: key, chg: at, settled: true}
			}
		}
	}
	sameDirs := prev.valid && prev.settled && vers.settled && prev.vers == vers.key
	if !statAll && !rebuilding && sameDirs && prev.chg == chg {
		s.setReconciled(prev)
		return nil
	}
	files := prev.files
	var stale, check []rolloutFile
	var gone []string
	full := statAll || rebuilding || !prev.valid
	if !sameDirs || full {
		if files, err = s.listRollouts(); err != nil {
			return err
		}
		if !full && prev.files == nil {
			full = true // nothing to compare the listing with
		}
		if !full {
			if stale, gone, err = s.diffListing(ctx, prev.files, files); err != nil {
				return err
			}
		}
	}
	if !full && chg != prev.chg {
		ids, complete, err := s.changesSince(ctx, prev.chg)
		if err != nil {
			return err
		}
		if !complete || slices.Contains(ids, sweepMark) {
			// A sweep was asked for (a crashed process's journal was
			// replayed), or the log no longer reaches back (and may have
			// held one): every rollout is checked, sizes too.
			full, statAll = true, true
			if files == nil {
				if files, err = s.listRollouts(); err != nil {
					return err
				}
			}
		} else {
			st, g, err := s.checkChanged(ctx, ids, files)
			if err != nil {
				return err
			}
			stale, gone = append(stale, st...), append(gone, g...)
		}
	}
	if full {
		stale, gone = nil, nil
		rows, err := s.loadRowStates(ctx)
		if err != nil {
			return err
		}
		for id := range rows {
			if _, ok := files[id]; !ok {
				gone = append(gone, id)
			}
		}
		for id, f := range files {
			st, ok := rows[id]
			switch {
			case !ok || st.path != f.rel():
				stale = append(stale, f)
			case statAll:
				check = append(check, f)
			}
		}
		sizes, errs := s.statFiles(check)
		for i, f := range check {
			switch err := errs[i]; {
			case err != nil && !vfs.IsNotExist(err):
				return errors.Wrapf(err, "stat rollout %s", f.id)
			case err != nil || sizes[i] != rows[f.id].fileSize:
				stale = append(stale, f)
			}
		}
	}
	sortFiles(stale)
	slices.Sort(gone)
	gone = slices.Compact(gone)
	if err := s.repair(ctx, slices.CompactFunc(stale, func(a, b rolloutFile) bool { return a.id == b.id }), gone); err != nil {
		s.setReconciled(reconciled{})
		return err
	}
	if rebuilding {
		return nil
	}
	// The rows match the directories as of vers and chg, read before.
	s.setReconciled(reconciled{valid: true, vers: vers.key, chg: chg, files: files, settled: vers.settled})
	if vers.settled {
		matched := vers.key + "|" + strconv.FormatInt(chg, 10)
		if v, ok := s.metaRead(ctx, dirsKey); !ok || v != matched {
			// Best effort: without it a new process looks once more.
			_ = s.write(ctx, func(tx *sql.Tx) error {
				if err := pruneChanges(ctx, tx, chg); err != nil {
					return err
				}
				return metaSet(ctx, tx, dirsKey, matched)
			})
		}
	}
	return nil
}

// parseMatched reads a dirsKey value: "<directory versions>|<change seq>".
func parseMatched(v string) (string, int64, bool) {
	i := strings.LastIndexByte(v, '|')
	if i < 0 {
		return "", 0, false
	}
	at, err := strconv.ParseInt(v[i+1:], 10, 64)
	return v[:i], at, err == nil
}

// lastChange is the last seq the change log gave (0: none), pruned or
// not.
func (s *Store) lastChange(ctx context.Context) (int64, error) {
	// Every read asks: a prepared statement.
	rows, err := s.rquery(ctx, `SELECT seq FROM sqlite_sequence WHERE name = 'thread_changes'`)
	if err != nil {
		return 0, errors.Wrap(err, "read thread_changes")
	}
	defer rows.Close()
	var n int64
	if rows.Next() {
		err = rows.Scan(&n)
	}
	return n, errors.Wrap(errors.CombineErrors(err, rows.Err()), "read thread_changes")
}

// changeLogKeep is how many entries of the change log are kept: a reader
// further behind compares every row.
const changeLogKeep = 10000

// changesSince returns the threads logged after seq; complete is false
// when the log no longer reaches back that far (or holds too many to look
// up one by one).
func (s *Store) changesSince(ctx context.Context, seq int64) (ids []string, complete bool, err error) {
	var first sql.NullInt64
	if err := s.r.QueryRowContext(ctx, `SELECT min(seq) FROM thread_changes`).Scan(&first); err != nil {
		return nil, false, errors.Wrap(err, "read thread_changes")
	}
	if !first.Valid || first.Int64 > seq+1 {
		return nil, false, nil // pruned past seq (the caller knows it moved)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id FROM thread_changes WHERE seq > ? ORDER BY seq LIMIT ?`, seq, changeLogKeep+1)
	if err != nil {
		return nil, false, errors.Wrap(err, "read thread_changes")
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, false, errors.Wrap(err, "read thread_changes")
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, false, errors.Wrap(err, "read thread_changes")
	}
	if len(ids) > changeLogKeep {
		return nil, false, nil
	}
	slices.Sort(ids)
	return slices.Compact(ids), true, nil
}

// pruneChanges drops what the change log holds beyond changeLogKeep
// entries before seq.
func pruneChanges(ctx context.Context, tx *sql.Tx, seq int64) error {
	_, err := tx.ExecContext(ctx, `DELETE FROM thread_changes WHERE seq <= ?`, seq-changeLogKeep)
	return errors.Wrap(err, "prune thread_changes")
}

// checkChanged compares the rows of the given threads with their rollouts:
// where the listing says they are, or, without one, where a stat finds
// them.
func (s *Store) checkChanged(ctx context.Context, ids []string, files map[string]rolloutFile) (stale []rolloutFile, gone []string, err error) {
	for _, id := range ids {
		if rollout.ValidateThreadID(id) != nil {
			continue
		}
		path, hasRow, err := s.rowPath(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		var f rolloutFile
		found := false
		if files != nil {
			f, found = files[id]
		} else {
			f, found, err = s.findRollout(id)
			if err != nil {
				return nil, nil, err
			}
		}
		switch {
		case found && (!hasRow || path != f.rel()):
			stale = append(stale, f)
		case !found && hasRow:
			gone = append(gone, id)
		}
	}
	return stale, gone, nil
}

// findRollout stats where a thread's rollout can be (active first, as a
// listing prefers it).
func (s *Store) findRollout(id string) (rolloutFile, bool, error) {
	for _, f := range []rolloutFile{{id: id, location: LocationActive}, {id: id, location: LocationArchived},
		{id: id, location: LocationArchived, cold: true}} {
		_, err := s.opts.FS.Stat(filepath.Join(s.opts.Root, filepath.FromSlash(f.rel())))
		switch {
		case err == nil:
			return f, true, nil
		case !vfs.IsNotExist(err):
			return rolloutFile{}, false, errors.Wrapf(err, "stat rollout %s", id)
		}
	}
	return rolloutFile{}, false, nil
}

// dirsKey is the meta row of the directory versions the rows last matched.
// A rebuild deletes it with the rows.
const dirsKey = "dirs_matched"

// dirVersions are the versions of both thread directories; key is ""
// when the file system cannot version them.
type dirVersions struct {
	key     string
	settled bool
}

func (s *Store) dirVersions() (dirVersions, error) {
	var b strings.Builder
	settled := true
	for _, loc := range []string{LocationArchived, LocationActive} {
		v, ok, err := vfs.VersionOf(s.opts.FS, filepath.Join(s.opts.Root, locationDir(loc)))
		switch {
		case vfs.IsNotExist(err):
			b.WriteString(loc + ":none;") // its creation will change it
			continue
		case err != nil:
			return dirVersions{}, errors.Wrapf(err, "stat %s threads directory", loc)
		case !ok:
			return dirVersions{}, nil
		}
		settled = settled && v.Settled(s.now())
		fmt.Fprintf(&b, "%s:%s;", loc, v)
	}
	return dirVersions{key: b.String(), settled: settled}, nil
}

// diffListing compares a listing with the one the rows last matched: only
// the names that differ are looked up.
func (s *Store) diffListing(ctx context.Context, was, now map[string]rolloutFile) (stale []rolloutFile, gone []string, err error) {
	for id, f := range now {
		if old, ok := was[id]; ok && old == f {
			continue
		}
		path, ok, err := s.rowPath(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		if !ok || path != f.rel() {
			stale = append(stale, f)
		}
	}
	for id := range was {
		if _, ok := now[id]; !ok {
			gone = append(gone, id)
		}
	}
	return stale, gone, nil
}

// rowPath is the rollout path a thread's row names.
func (s *Store) rowPath(ctx context.Context, id string) (string, bool, error) {
	var path string
	err := s.r.QueryRowContext(ctx, `SELECT rollout_path FROM threads WHERE id = ?`, id).Scan(&path)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return path, err == nil, errors.Wrapf(err, "read thread %s", id)
}

// metaRead reads a meta value through the reader pool (ok false on any
// error: callers fall back to doing the work).
func (s *Store) metaRead(ctx context.Context, key string) (string, bool) {
	var v string
	if err := s.r.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, key).Scan(&v); err != nil {
		return "", false
	}
	return v, true
}

func (s *Store) setReconciled(r reconciled) {
	s.recMu.Lock()
	s.rec = r
	s.recMu.Unlock()
}

// reconciled is what reconcile last found matching: the directory
// versions and the change log's position read before it looked, and the
// listing (nil when it was taken on state.db's word).
type reconciled struct {
	valid bool
	vers  string
	// settled says vers was settled when the rows were matched. A match
	// made before is not trusted once vers settles: a name made in the same
	// timestamp tick after it left vers as it was.
	settled bool
	chg     int64
	files   map[string]rolloutFile
}

// statFiles stats rollouts, several at a time: a sweep over ten thousand
// threads is that many system calls, and they overlap well.
func (s *Store) statFiles(files []rolloutFile) ([]int64, []error) {
	sizes, errs := make([]int64, len(files)), make([]error, len(files))
	const workers = 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(files); i += workers {
				sizes[i], errs[i] = s.opts.FS.Stat(filepath.Join(s.opts.Root, filepath.FromSlash(files[i].rel())))
			}
		}()
	}
	wg.Wait()
	return sizes, errs
}

// refreshThreads brings the named rows up to date with their rollouts (a
// stat each) and reports whether any changed.
func (s *Store) refreshThreads(ctx context.Context, rows map[string]rowState) (bool, error) {
	var stale []rolloutFile
	var gone []string
	for id, st := range rows {
		f := fileAt(id, st.path)
		size, err := s.opts.FS.Stat(filepath.Join(s.opts.Root, filepath.FromSlash(f.rel())))
		switch {
		case vfs.IsNotExist(err):
			// Moved (archived, restored, compressed) or deleted.
			other, found, err := s.findRollout(id)
			switch {
			case err != nil:
				return false, err
			case found:
				stale = append(stale, other)
			default:
				gone = append(gone, id)
			}
		case err != nil:
			return false, errors.Wrapf(err, "stat rollout %s", id)
		case size != st.fileSize:
			stale = append(stale, f)
		}
	}
	if len(stale) == 0 && len(gone) == 0 {
		return false, nil
	}
	sortFiles(stale)
	return true, s.repair(ctx, stale, gone)
}

// sortFiles orders rollouts by thread id: time-ordered ids make that
// oldest first, and a stable order makes a rebuild's watermark meaningful.
func sortFiles(fs []rolloutFile) {
	slices.SortFunc(fs, func(a, b rolloutFile) int { return strings.Compare(a.id, b.id) })
}
