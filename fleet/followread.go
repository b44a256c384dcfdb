package fleet

import (
	"context"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// The followers of a thread on one Log share their reads of its frames:
// woken by the same notice, at the same place, they would each send the
// same query at once, and with 64 followers of a thread appended to 500
// times a second the database fell behind (BenchmarkFollow: p99 363 ms;
// one read for all of them, docs/BENCHMARKS.md). A follower joins a read
// in flight of the frames it wants only if the read began after the last
// notice of the thread this Log heard: one that began before might miss
// the frames the notice told of, and the follower, its wake-up spent,
// would wait for the next one.

// followed is what a Log holds for a thread its followers follow
// (Log.live).
type followed struct {
	followers map[*Follower]struct{}
	heard     int64              // notices of the thread heard
	reads     map[[2]int64]*read // in flight, by (from, next)
}

// poke wakes the thread's followers, for a notice of it.
func (ft *followed) poke() {
	ft.heard++
	for f := range ft.followers {
		f.poke()
	}
}

// A read is one query of a thread's frames, shared.
type read struct {
	heard int64 // the thread's notices heard when it began
	done  chan struct{}
	res   readResult
}

// readResult is what a read found, never changed once done.
type readResult struct {
	location string
	found    bool // the thread is there
	frames   []readFrame
	err      error
}

// readFrame is a frame read, decoded once for every follower that shares
// the read.
type readFrame struct {
	off  int64
	data []byte // the frame; the one before next, its first bytes
	h    rollout.FrameHeader
	recs []rollout.Record // shared: never changed
	err  error            // why it does not decode
}

// followFrames bounds the frames one read takes (a follower far behind
// reads in steps).
const followFrames = 128

// readFrames returns the thread's frames from offset from on (the one
// before next as its first bytes only), and its location: a read in
// flight that the caller may share, or a new one. ctx bounds the wait
// for it, not the read.
func (l *Log) readFrames(ctx context.Context, tid, from, next int64, fileID uint64) readResult {
	lv := &l.live
	lv.Lock()
	ft := lv.threads[tid]
	if ft == nil {
		lv.Unlock()
		return readResult{err: context.Canceled} // the follower was closed
	}
	k := [2]int64{from, next}
	if r := ft.reads[k]; r != nil && r.heard >= ft.heard {
		lv.Unlock()
		select {
		case <-r.done:
			return r.res
		case <-ctx.Done():
			return readResult{err: ctx.Err()}
		}
	}
	r := &read{heard: ft.heard, done: make(chan struct{})}
	ft.reads[k] = r
	lv.Unlock()

	// Not the caller's ctx: others may be waiting for it.
	l.reads.Add(1)
	rctx, cancel := context.WithTimeout(l.bg, l.opts.CommitTimeout)
	r.res = l.queryFrames(rctx, tid, from, next, fileID)
	cancel()
	lv.Lock()
	if ft.reads[k] == r {
		delete(ft.reads, k)
	}
	lv.Unlock()
	close(r.done)
	return r.res
}

// queryFrames reads, in one statement, the thread's location and its
// frames from offset from on, as of one snapshot, and decodes them.
func (l *Log) queryFrames(ctx context.Context, tid, from, next int64, fileID uint64) readResult {
	rows, err := l.pool.Query(ctx, `SELECT th.location, fr.off, fr.data
		FROM rolloutdb.threads th
		LEFT JOIN LATERAL (
			SELECT off, CASE WHEN off < $3 THEN substr(data, 1, $5) ELSE data END AS data
			FROM rolloutdb.frames WHERE tid = th.tid AND off >= $2 ORDER BY off LIMIT $4
		) fr ON true
		WHERE th.tid = $1`, tid, from, next, followFrames+1, rollout.FrameHeaderSize)
	if err != nil {
		return readResult{err: classify(err, "read frames")}
	}
	defer rows.Close()
	var res readResult
	for rows.Next() {
		var off *int64
		var data []byte
		if err := rows.Scan(&res.location, &off, &data); err != nil {
			return readResult{err: classify(err, "read frames")}
		}
		res.found = true
		if off == nil {
			continue
		}
		fr := readFrame{off: *off, data: data}
		if fr.off >= next {
			fr.h, fr.recs, fr.err = rollout.DecodeFrame(data, fileID)
		}
		res.frames = append(res.frames, fr)
	}
	if err := rows.Err(); err != nil {
		return readResult{err: classify(err, "read frames")}
	}
	return res
}
