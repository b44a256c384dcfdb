package main

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// stats are the counts of a mode (and of the whole run).
type stats struct {
	Iterations   int `json:"iterations"`
	Acknowledged int `json:"acknowledged"`
	// Lost counts acknowledged records not found intact where they were
	// acknowledged. Must be 0.
	Lost int `json:"lost"`
	// Unreadable counts rollouts (or workspaces) that do not open, resume
	// or take an append, or that hold damage. Must be 0.
	Unreadable int `json:"unreadable"`
	// ProjectionMismatches counts threads (or lists) whose state.db
	// projection after read-repair differs from a rebuild. Must be 0.
	ProjectionMismatches int `json:"projection_mismatches"`
	// Failures counts every failed check, the three above included.
	Failures int `json:"failures"`
	// Counters say what the runs did (kills, crashes, faults injected,
	// torn tails, records present though never acknowledged...).
	Counters map[string]int64 `json:"counters,omitempty"`
}

func (s *stats) add(o *stats) {
	s.Iterations += o.Iterations
	s.Acknowledged += o.Acknowledged
	s.Lost += o.Lost
	s.Unreadable += o.Unreadable
	s.ProjectionMismatches += o.ProjectionMismatches
	s.Failures += o.Failures
	for k, v := range o.Counters {
		s.count(k, v)
	}
}

func (s *stats) count(name string, n int64) {
	if s.Counters == nil {
		s.Counters = map[string]int64{}
	}
	s.Counters[name] += n
}

// failure kinds: which count a failed check adds to besides Failures.
type failKind int

const (
	failOther failKind = iota
	failUnreadable
	failMismatch
)

// checker checks one iteration of a mode and says what failed, with what
// it takes to reproduce it.
type checker struct {
	mode string
	seed uint64
	iter int
	st   *stats
	mu   sync.Mutex
	out  io.Writer
	// printed caps the failures printed per iteration (all are counted).
	printed int
}

const maxPrinted = 40

func (c *checker) failf(kind failKind, format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st.Failures++
	switch kind {
	case failUnreadable:
		c.st.Unreadable++
	case failMismatch:
		c.st.ProjectionMismatches++
	}
	c.printed++
	if c.printed <= maxPrinted {
		fmt.Fprintf(c.out, "FAIL [mode=%s seed=%d iteration=%d] %s\n", c.mode, c.seed, c.iter, fmt.Sprintf(format, args...))
	} else if c.printed == maxPrinted+1 {
		fmt.Fprintf(c.out, "FAIL [mode=%s seed=%d iteration=%d] ... more failures in this iteration not shown\n", c.mode, c.seed, c.iter)
	}
}

// lost reports n acknowledged records lost.
func (c *checker) lost(n int, format string, args ...any) {
	c.mu.Lock()
	c.st.Lost += n
	c.mu.Unlock()
	c.failf(failOther, format, args...)
}

func (c *checker) count(name string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st.count(name, n)
}

// diskRecord is a record found in a rollout.
type diskRecord struct {
	seq  uint64
	kind rollout.Kind
	turn string
	key  string
}

func (r diskRecord) String() string {
	if r.turn == "" {
		return fmt.Sprintf("seq %d %s", r.seq, r.kind)
	}
	return fmt.Sprintf("seq %d %s of turn %s", r.seq, r.kind, r.turn)
}

// rolloutCheck is what checkRollout found.
type rolloutCheck struct {
	lastSeq uint64
	torn    bool
	ok      bool // opened and read
}

// rolloutSource opens a rollout's bytes for reading: a file, or a fleet
// thread's frames.
type rolloutSource func() (src io.ReaderAt, size int64, path string, closeFn func(), err error)

// fileSource reads the rollout file at path.
func fileSource(fsys vfs.FS, path string) rolloutSource {
	return func() (io.ReaderAt, int64, string, func(), error) {
		src, size, closeFn, err := rollout.OpenRead(fsys, path)
		return src, size, path, closeFn, err
	}
}

// checkRollouts checks every active rollout of the workspace data
// directory root against the ledger: which threads exist, and every
// thread's records (see checkRollout). It returns the thread ids found and
// what was found in each.
func (c *checker) checkRollouts(fsys vfs.FS, root, wsID string, led *ledger, artifactDir string, strictFailed bool) ([]string, map[string]rolloutCheck) {
	names, err := fsys.ReadDir(filepath.Join(root, rollout.ActiveDir))
	if err != nil {
		c.failf(failUnreadable, "list %s: %v", filepath.Join(root, rollout.ActiveDir), err)
		return nil, nil
	}
	var ids []string
	for _, n := range names {
		id, ok := strings.CutSuffix(n, rollout.RolloutExt)
		if ok && rollout.ValidateThreadID(id) == nil {
			ids = append(ids, id)
		}
	}
	source := func(id string) rolloutSource {
		return fileSource(fsys, filepath.Join(root, rollout.ActiveDir, id+rollout.RolloutExt))
	}
	return ids, c.checkThreads(ids, led, source, keyReader{fs: fsys, dataDir: artifactDir}, wsID, strictFailed)
}

