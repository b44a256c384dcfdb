package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/recovery"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// wsRef says where a workspace is and how to open it.
type wsRef struct {
	fs        vfs.FS // nil: the operating system's
	dir       string // the workspace directory
	statePath string // state.db; "" for the default (in the data directory)
	scratch   string // a directory on disk for the state.dbs of rebuilds
	logger    *slog.Logger
}

func (ws wsRef) open(ctx context.Context, statePath string) (*rolloutdb.DB, error) {
	return rolloutdb.Open(ctx, ws.dir, rolloutdb.Options{FS: ws.fs, StatePath: statePath, Sync: rollout.SyncAlways, Logger: ws.logger})
}

func (ws wsRef) fsys() vfs.FS {
	if ws.fs == nil {
		return vfs.OS
	}
	return ws.fs
}

var rebuilds atomic.Int64

// verify is the check after a crash, a kill or faults: the workspace
// opens with the state.db the writers left; every rollout is checked
// against the ledger (checkRollouts); the projections, read-repaired, equal
// those of the workspace opened again with a fresh state.db (a rebuild
// from the rollouts); every thread resumes (the torn tail is cut), its
// resumed turns equal its projected ones, its interrupted turns are
// aborted and it takes a new append; and the projections still equal a
// rebuild (the second DB's, rebuilt again). It returns the threads found,
// for the next iteration to continue.
func (c *checker) verify(ctx context.Context, ws wsRef, led *ledger, strictFailed bool) []string {
	db, err := ws.open(ctx, ws.statePath)
	if err != nil {
		c.checkProblems(led)
		c.failf(failUnreadable, "reopen the workspace %s: %v", ws.dir, err)
		return nil
	}
	defer db.Close()
	return c.verifyDB(ctx, ws, db, led, strictFailed)
}

// verifyDB is verify on a workspace already open (no thread of it open).
func (c *checker) verifyDB(ctx context.Context, ws wsRef, db *rolloutdb.DB, led *ledger, strictFailed bool) []string {
	c.checkProblems(led)
	artifactDir := db.DataDir()
	debugf("verify: opened")
	ids, found := c.checkRollouts(ws.fsys(), db.DataDir(), db.WorkspaceID(), led, artifactDir, strictFailed)
	debugf("verify: %d rollouts checked", len(ids))
	rb := c.openRebuild(ctx, ws)
	if rb != nil {
		defer rb.close()
		c.compare(ctx, db, rb.db, ids, "after the crash")
	}
	debugf("verify: compared")
	for _, id := range ids {
		c.resumeAndAppend(ctx, db, id, found[id], led)
	}
	debugf("verify: resumed")
	if rb != nil {
		// The same rebuilt state.db, rebuilt again from the rollouts as
		// they are now.
		if _, err := rb.db.Rebuild(ctx, projection.RebuildOptions{Restart: true}); err != nil {
			c.failf(failUnreadable, "rebuild state.db: %v", err)
		} else {
			c.compare(ctx, db, rb.db, ids, "after every thread was resumed and appended to")
		}
	}
	debugf("verify: compared")
	c.checkProblems(led)
	return ids
}

