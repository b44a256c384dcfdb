package projection

import (
	"context"
	"database/sql"
	"hash/fnv"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
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
	files, _, err := s.listRolloutsSig()
	return files, err
}

// listRolloutsSig is listRollouts with a signature of the two listings
// (every name, in order): equal signatures, equal directories.
func (s *Store) listRolloutsSig() (map[string]rolloutFile, uint64, error) {
	files := map[string]rolloutFile{}
	sig := fnv.New64a()
	for _, loc := range []string{LocationArchived, LocationActive} { // active wins a duplicate
		names, err := s.opts.FS.ReadDir(filepath.Join(s.opts.Root, locationDir(loc)))
		if rollout.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, 0, errors.Wrapf(err, "list %s threads", loc)
		}
		sig.Write([]byte(loc + "/"))
		for _, n := range names {
			sig.Write([]byte(n + "\x00"))
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
	return files, sig.Sum64(), nil
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
		if rollout.IsNotExist(err) || ctx.Err() != nil {
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
					if rollout.IsNotExist(err) {
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
// projected offset), rows whose rollout is gone dropped. It stats every
// rollout; Store.List does less (see there).
func (s *Store) Refresh(ctx context.Context) error {
	if err := s.Flush(ctx); err != nil {
		return err
	}
	return s.reconcile(ctx, true)
}

// reconcile compares the rollouts on disk with the rows. It always finds
// missing, moved and vanished rollouts (one directory listing); with
// statAll it also compares every rollout's size with the size last
// projected.
//
// Without statAll it is skipped when neither side changed since it last
// found them matching: the same directory listings (signature) and the
// same rows: no write transaction of this store since, and none of another
// process (SQLite's data_version on the writer connection, which moves
// only when another connection commits). That is what keeps a page of
// List in milliseconds with ten thousand threads while the workspace is
// quiet; the rows of the page are still stat'ed.
func (s *Store) reconcile(ctx context.Context, statAll bool) error {
	files, sig, err := s.listRolloutsSig()
	if err != nil {
		return err
	}
	gen := rowsVersion{own: s.writes.Load()}
	if err := s.w.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&gen.others); err != nil {
		return errors.Wrap(err, "read data_version")
	}
	s.recMu.Lock()
	same := s.rec.valid && s.rec.sig == sig && s.rec.gen == gen
	s.recMu.Unlock()
	if same && !statAll {
		return nil
	}
	rows, err := s.loadRowStates(ctx)
	if err != nil {
		return err
	}
	var stale, check []rolloutFile
	var gone []string
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
		case err != nil && !rollout.IsNotExist(err):
			return errors.Wrapf(err, "stat rollout %s", f.id)
		case err != nil || sizes[i] != rows[f.id].fileSize:
			stale = append(stale, f)
		}
	}
	sortFiles(stale)
	if len(stale) == 0 && len(gone) == 0 {
		// They match as of gen (read before the rows were).
		s.recMu.Lock()
		s.rec = reconciled{valid: true, sig: sig, gen: gen}
		s.recMu.Unlock()
		return nil
	}
	return s.repair(ctx, stale, gone)
}

// reconciled is what reconcile last found matching.
type reconciled struct {
	valid bool
	sig   uint64
	gen   rowsVersion
}

// rowsVersion moves whenever state.db's rows may have changed: own counts
// this store's write transactions, others is SQLite's data_version.
type rowsVersion struct{ own, others int64 }

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
		case rollout.IsNotExist(err):
			// Moved (archived, restored, compressed) or deleted.
			found := false
			for _, other := range []rolloutFile{{id: id, location: LocationActive}, {id: id, location: LocationArchived},
				{id: id, location: LocationArchived, cold: true}} {
				if _, err := s.opts.FS.Stat(filepath.Join(s.opts.Root, filepath.FromSlash(other.rel()))); err == nil {
					stale, found = append(stale, other), true
					break
				}
			}
			if !found {
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