// checkThreads checks the rollouts of the threads ids (each read from
// source(id)) against the ledger, and that every thread whose creation
// was acknowledged is among them. It sorts ids.
func (c *checker) checkThreads(ids []string, led *ledger, source func(id string) rolloutSource, keys keyReader, wsID string, strictFailed bool) map[string]rolloutCheck {
	led.mu.Lock()
	defer led.mu.Unlock()
	found := map[string]rolloutCheck{}
	for _, id := range ids {
		tl := led.threads[id]
		if tl == nil || !tl.createAttempted {
			c.failf(failOther, "thread %s: a rollout exists that no writer ever created", id)
			tl = &threadLedger{id: id, byKey: map[string]*op{}, byID: map[string]*op{}}
		}
		found[id] = c.checkRollout(source(id), id, wsID, tl, keys, strictFailed)
	}
	for id, tl := range led.threads {
		if _, ok := found[id]; ok || !tl.createAcked {
			continue
		}
		n := 0
		for _, o := range tl.ops {
			if o.ack != 0 {
				n += len(o.keys)
			}
		}
		c.failf(failUnreadable, "thread %s: created (acknowledged) but its rollout is gone", id)
		c.lost(n, "thread %s: %d acknowledged records lost with its rollout", id, n)
	}
	sort.Strings(ids)
	return found
}