// resumeAndAppend resumes a thread (its writer cuts a torn tail), compares
// what resume replays with what the projection pages, closes its
// interrupted turns and appends a record: the rollout continues.
func (c *checker) resumeAndAppend(ctx context.Context, db *rolloutdb.DB, id string, rc rolloutCheck, led *ledger) {
	th, st, err := db.Resume(ctx, id, rolloutdb.ResumeOptions{})
	if err != nil {
		c.failf(failUnreadable, "thread %s: resume: %v", id, err)
		return
	}
	defer func() {
		if err := th.Close(); err != nil {
			c.failf(failUnreadable, "thread %s: close after the verification append: %v", id, err)
		}
	}()
	if rc.ok && st.LastSeq != rc.lastSeq {
		c.failf(failOther, "thread %s: resume ends at seq %d, a plain read at seq %d", id, st.LastSeq, rc.lastSeq)
	}
	for _, s := range st.Report.Skipped {
		if s.Reason != recovery.ReasonRolledBack {
			c.failf(failUnreadable, "thread %s: resume skipped %+v", id, s)
		}
	}
	if st.Report.TornTail {
		c.count("torn_tails_cut", 1)
	}
	if len(st.Interrupted) > 0 {
		c.count("interrupted_turns", int64(len(st.Interrupted)))
	}
	c.compareResume(ctx, db, id, st)

	j := led.journal()
	tag := fmt.Sprintf("v%s%d", c.mode[:1], c.iter)
	for i, turn := range st.Interrupted {
		op := fmt.Sprintf("%s-%s-abort%d", tag, id, i)
		reason := "interrupted; aborted by the checker (" + op + ")"
		j("A " + id + " " + op + " " + recordKey(rollout.KindTurnAborted, turn, rollout.TurnAborted{Reason: reason}))
		if err := th.AbortInterrupted(ctx, turn, reason); err != nil {
			j("F " + id + " " + op + " " + errClass(err))
			c.failf(failUnreadable, "thread %s: abort interrupted turn %s after reopening: %v", id, turn, err)
			return
		}
		j(fmt.Sprintf("K %s %s 0 0", id, op))
	}
	name := "verified-" + tag
	body := rollout.MetadataUpdated{Name: &name, Labels: []string{"verified"}}
	rec, _ := rollout.NewRecord(rollout.KindMetadataUpdated, "", body)
	op := tag + "-" + id + "-append"
	j("A " + id + " " + op + " " + recordKey(rollout.KindMetadataUpdated, "", body))
	res, err := th.Append(ctx, []rollout.Record{rec}, rollout.AppendOptions{})
	if err != nil {
		j("F " + id + " " + op + " " + errClass(err))
		c.failf(failUnreadable, "thread %s: does not take an append after reopening: %v", id, err)
		return
	}
	j(fmt.Sprintf("K %s %s %d %d", id, op, res.FirstSeq, res.LastSeq))
	if rc.ok && len(st.Interrupted) == 0 && res.FirstSeq != rc.lastSeq+1 {
		c.failf(failOther, "thread %s: the first append after reopening got seq %d; the rollout ended at %d", id, res.FirstSeq, rc.lastSeq)
	}
}

// compareResume checks projection = resume: the turns resume replays are
// the turns state.db pages, with the same items.
func (c *checker) compareResume(ctx context.Context, db *rolloutdb.DB, id string, st *recovery.State) {
	turns, err := db.Turns(ctx, id, 1, int64(len(st.Turns))+1)
	if err != nil {
		c.failf(failMismatch, "thread %s: turns from state.db: %v", id, err)
		return
	}
	if len(turns) != len(st.Turns) {
		c.failf(failMismatch, "thread %s: resume has %d visible turns, state.db %d", id, len(st.Turns), len(turns))
		return
	}
	for i, rt := range st.Turns {
		pt := turns[i]
		if rt.ID != pt.ID || rt.Status != pt.Status {
			c.failf(failMismatch, "thread %s: turn %d is %s (%s) in resume, %s (%s) in state.db", id, i+1, rt.ID, rt.Status, pt.ID, pt.Status)
			return
		}
		if len(rt.Items) == 0 && len(pt.Items) == 0 {
			continue // nil or empty
		}
		if d := fieldDiffs(rt.Items, pt.Items, "resume", "state.db"); len(d) > 0 {
			c.failf(failMismatch, "thread %s: turn %s: items differ between resume and state.db: %s", id, rt.ID, strings.Join(d, "; "))
			return
		}
	}
}

// rebuilt is the workspace opened a second time with a fresh state.db,
// which Open builds from the rollouts.
type rebuilt struct {
	db   *rolloutdb.DB
	path string
}

func (c *checker) openRebuild(ctx context.Context, ws wsRef) *rebuilt {
	path := filepath.Join(ws.scratch, fmt.Sprintf("rebuild-%d.db", rebuilds.Add(1)))
	db, err := ws.open(ctx, path)
	if err != nil {
		removeDB(path)
		c.failf(failUnreadable, "open the workspace with a fresh state.db (a rebuild): %v", err)
		return nil
	}
	return &rebuilt{db: db, path: path}
}

func (r *rebuilt) close() {
	_ = r.db.Close()
	removeDB(r.path)
}

// compare compares db's projections, read-repaired, with a rebuild's.
func (c *checker) compare(ctx context.Context, db, rb *rolloutdb.DB, ids []string, when string, ignore ...string) {
	for _, d := range compareProjections(ctx, db, rb, ids, ignore...) {
		c.failf(failMismatch, "%s: state.db after read-repair differs from a rebuild: %s", when, d)
	}
}

func removeDB(path string) {
	for _, s := range []string{"", "-wal", "-shm"} {
		_ = os.Remove(path + s)
	}
}

