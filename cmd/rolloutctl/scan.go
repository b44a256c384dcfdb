package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/journal"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// rolloutFile is one rollout found in a workspace: a file, or a fleet
// thread's records (open set).
type rolloutFile struct {
	ID       string
	Path     string
	Archived bool
	Cold     bool // compressed (.rollout.zst): read-only, repair refuses it
	// open reads a fleet thread's records as rollout bytes; nil for a
	// file (Path).
	open func() (io.ReaderAt, int64, func(), error)
}

// read opens the rollout's bytes, read-only.
func (f rolloutFile) read() (io.ReaderAt, int64, func(), error) {
	if f.open != nil {
		return f.open()
	}
	return rollout.OpenRead(nil, f.Path)
}

// fleetLogs are the fleet workspaces this run opened, by DSN: each holds a
// lease until closeFleets.
var fleetLogs = map[string]*fleet.Log{}

// fleetLog opens the fleet workspace at dsn once per run.
func fleetLog(ctx context.Context, dsn string) (*fleet.Log, error) {
	if l := fleetLogs[dsn]; l != nil {
		return l, nil
	}
	l, err := fleet.Open(ctx, dsn, fleet.Options{Host: "rolloutctl-" + rollout.NewID()})
	if err != nil {
		return nil, err
	}
	fleetLogs[dsn] = l
	return l, nil
}

// closeFleets releases the leases of the fleet workspaces this run opened.
func closeFleets() {
	for dsn, l := range fleetLogs {
		_ = l.Close()
		delete(fleetLogs, dsn)
	}
}

// isFleet reports whether a workspace is a fleet's (a postgres:// DSN).
func isFleet(workspace string) bool {
	_, _, err := fleet.SplitDSN(workspace)
	return err == nil
}

// findFleetThreads lists a fleet workspace's threads (or the named ones)
// as rolloutFiles, active first.
func findFleetThreads(dsn string, ids []string) ([]rolloutFile, error) {
	ctx := context.Background()
	l, err := fleetLog(ctx, dsn)
	if err != nil {
		return nil, err
	}
	file := func(id, loc string) rolloutFile {
		return rolloutFile{ID: id, Path: l.Path(id), Archived: loc == projection.LocationArchived,
			open: func() (io.ReaderAt, int64, func(), error) {
				s, err := l.Read(ctx, id)
				if err != nil {
					return nil, 0, nil, err
				}
				return s, s.Size(), func() { _ = s.Close() }, nil
			}}
	}
	var out []rolloutFile
	if len(ids) > 0 {
		for _, id := range ids {
			loc, err := l.Locate(ctx, id)
			if err != nil {
				return nil, errors.Wrapf(err, "no thread %q in %s", id, l.Path(""))
			}
			out = append(out, file(id, loc))
		}
		return out, nil
	}
	for _, loc := range []string{projection.LocationActive, projection.LocationArchived} {
		got, err := l.List(ctx, loc)
		if err != nil {
			return nil, err
		}
		for _, id := range got {
			out = append(out, file(id, loc))
		}
	}
	return out, nil
}

// dataDir is the workspace's data directory.
func dataDir(workspace string) string { return filepath.Join(workspace, ".craft") }

// findRollouts lists the rollouts of a workspace, active first, each sorted
// by id. ids, if given, select threads (an unknown id is an error).
func findRollouts(workspace string, ids []string) ([]rolloutFile, error) {
	for _, id := range ids {
		if err := rollout.ValidateThreadID(id); err != nil {
			return nil, &exitError{code: exitUsage, err: err}
		}
	}
	if isFleet(workspace) {
		return findFleetThreads(workspace, ids)
	}
	root := dataDir(workspace)
	if _, err := os.Stat(filepath.Join(root, "workspace.json")); err != nil {
		return nil, errors.WithHint(errors.Newf("%s is not a rolloutdb workspace", workspace),
			"pass the workspace with -w DIR, or make one with: rolloutctl demo -w DIR")
	}
	// A host that crashed may have acknowledged records that are only in
	// its journal yet: they go back into the rollouts before any is read
	// (or repaired, which would otherwise cut them as a torn tail).
	rep, err := journal.Recover(context.Background(), vfs.OS, root)
	if err != nil {
		return nil, errors.Wrap(err, "replay the journal of a crashed host")
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(os.Stderr, "warning: journal %s: thread %s at offset %d not replayed: %s\n", p.Journal, p.Thread, p.Offset, p.Reason)
	}
	if len(ids) > 0 {
		return findThreads(workspace, root, ids)
	}
	var out []rolloutFile
	for _, d := range []struct {
		dir      string
		archived bool
	}{{rollout.ActiveDir, false}, {rollout.ArchivedDir, true}} {
		ents, err := os.ReadDir(filepath.Join(root, d.dir))
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		for _, e := range ents {
			name := e.Name()
			cold := d.archived && strings.HasSuffix(name, rollout.RolloutExt+rollout.ColdExt)
			if cold {
				name = strings.TrimSuffix(name, rollout.ColdExt)
			}
			id, ok := strings.CutSuffix(name, rollout.RolloutExt)
			if !ok || rollout.ValidateThreadID(id) != nil || (!cold && name != e.Name()) {
				continue
			}
			out = append(out, rolloutFile{ID: id, Path: filepath.Join(root, d.dir, e.Name()), Archived: d.archived, Cold: cold})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Archived == out[j].Archived && out[i].ID < out[j].ID })
	return out, nil
}

