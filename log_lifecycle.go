package rolloutdb

import (
	"context"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
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