// compareProjections compares what two DBs of one workspace answer: the
// lists of every scope (which threads, in which order, each as listed), each
// thread's info and its turns with their items. Every field must match: a
// read-repaired row says everything a rebuilt one does. Each element of the
// result is one thread (or one list) that differs. Fields named (by their
// JSON names) in ignore are left out.
func compareProjections(ctx context.Context, a, b *rolloutdb.DB, ids []string, ignore ...string) []string {
	var out []string
	// Threads first, through the reads that repair them one by one; the
	// lists are compared after, when every row is fresh, and again in
	// their own right.
	for _, id := range ids {
		ia, errA := a.ThreadInfo(ctx, id)
		ib, errB := b.ThreadInfo(ctx, id)
		if errA != nil || errB != nil {
			out = append(out, fmt.Sprintf("thread %s: info: state.db %v, rebuild %v", id, errA, errB))
			continue
		}
		if d := fieldDiffs(ia, ib, "state.db", "rebuild", ignore...); len(d) > 0 {
			out = append(out, fmt.Sprintf("thread %s: %s", id, strings.Join(d, "; ")))
			continue
		}
		ta, errA := a.Turns(ctx, id, 1, ia.Turns)
		tb, errB := b.Turns(ctx, id, 1, ib.Turns)
		if errA != nil || errB != nil {
			out = append(out, fmt.Sprintf("thread %s: turns: state.db %v, rebuild %v", id, errA, errB))
			continue
		}
		if len(ta) != len(tb) {
			out = append(out, fmt.Sprintf("thread %s: %d turns in state.db, %d in the rebuild", id, len(ta), len(tb)))
			continue
		}
		for i := range ta {
			if d := fieldDiffs(ta[i], tb[i], "state.db", "rebuild", ignore...); len(d) > 0 {
				out = append(out, fmt.Sprintf("thread %s: turn %d (%s): %s", id, i+1, ta[i].ID, strings.Join(d, "; ")))
				break
			}
		}
	}
	for _, sc := range []struct {
		name  string
		scope projection.Scope
	}{{"active", projection.ScopeActive}, {"archived", projection.ScopeArchived}, {"all", projection.ScopeAll}} {
		la, errA := listAll(ctx, a, sc.scope)
		lb, errB := listAll(ctx, b, sc.scope)
		if errA != nil || errB != nil {
			out = append(out, fmt.Sprintf("list %s: state.db %v, rebuild %v", sc.name, errA, errB))
			continue
		}
		if d := fieldDiffs(la, lb, "state.db", "rebuild", ignore...); len(d) > 0 {
			out = append(out, fmt.Sprintf("list %s: %s", sc.name, strings.Join(d, "; ")))
		}
	}
	return out
}

func listAll(ctx context.Context, db *rolloutdb.DB, scope projection.Scope) ([]projection.ThreadInfo, error) {
	var all []projection.ThreadInfo
	o := projection.ListOptions{Scope: scope, Limit: 1000}
	for {
		p, err := db.List(ctx, o)
		if err != nil {
			return nil, err
		}
		all = append(all, p.Threads...)
		if p.NextCursor == "" {
			return all, nil
		}
		o.Cursor = p.NextCursor
	}
}

// fieldDiffs compares two values by their JSON form and names the fields
// (paths) that differ, but for fields named in ignore (at any depth).
func fieldDiffs(a, b any, an, bn string, ignore ...string) []string {
	var va, vb any
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	_ = json.Unmarshal(ja, &va)
	_ = json.Unmarshal(jb, &vb)
	var out []string
	diffValues("", va, vb, an, bn, &out, ignore)
	return out
}

const maxDiffs = 6

func diffValues(path string, a, b any, an, bn string, out *[]string, ignore []string) {
	if len(*out) >= maxDiffs || (len(ignore) == 0 && reflect.DeepEqual(a, b)) {
		return
	}
	switch x := a.(type) {
	case map[string]any:
		if y, ok := b.(map[string]any); ok {
			keys := map[string]bool{}
			for k := range x {
				keys[k] = true
			}
			for k := range y {
				keys[k] = true
			}
			var ks []string
			for k := range keys {
				ks = append(ks, k)
			}
			sort.Strings(ks)
			for _, k := range ks {
				if !slices.Contains(ignore, k) {
					diffValues(path+"."+k, x[k], y[k], an, bn, out, ignore)
				}
			}
			return
		}
	case []any:
		if y, ok := b.([]any); ok && len(x) == len(y) {
			for i := range x {
				diffValues(fmt.Sprintf("%s[%d]", path, i), x[i], y[i], an, bn, out, ignore)
			}
			return
		}
	}
	if !reflect.DeepEqual(a, b) {
		*out = append(*out, fmt.Sprintf("%s: %s %s, %s %s", strings.TrimPrefix(path, "."), an, short(a), bn, short(b)))
	}
}

func short(v any) string {
	b, _ := json.Marshal(v)
	s := string(b)
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}