// findThreads finds the named threads' rollouts by their paths, in the
// order the library looks (active, archived, archived compressed): a
// command about one thread costs the same in a workspace of any size.
func findThreads(workspace, root string, ids []string) ([]rolloutFile, error) {
	var sel []rolloutFile
	for _, id := range ids {
		found := false
		for _, p := range []struct {
			path           func(string, string) (string, error)
			archived, cold bool
		}{{rollout.ActivePath, false, false}, {rollout.ArchivedPath, true, false}, {rollout.ColdPath, true, true}} {
			path, err := p.path(root, id)
			if err != nil {
				return nil, &exitError{code: exitUsage, err: err}
			}
			if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
				sel = append(sel, rolloutFile{ID: id, Path: path, Archived: p.archived, Cold: p.cold})
				found = true
				break
			}
		}
		if !found {
			return nil, errors.Newf("no thread %q in %s", id, workspace)
		}
	}
	return sel, nil
}

// scanResult is what one pass over a rollout found.
type scanResult struct {
	Header      *rollout.ThreadOpened
	Records     int
	Bytes       int64
	Kinds       map[rollout.Kind]int
	Turns       int
	OpenTurn    string
	Checkpoints []int64 // frame offsets
	Damage      []*rollout.CorruptionError
	TornTail    *rollout.CorruptionError
	LastSeq     uint64
	// With frames: the frames read, their payloads as stored and as
	// decoded (zstd-compressed frames store less), and the size of the
	// rollout once decompressed when it is archived cold.
	Frames, Compressed int
	Stored, Raw, Plain int64
}

// scan reads a rollout read-only (it takes no lock: a live writer may be
// appending; the reader sees a consistent prefix).
func scan(f rolloutFile, frames bool, each func(off int64, rec rollout.Record)) (*scanResult, error) {
	path := f.Path
	src, size, done, err := f.read()
	if err != nil {
		return nil, err
	}
	defer done()
	r, err := rollout.NewReader(src, size, rollout.ReaderOptions{Path: path})
	if err != nil {
		return nil, err
	}
	res := &scanResult{Bytes: size, Plain: size, Kinds: map[rollout.Kind]int{}}
	if strings.HasSuffix(path, rollout.ColdExt) {
		if st, err := os.Stat(path); err == nil {
			res.Bytes = st.Size() // on disk; size is what it decompresses to
		}
	}
	lastFrame := int64(-1)
	for r.Next() {
		rec := r.Record()
		if off := r.FrameOffset(); frames && off != lastFrame {
			lastFrame = off
			if fh, err := rollout.ReadFrameHeader(src, off); err == nil {
				res.Frames++
				res.Stored += int64(fh.Length)
				res.Raw += int64(fh.RawLen)
				if fh.Length != fh.RawLen {
					res.Compressed++
				}
			}
		}
		res.Records++
		res.Kinds[rec.Kind]++
		switch rec.Kind {
		case rollout.KindThreadOpened:
			if res.Header == nil {
				var h rollout.ThreadOpened
				if rec.Decode(&h) == nil {
					res.Header = &h
				}
			}
		case rollout.KindTurnStarted:
			res.Turns++
			res.OpenTurn = rec.Turn
		case rollout.KindTurnCompleted, rollout.KindTurnAborted:
			if rec.Turn == res.OpenTurn {
				res.OpenTurn = ""
			}
		case rollout.KindCheckpoint:
			res.Checkpoints = append(res.Checkpoints, r.FrameOffset())
		}
		if each != nil {
			each(r.FrameOffset(), rec)
		}
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	res.Damage, res.TornTail, res.LastSeq = r.Damage(), r.TornTail(), r.LastSeq()
	return res, nil
}

// workspaceID reads the workspace's id from workspace.json.
func workspaceID(workspace string) (string, error) {
	if isFleet(workspace) {
		l, err := fleetLog(context.Background(), workspace)
		if err != nil {
			return "", err
		}
		return l.WorkspaceID(), nil
	}
	b, err := os.ReadFile(filepath.Join(dataDir(workspace), "workspace.json"))
	if err != nil {
		return "", errors.Wrap(err, "read workspace.json")
	}
	var ws struct {
		ID string `json:"workspace_id"`
	}
	if err := json.Unmarshal(b, &ws); err != nil || ws.ID == "" {
		return "", errors.Newf("%s/workspace.json is damaged", dataDir(workspace))
	}
	return ws.ID, nil
}