// checkRollout reads one rollout read-only and checks it against what its
// writers said:
//   - it opens, its header is the thread's, seq 1 is thread_opened and
//     seqs run without a gap, and no damage is reported (after a crash only
//     a torn tail is allowed, and the reader leaves it out);
//   - every record was attempted by some writer (nothing appears that was
//     never written), and only once;
//   - every call's records (one frame) are all there, in order and
//     contiguous, or none is (a frame is atomic);
//   - every acknowledged call's records are there, intact (its key is a
//     digest of the content), at the seqs acknowledged when those are known:
//     otherwise they are counted lost;
//   - a call acknowledged before another was attempted precedes it;
//   - with strictFailed (fault mode, the writer lived on): a call that
//     failed is not there when a later call of the thread was acknowledged
//     (a failed frame is cut before anything follows it).
func (c *checker) checkRollout(open rolloutSource, id, wsID string, tl *threadLedger, keys keyReader, strictFailed bool) rolloutCheck {
	var out rolloutCheck
	src, size, path, closeFn, err := open()
	if err != nil {
		c.failf(failUnreadable, "thread %s: open %s: %v", id, path, err)
		return out
	}
	if closeFn != nil {
		defer closeFn()
	}
	r, err := rollout.NewReader(src, size, rollout.ReaderOptions{Path: path})
	if err != nil {
		c.failf(failUnreadable, "thread %s: %v", id, err)
		return out
	}
	if r.Header().ThreadID != id {
		c.failf(failUnreadable, "thread %s: file header names thread %q", id, r.Header().ThreadID)
	}
	var recs []diskRecord
	pos := map[string]int{}   // key -> index in recs
	bySeq := map[uint64]int{} // seq -> index in recs
	var last uint64
	for r.Next() {
		rec := r.Record()
		d := diskRecord{seq: rec.Seq, kind: rec.Kind, turn: rec.Turn}
		if rec.Seq != last+1 {
			c.failf(failOther, "thread %s: expected seq %d, found %s (a gap)", id, last+1, d)
		}
		last = rec.Seq
		bySeq[rec.Seq] = len(recs)
		if rec.Seq == 1 {
			var h rollout.ThreadOpened
			if rec.Kind != rollout.KindThreadOpened || rec.Decode(&h) != nil || h.ThreadID != id || (wsID != "" && h.WorkspaceID != wsID) {
				c.failf(failUnreadable, "thread %s: seq 1 is not this thread's header: %s", id, d)
			}
			recs = append(recs, d)
			continue
		}
		key, err := keys.key(rec, r.FrameOffset())
		if err != nil {
			c.failf(failOther, "thread %s: %s: %v", id, d, err)
			recs = append(recs, d)
			continue
		}
		d.key = key
		if prev, dup := pos[key]; dup {
			c.failf(failOther, "thread %s: %s is a second copy of %s (same content)", id, d, recs[prev])
		}
		pos[key] = len(recs)
		recs = append(recs, d)
		if tl.byKey[key] == nil {
			c.failf(failOther, "thread %s: %s (key %s) was never attempted by any writer", id, d, key)
		}
	}
	if err := r.Err(); err != nil {
		c.failf(failUnreadable, "thread %s: read: %v", id, err)
		return out
	}
	for _, d := range r.Damage() {
		c.failf(failUnreadable, "thread %s: damage in the middle of the rollout: %v", id, d)
	}
	out.torn = r.TornTail() != nil
	out.lastSeq, out.ok = r.LastSeq(), true

	// Calls: atomic, acknowledged ones present and where acknowledged.
	type placed struct {
		o           *op
		first, last int // indexes in recs
	}
	var present []placed
	for _, o := range tl.ops {
		var idx []int
		for _, k := range o.keys {
			if i, ok := pos[k]; ok {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			if o.ack != 0 {
				where := "absent"
				if i, ok := bySeq[o.first]; ok && o.first != 0 {
					where = "seq " + fmt.Sprint(o.first) + " holds " + recs[i].String()
				} else if o.first != 0 {
					where = fmt.Sprintf("seq %d is not there (the rollout ends at seq %d)", o.first, last)
				}
				c.lost(len(o.keys), "thread %s: acknowledged op %s (%d records, seqs %s) lost: %s", id, o.id, len(o.keys), seqRange(o), where)
			}
			continue
		}
		if len(idx) != len(o.keys) {
			c.failf(failOther, "thread %s: op %s wrote one frame of %d records; %d of them are there (a frame is atomic)", id, o.id, len(o.keys), len(idx))
			if o.ack != 0 {
				c.lost(len(o.keys)-len(idx), "thread %s: acknowledged op %s: %d of %d records lost", id, o.id, len(o.keys)-len(idx), len(o.keys))
			}
			continue
		}
		for j := 1; j < len(idx); j++ {
			if idx[j] != idx[0]+j {
				c.failf(failOther, "thread %s: op %s's records are not contiguous and in order: found at %s", id, o.id, seqsOf(recs, idx))
				break
			}
		}
		if o.ack != 0 && o.first != 0 && (recs[idx[0]].seq != o.first || recs[idx[len(idx)-1]].seq != o.last) {
			c.lost(len(o.keys), "thread %s: op %s was acknowledged at seqs %d-%d; its records are at %s", id, o.id, o.first, o.last, seqsOf(recs, idx))
		}
		if o.ack == 0 {
			c.count("present_unacknowledged", int64(len(o.keys)))
		}
		present = append(present, placed{o, idx[0], idx[len(idx)-1]})
	}

	// Order: walking back through the file, an op attempted after a later
	// one (on disk) was acknowledged is out of order.
	sort.Slice(present, func(i, j int) bool { return present[i].first < present[j].first })
	minAck, minAckOp := int64(1<<62), (*op)(nil)
	for i := len(present) - 1; i >= 0; i-- {
		p := present[i]
		if minAckOp != nil && minAck < p.o.attempt {
			c.failf(failOther, "thread %s: op %s (at %s) was attempted after op %s was acknowledged, yet precedes it on disk", id, p.o.id, recs[p.first], minAckOp.id)
		}
		if p.o.ack != 0 && p.o.ack < minAck {
			minAck, minAckOp = p.o.ack, p.o
		}
	}

	if strictFailed {
		// A failed call's frame was cut before anything else was written.
		var lastAck int64
		for _, o := range tl.ops {
			lastAck = max(lastAck, o.ack)
		}
		for _, p := range present {
			if p.o.ack == 0 && p.o.fail != 0 && p.o.fail < lastAck {
				c.failf(failOther, "thread %s: op %s failed (%s) and was not retried with success, yet its frame is at %s and later ops were acknowledged after it",
					id, p.o.id, p.o.reason, recs[p.first])
			}
		}
	}
	return out
}

func seqRange(o *op) string {
	if o.first == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%d-%d", o.first, o.last)
}

func seqsOf(recs []diskRecord, idx []int) string {
	var s []string
	for _, i := range idx {
		s = append(s, fmt.Sprint(recs[i].seq))
	}
	return strings.Join(s, ",")
}

// checkProblems reports what the writers themselves found wrong.
func (c *checker) checkProblems(led *ledger) {
	for _, p := range led.takeProblems() {
		c.failf(failOther, "writer: %s", p)
	}
}
