package rolloutdb

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// The local log's lifecycle: a thread's location is the directory its
// rollout is in (threads/active, threads/archived, compressed or not
// there), and its writer lock is the OS lock on that file.

// find returns where a thread's rollout is now: its path and location,
// the active rollout first, then the archived one, plain or compressed.
func (l *localLog) find(id string) (path, loc string, err error) {
	for _, c := range []struct {
		path func(root, id string) (string, error)
		loc  string
	}{
		{rollout.ActivePath, projection.LocationActive},
		{rollout.ArchivedPath, projection.LocationArchived},
		{rollout.ColdPath, projection.LocationArchived},
	} {
		path, err := c.path(l.root, id)
		if err != nil {
			return "", "", err
		}
		if _, err := l.fs.Stat(path); err == nil {
			return path, c.loc, nil
		}
	}
	return "", "", errors.Wrapf(projection.ErrNotFound, "thread %s", id)
}

// Locate returns the directory the thread's rollout is in, as a location.
func (l *localLog) Locate(ctx context.Context, id string) (string, error) {
	_, loc, err := l.find(id)
	return loc, err
}

// List returns the ids of the rollouts in the location's directory (an
// archived thread's rollout, plain or compressed), sorted.
func (l *localLog) List(ctx context.Context, loc string) ([]string, error) {
	dir, ext := rollout.ActiveDir, rollout.RolloutExt
	if loc == projection.LocationArchived {
		dir = rollout.ArchivedDir
	}
	names, err := l.fs.ReadDir(filepath.Join(l.root, dir))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, n := range names {
		if loc == projection.LocationArchived {
			n = strings.TrimSuffix(n, rollout.ColdExt)
		}
		id, ok := strings.CutSuffix(n, ext)
		if ok && rollout.ValidateThreadID(id) == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// Read opens the thread's rollout wherever it is; a compressed one is
// read whole into memory (rollout.OpenRead).
func (l *localLog) Read(ctx context.Context, id string) (ThreadData, error) {
	path, loc, err := l.find(id)
	if err != nil {
		return ThreadData{}, err
	}
	src, size, done, err := rollout.OpenRead(l.fs, path)
	if err != nil {
		return ThreadData{}, err
	}
	return ThreadData{ReaderAt: src, Size: size, Path: path, Location: loc, Close: func() error { done(); return nil }}, nil
}

// Free takes the rollout's lock and lets it go at once.
func (l *localLog) Free(ctx context.Context, id string) error {
	path, _, err := l.find(id)
	if err != nil {
		return err
	}
	f, err := l.fs.OpenRW(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Lock()
}

// archivedExists reports whether a thread id is taken by an archived
// rollout, plain or compressed.
func (l *localLog) archivedExists(id string) bool {
	plain, err := rollout.ArchivedPath(l.root, id)
	if err != nil {
		return false
	}
	cold, _ := rollout.ColdPath(l.root, id)
	return l.exists(plain) || l.exists(cold)
}

func (l *localLog) exists(path string) bool {
	_, err := l.fs.Stat(path)
	return err == nil
}

// Move renames the thread's rollout into the directory of to, durably,
// after turning a compressed archived rollout back into a plain one.
// Without held it holds the rollout's lock for the rename.
func (l *localLog) Move(ctx context.Context, id, from, to string, held ThreadLog) error {
	if from == to {
		return errors.Newf("rolloutdb: move of %s from %s to %s", id, from, to)
	}
	if from == projection.LocationArchived {
		if err := l.decompress(id); err != nil {
			return err
		}
	}
	src, err := l.path(id, from)
	if err != nil {
		return err
	}
	dst, err := l.path(id, to)
	if err != nil {
		return err
	}
	if held != nil {
		return l.move(src, dst) // this DB holds the lock
	}
	return l.lockedMove(id, src, dst)
}

// Delete renames the thread's rollout, holding its lock, to
// <name>.deleted-<ns> beside it, which nothing lists or loads: the one
// step. The renamed rollout is what it queues; Purge removes it.
func (l *localLog) Delete(ctx context.Context, id string, queue func(paths ...string) error) error {
	path, _, err := l.find(id)
	if err != nil {
		return err
	}
	gone := path + deletedMark + strconv.FormatInt(time.Now().UnixNano(), 10)
	rel, _ := filepath.Rel(l.root, gone)
	if err := queue(filepath.ToSlash(rel)); err != nil {
		return err
	}
	return l.lockedMove(id, path, gone)
}

// deletedMark follows the name of a deleted rollout, before the time of
// its delete in nanoseconds.
const deletedMark = ".deleted-"

// Leftover tells a deleted rollout's path (relative to the data
// directory: threads/<dir>/<id>.rollout[.zst].deleted-<ns>) from anything
// else.
func (l *localLog) Leftover(entry string) (string, bool) {
	parts := strings.Split(entry, "/")
	if len(parts) != 3 || parts[0] != "threads" || (parts[1] != "active" && parts[1] != "archived") {
		return "", false
	}
	name, stamp, ok := strings.Cut(parts[2], deletedMark)
	if !ok || stamp == "" || strings.Trim(stamp, "0123456789") != "" {
		return "", false
	}
	id, ok := strings.CutSuffix(strings.TrimSuffix(name, rollout.ColdExt), rollout.RolloutExt)
	if !ok || rollout.ValidateThreadID(id) != nil {
		return "", false
	}
	return id, true
}

// Purge removes a deleted rollout (a symbolic link under its name is
// removed, never followed).
func (l *localLog) Purge(ctx context.Context, entry string) error {
	if _, ok := l.Leftover(entry); !ok {
		return errors.Newf("rolloutdb: %q is not a deleted rollout", entry)
	}
	path, err := rollout.SafeJoin(l.root, entry)
	if err != nil {
		return err
	}
	if err := l.fs.Remove(path); err != nil && !vfs.IsNotExist(err) {
		return err
	}
	return nil
}

// lockedMove renames a rollout holding its lock (so no live writer
// elsewhere has it), then syncs both directories.
func (l *localLog) lockedMove(id, from, to string) error {
	f, err := l.fs.OpenRW(from)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Lock(); err != nil {
		return errors.Wrapf(err, "%s", id)
	}
	return l.move(from, to)
}

// move renames a file and makes the rename durable in both directories.
func (l *localLog) move(from, to string) error {
	if _, err := l.fs.Stat(to); err == nil {
		return errors.Wrapf(os.ErrExist, "%s", to)
	}
	if err := l.fs.Rename(from, to); err != nil {
		return err
	}
	if err := l.fs.SyncDir(filepath.Dir(to)); err != nil {
		return err
	}
	if filepath.Dir(from) != filepath.Dir(to) {
		return l.fs.SyncDir(filepath.Dir(from))
	}
	return nil
}

// Write writes the rollout in full under a temporary name, syncs it, and
// only then gives it its name in threads/active (a hard link: create-new)
// and syncs the directory: after a crash it is there whole or not at all.
func (l *localLog) Write(ctx context.Context, id string, frames [][]rollout.Record) error {
	dst, err := rollout.ActivePath(l.root, id)
	if err != nil {
		return err
	}
	if l.archivedExists(id) {
		return errors.Wrapf(rollout.ErrThreadExists, "%s (archived)", id)
	}
	tmp := dst + ".tmp-" + rollout.NewID()
	if err := rollout.WriteFile(ctx, l.fs, tmp, id, frames, l.compress); err != nil {
		_ = l.fs.Remove(tmp)
		return err
	}
	defer l.fs.Remove(tmp)
	if err := l.fs.Link(tmp, dst); err != nil {
		if vfs.IsExist(err) {
			err = errors.Mark(err, rollout.ErrThreadExists)
		}
		return err
	}
	return l.fs.SyncDir(filepath.Dir(dst))
}
