package rolloutdb

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/journal"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// What a crash leaves among the local log's files, and how it is
// finished: the journal of a crashed process (replayed at Open), a move
// or a compression cut short (settled at Open), temporary files (swept by
// GC).

// recoverJournals replays into the rollouts what a crashed process
// acknowledged through its journal (journal.Recover): before any rollout
// is read.
func (l *localLog) recoverJournals(ctx context.Context) (journal.Report, error) {
	return journal.Recover(ctx, l.fs, l.root)
}

// A tempSweeper is a log that keeps temporary files a crash may leave
// (the local log); DB.GC reaches it by a type assertion.
type tempSweeper interface {
	SweepTemps(grace time.Duration) ([]string, error)
}

var _ tempSweeper = (*localLog)(nil)

// settleMoves finishes moves a crash interrupted. A rename is made durable
// by syncing the target directory first, then the source: a power cut
// between the two can leave the rollout under both names (never under
// none). The rollout's last lifecycle record says which move it was:
// archive appends "archived" before it moves the file, restore appends
// "restored" after; so "archived" last means the thread is archived, and
// anything else means it is active.
func (l *localLog) settleMoves(ctx context.Context) error {
	archived, err := l.fs.ReadDir(filepath.Join(l.root, rollout.ArchivedDir))
	if err != nil {
		return errors.Wrap(err, "list archived threads")
	}
	for _, name := range archived {
		if id, ok := strings.CutSuffix(name, rollout.RolloutExt+rollout.ColdExt); ok && rollout.ValidateThreadID(id) == nil {
			// A conversion cut short after the new copy got its name: both
			// were checked equal; keep the plain one.
			cold := filepath.Join(l.root, rollout.ArchivedDir, name)
			if plain, _ := rollout.ArchivedPath(l.root, id); l.exists(plain) {
				release, busy, err := l.lockAll(plain, cold)
				if err != nil {
					return err
				}
				if busy {
					continue // a live conversion in another process
				}
				err = l.fs.Remove(cold)
				if err == nil {
					err = l.fs.SyncDir(filepath.Dir(cold))
				}
				release()
				if err != nil {
					return errors.Wrapf(err, "finish the compression of %s", id)
				}
			}
			continue
		}
		id, ok := strings.CutSuffix(name, rollout.RolloutExt)
		if !ok || rollout.ValidateThreadID(id) != nil {
			continue
		}
		active, _ := rollout.ActivePath(l.root, id)
		arch, _ := rollout.ArchivedPath(l.root, id)
		if _, err := l.fs.Stat(active); err != nil {
			continue
		}
		same, last, err := l.sameRollout(active, arch)
		if err != nil {
			return err
		}
		if !same {
			l.logger().Error("rolloutdb: a thread has two different rollouts, active and archived; the active one is used", "thread", id)
			continue
		}
		drop := arch
		if last == rollout.KindArchived {
			drop = active
		}
		release, busy, err := l.lockAll(active)
		if err != nil {
			return err
		}
		if busy {
			continue // a live writer elsewhere: not a crash's leftover
		}
		err = l.fs.Remove(drop)
		if err == nil {
			err = l.fs.SyncDir(filepath.Dir(drop))
		}
		release()
		if err != nil {
			return errors.Wrapf(err, "finish the move of %s", id)
		}
		kept := rollout.ActiveDir
		if drop == active {
			kept = rollout.ArchivedDir
		}
		l.logger().Info("rolloutdb: finished a move a crash interrupted", "thread", id, "kept", kept)
	}
	return ctx.Err()
}

// lockAll takes the writer locks of the files at paths. busy reports that
// one is held elsewhere (then none is kept); release drops the ones taken.
// Open uses it not to mistake another process's operation in flight for
// the leftover of a crash.
func (l *localLog) lockAll(paths ...string) (release func(), busy bool, err error) {
	var held []vfs.File
	release = func() {
		for _, f := range held {
			f.Close()
		}
	}
	for _, p := range paths {
		f, err := l.fs.OpenRW(p)
		if err != nil {
			release()
			return nil, false, err
		}
		held = append(held, f)
		if err := f.Lock(); err != nil {
			release()
			if errors.Is(err, rollout.ErrThreadLocked) {
				return nil, true, nil
			}
			return nil, false, err
		}
	}
	return release, false, nil
}

// sameRollout reports whether two paths hold the same rollout (same file
// id and size: two names of one file), and the kind of its last lifecycle
// record.
func (l *localLog) sameRollout(a, b string) (bool, rollout.Kind, error) {
	read := func(path string) (uint64, int64, rollout.Kind, error) {
		f, err := l.fs.Open(path)
		if err != nil {
			return 0, 0, "", err
		}
		defer f.Close()
		size, err := f.Size()
		if err != nil {
			return 0, 0, "", err
		}
		r, err := rollout.NewReader(f, size, rollout.ReaderOptions{Path: path})
		if err != nil {
			return 0, size, "", nil // unreadable: not the same for sure
		}
		var last rollout.Kind
		for r.Next() {
			if k := r.Record().Kind; k == rollout.KindArchived || k == rollout.KindRestored {
				last = k
			}
		}
		return r.Header().FileID, size, last, r.Err()
	}
	ida, sa, last, err := read(a)
	if err != nil {
		return false, "", err
	}
	idb, sb, _, err := read(b)
	if err != nil {
		return false, "", err
	}
	return ida != 0 && ida == idb && sa == sb, last, nil
}

// SweepTemps removes the temporary files a crash left among the
// rollouts, older than grace (default 1 hour: another handle may be
// writing one now). A temporary file is never a rollout: its name holds
// ".tmp-" (at the start: Create; after the rollout's name: fork, cold
// compression), which no thread id can.
func (l *localLog) SweepTemps(grace time.Duration) ([]string, error) {
	if grace <= 0 {
		grace = time.Hour
	}
	old := time.Now().Add(-grace)
	var removed []string
	for _, d := range []string{rollout.ActiveDir, rollout.ArchivedDir} {
		dir := filepath.Join(l.root, d)
		names, err := l.fs.ReadDir(dir)
		if err != nil {
			return removed, errors.Wrapf(err, "list %s", dir)
		}
		for _, n := range names {
			if !strings.Contains(n, ".tmp-") {
				continue
			}
			path := filepath.Join(dir, n)
			info, err := l.fs.Lstat(path)
			if err != nil || !info.Regular || !info.ModTime.Before(old) {
				continue
			}
			if err := l.fs.Remove(path); err != nil && !vfs.IsNotExist(err) {
				return removed, errors.Wrapf(err, "remove %s", path)
			}
			removed = append(removed, filepath.Join(d, n))
		}
	}
	return removed, nil
}
