package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// errStop ends a worker quietly: the run is over (a crash, a kill to come,
// or the time is up).
var errStop = errors.New("stop")

// errLost ends a worker's hold on its thread (fleet: another host took it
// over): the worker opens it again, waiting its turn.
var errLost = errors.New("thread lost to another host")

// host is what the writers of one run share: the open workspace, the
// journal, and the policy for errors, which is the mode's.
type host struct {
	ctx context.Context
	db  *rolloutdb.DB
	j   journal
	// onErr decides what a failed call means: nil to retry it (fault
	// mode, while faults are injected), errStop to end the worker
	// quietly, anything else to end it with that error reported. started
	// is the clock when the call began.
	onErr func(err error, started int64) error
	// onOpenErr, if set, is the policy for calls that open or close a
	// thread (retry); onErr otherwise.
	onOpenErr func(err error, started int64) error
	// clock, if set, orders calls with the injected faults (fault mode);
	// clearedAt is the clock when faults stopped (0: not yet).
	clock, clearedAt func() int64
	// quotaMet, if set, is called once for each worker that has had
	// cleanQuota calls acknowledged that began after the faults stopped,
	// or that ended short of it.
	cleanQuota int64
	quotaMet   func()
	// opened, if set, is told each thread once its worker holds it; the
	// worker then waits for gate (if set) to be closed before it writes.
	opened func(id string)
	gate   <-chan struct{}
	// pace, if set, is the mean pause between two calls of a worker;
	// maxCalls, if set, is how many calls a worker makes before it waits
	// for the run to stop.
	pace     time.Duration
	maxCalls int
	// idle, if set, is the most a worker waits after it resumed a thread
	// before it writes (a conversation opened that nobody types into
	// yet): the fleet mode's zombie hosts write into that window.
	idle time.Duration
	// stop says the run is over.
	stop func() bool
	// exact says no two goroutines write one thread, so the seqs of a
	// facade call (which returns none) are known from Thread.LastSeq.
	exact bool
	// reopen is the probability that a turn is left open and the thread
	// closed and resumed (a host restarting one conversation).
	reopen float64
	// large is the probability that a text is large.
	large float64
	// report receives errors that end a worker.
	report func(string)
}

// worker writes turns to one thread, as one agent session of a host does.
type worker struct {
	h    *host
	id   string // thread
	tag  string // makes turn, item and op ids unique in the workspace
	rng  *rand.Rand
	g    gen
	n    int
	mu   sync.Mutex
	th   *rolloutdb.Thread
	last string // last completed turn, for checkpoints and rollbacks
	// clean counts the calls acknowledged that began after the faults
	// cleared, acks all those acknowledged, calls those begun; err is what
	// ended the worker (nil: the run did).
	clean atomic.Int64
	acks  atomic.Int64
	calls int
	err   error
}

func (h *host) now() int64 {
	if h.clock == nil {
		return 0
	}
	return h.clock()
}

func newWorker(h *host, id, tag string, seed uint64) *worker {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	return &worker{h: h, id: id, tag: tag, rng: rng, g: gen{rng: rng, large: h.large}}
}

func (w *worker) next(prefix string) string {
	w.n++
	return prefix + "-" + w.tag + "-" + strconv.Itoa(w.n)
}

func (w *worker) handle() *rolloutdb.Thread {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.th
}

// call journals one library call that writes keys as one frame: the A line
// before it, K (with the seqs, when known) or F after it. It retries while
// the host's policy says so.
func (w *worker) call(op string, keys []string, fn func() (rollout.AppendResult, error)) error {
	line := "A " + w.id + " " + op + " " + strings.Join(keys, ",")
	if w.h.maxCalls > 0 && w.calls >= w.h.maxCalls {
		for !w.h.stop() {
			pause(w.h, w.rng, 10*time.Millisecond)
		}
		return errStop
	}
	w.calls++
	if w.h.pace > 0 {
		pause(w.h, w.rng, w.h.pace)
	}
	for {
		if w.h.stop() {
			return errStop
		}
		w.h.j(line)
		started := w.h.now()
		res, err := fn()
		if err == nil {
			w.acks.Add(1)
			if h := w.h; h.clearedAt != nil && h.clearedAt() != 0 && started >= h.clearedAt() {
				if w.clean.Add(1) == h.cleanQuota && h.quotaMet != nil {
					h.quotaMet()
				}
			}
			first, last := res.FirstSeq, res.LastSeq
			if first == 0 && w.h.exact {
				last = w.handle().LastSeq()
				first = last - uint64(len(keys)) + 1
			}
			w.h.j(fmt.Sprintf("K %s %s %d %d", w.id, op, first, last))
			return nil
		}
		w.h.j("F " + w.id + " " + op + " " + errClass(err))
		if err := w.h.onErr(errors.Wrapf(err, "thread %s op %s", w.id, op), started); err != nil {
			return err
		}
	}
}

// retry runs fn (a call that writes no record of its own: open, resume,
// close) until it succeeds or the policy gives up.
func (w *worker) retry(what string, fn func() error) error {
	for {
		if w.h.stop() {
			return errStop
		}
		started := w.h.now()
		err := fn()
		if err == nil {
			return nil
		}
		policy := w.h.onErr
		if w.h.onOpenErr != nil {
			policy = w.h.onOpenErr
		}
		if err := policy(errors.Wrapf(err, "thread %s: %s", w.id, what), started); err != nil {
			return err
		}
	}
}

// errClass names an error for the journal.
func errClass(err error) string {
	for _, c := range []struct {
		err  error
		name string
	}{
		{rolloutdb.ErrFenced, "fenced"}, {rolloutdb.ErrUnavailable, "unavailable"},
		{rollout.ErrNotDurable, "not_durable"}, {errENOSPC, "enospc"}, {errEIO, "eio"},
		{vfs.ErrCrashed, "crashed"}, {errCrash, "crash"}, {rollout.ErrThreadLocked, "locked"},
		{rolloutdb.ErrClosed, "closed"}, {rollout.ErrClosed, "closed"},
	} {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "other"
}

// open creates the thread (create) or resumes it, aborting the turns it
// finds interrupted.
func (w *worker) open(create bool) error {
	if create {
		w.h.j("C " + w.id)
		err := w.retry("create", func() error {
			th, err := w.h.db.CreateThread(w.h.ctx, rolloutdb.ThreadOptions{ID: w.id, Metadata: map[string]string{"harness": "rolloutcrash"}})
			if errors.Is(err, rollout.ErrThreadExists) {
				// A create that failed after linking the file (a failed
				// directory sync, say) left the thread: open it.
				th, err = w.h.db.OpenThread(w.h.ctx, w.id)
			}
			if err == nil {
				w.mu.Lock()
				w.th = th
				w.mu.Unlock()
			}
			return err
		})
		if err != nil {
			return err
		}
		w.h.j("CK " + w.id)
		return nil
	}
	return w.resume()
}

// resume opens an existing thread with DB.Resume and aborts most of the
// turns it finds interrupted (a host may leave some).
func (w *worker) resume() error {
	var interrupted []string
	err := w.retry("resume", func() error {
		th, s, err := w.h.db.Resume(w.h.ctx, w.id, rolloutdb.ResumeOptions{})
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.th = th
		w.mu.Unlock()
		interrupted = s.Interrupted
		for i := len(s.Turns) - 1; i >= 0; i-- {
			if s.Turns[i].Status == rollout.TurnStatusCompleted {
				w.last = s.Turns[i].ID
				break
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	w.h.j("CK " + w.id)
	if w.h.idle > 0 {
		pause(w.h, w.rng, time.Duration(w.rng.Int64N(int64(w.h.idle))))
	}
	for _, turn := range interrupted {
		if w.rng.IntN(4) == 0 {
			continue // leave it interrupted: a host may
		}
		reason := "interrupted, aborted by " + w.next("abort")
		err := w.call(w.next("op"), []string{recordKey(rollout.KindTurnAborted, turn, rollout.TurnAborted{Reason: reason})},
			func() (rollout.AppendResult, error) {
				return rollout.AppendResult{}, w.handle().AbortInterrupted(w.h.ctx, turn, reason)
			})
		if err != nil {
			return err
		}
	}
	return nil
}

// close releases the thread. Its error is not the point: after a power cut
// it fails, and the checks after it say whether anything was lost.
func (w *worker) close() {
	if th := w.handle(); th != nil {
		_ = th.Close()
	}
}

// run writes turns until the run stops or an error ends it.
func (w *worker) run() error {
	for !w.h.stop() {
		if err := w.turn(); err != nil {
			return err
		}
	}
	return nil
}

var models = []string{"gpt-x", "claude-y", "local-z"}

// turn writes one turn: between turns maybe a rollback or a manual
// checkpoint; then turn_started (with the user's input in the same frame
// most of the time), a few items as they happen, and a commit (items, exact
// model history, sometimes a post-turn checkpoint), an abort, or nothing
// (the thread is closed with the turn open and resumed).
func (w *worker) turn() error {
	ctx := w.h.ctx
	if w.last != "" && w.rng.IntN(30) == 0 {
		// A rollback of the last turn, with a metadata update in its
		// frame (rollback bodies repeat: see chained).
		op := w.next("op")
		name := "rollback-" + op
		meta := rollout.MetadataUpdated{Name: &name}
		body := rollout.ThreadRolledBack{Turns: 1}
		m, _ := rollout.NewRecord(rollout.KindMetadataUpdated, "", meta)
		rb, _ := rollout.NewRecord(rollout.KindThreadRolledBack, "", body)
		mkey := recordKey(rollout.KindMetadataUpdated, "", meta)
		rkey := chainKey(rollout.KindThreadRolledBack, "", struct{}{}, mkey+"/"+recordKey(rollout.KindThreadRolledBack, "", body))
		// Rolled back: the next rollback or checkpoint names no turn that
		// may be gone.
		w.last = ""
		err := w.call(op, []string{mkey, rkey}, func() (rollout.AppendResult, error) {
			return w.handle().Append(ctx, []rollout.Record{m, rb}, rollout.AppendOptions{})
		})
		if err != nil {
			return err
		}
	}
	if w.last != "" && w.rng.IntN(20) == 0 {
		cp := rollout.Checkpoint{ID: w.next("cp"), CoveredTurn: w.last, Trigger: rollout.TriggerManual,
			ReplacementHistory: [][]byte{[]byte(`{"role":"system","content":"summary ` + w.g.text("sum") + `"}`)},
			TokensBefore:       int64(1000 + w.rng.IntN(100000)), TokensAfter: int64(100 + w.rng.IntN(1000))}
		err := w.call(w.next("op"), []string{recordKey(rollout.KindCheckpoint, "", cp)}, func() (rollout.AppendResult, error) {
			return w.handle().WriteCheckpoint(ctx, cp)
		})
		if err != nil {
			return err
		}
	}

	turnID := w.next("t")
	o := rolloutdb.TurnOptions{ID: turnID, Model: models[w.rng.IntN(len(models))]}
	if w.rng.IntN(3) == 0 {
		o.Metadata = map[string]string{"client": "c" + strconv.Itoa(w.rng.IntN(3)), "turn": turnID}
	}
	keys := []string{recordKey(rollout.KindTurnStarted, turnID, rollout.TurnStarted{Model: o.Model, Metadata: o.Metadata})}
	if w.rng.IntN(7) != 0 {
		o.Input = w.g.text(turnID + " user")
		keys = append(keys, itemKey(turnID, rollout.Item{Type: rollout.ItemUserMessage, Status: rollout.ItemCompleted, Text: o.Input}))
	}
	var tu *rolloutdb.Turn
	err := w.call(w.next("op"), keys, func() (rollout.AppendResult, error) {
		var err error
		tu, err = w.handle().StartTurn(ctx, o)
		return rollout.AppendResult{}, err
	})
	if err != nil {
		return err
	}

	// Items as they happen.
	var streaming string // an agent message in progress, finished by the commit
	for range w.rng.IntN(5) {
		it := w.item(turnID)
		if it.Type == rollout.ItemAgentMessage {
			it.Status = rollout.ItemInProgress
			streaming = it.ID
		}
		err := w.call(w.next("op"), []string{itemKey(turnID, it)}, func() (rollout.AppendResult, error) {
			res, err := tu.Add(ctx, it)
			return res.AppendResult, err
		})
		if err != nil {
			return err
		}
	}

	switch r := w.rng.Float64(); {
	case r < w.h.reopen:
		// The host stops with the turn open; later it resumes the thread.
		w.close()
		return w.resume()
	case r < w.h.reopen+0.2:
		reason := "aborted by " + turnID
		return w.call(w.next("op"), []string{recordKey(rollout.KindTurnAborted, turnID, rollout.TurnAborted{Reason: reason})},
			func() (rollout.AppendResult, error) { return tu.Cancel(ctx, reason) })
	}
	var c rolloutdb.Commit
	var ckeys []string
	for i := range 1 + w.rng.IntN(3) {
		it := w.item(turnID)
		if i == 0 {
			it = rollout.Item{ID: turnID + "-answer", Type: rollout.ItemAgentMessage, Status: rollout.ItemCompleted, Text: w.g.text(turnID + " answer")}
			if streaming != "" {
				it.ID = streaming // the final version of the streamed message
			}
		}
		c.Items = append(c.Items, it)
		ckeys = append(ckeys, itemKey(turnID, it))
	}
	if w.rng.IntN(10) != 0 {
		for range 1 + w.rng.IntN(3) {
			c.ModelHistory = append(c.ModelHistory, []byte(`{"role":"assistant","turn":"`+turnID+`","content":"`+w.g.words(5+w.rng.IntN(30))+`"}`))
		}
		ckeys = append(ckeys, recordKey(rollout.KindModelHistoryAppended, turnID, rollout.ModelHistory{Messages: c.ModelHistory}))
	}
	if w.rng.IntN(7) == 0 {
		cp := rollout.Checkpoint{ID: w.next("cp"), CoveredTurn: turnID, Trigger: rollout.TriggerPostTurn,
			ReplacementHistory: [][]byte{[]byte(`{"role":"system","content":"compacted through ` + turnID + `"}`)},
			TokensBefore:       int64(50000 + w.rng.IntN(100000)), TokensAfter: int64(500 + w.rng.IntN(5000))}
		c.Checkpoint = &cp
		ckeys = append(ckeys, recordKey(rollout.KindCheckpoint, turnID, cp))
	}
	in, out := int64(100+w.rng.IntN(5000)), int64(10+w.rng.IntN(2000))
	c.Usage = rollout.Usage{InputTokens: in, OutputTokens: out, TotalTokens: in + out}
	ckeys = append(ckeys, recordKey(rollout.KindTurnCompleted, turnID, rollout.TurnCompleted{Status: rollout.TurnStatusCompleted, Usage: c.Usage}))
	err = w.call(w.next("op"), ckeys, func() (rollout.AppendResult, error) { return tu.Commit(ctx, c) })
	if err == nil {
		w.last = turnID
	}
	return err
}

// item makes a random item of the turn.
func (w *worker) item(turn string) rollout.Item {
	id := w.next("i")
	it := rollout.Item{ID: id, Status: rollout.ItemCompleted}
	switch w.rng.IntN(7) {
	case 0:
		it.Type, it.Text = rollout.ItemAgentMessage, w.g.text(id+" agent")
	case 1:
		it.Type, it.Text = rollout.ItemReasoning, w.g.text(id+" thinking")
	case 2:
		it.Type, it.CallID, it.Name, it.Arguments = rollout.ItemToolCall, "call-"+id, "shell", `{"cmd":"go test ./...","id":"`+id+`"}`
	case 3:
		// Tool output: the item most often large (spilled to an artifact
		// on a real file system).
		it.Type, it.CallID, it.Text = rollout.ItemToolResult, "call-"+id, w.g.text(id+" output")
		if w.rng.Float64() < 5*w.h.large {
			it.Text = w.g.big(id+" output", 33<<10+w.rng.IntN(120<<10))
		}
	case 4:
		it.Type, it.Text = rollout.ItemFileChange, w.g.code(id+" diff", 200+w.rng.IntN(3000))
		it.Data = map[string]string{"path": "pkg/" + id + ".go"}
	case 5:
		it.Type, it.Text = rollout.ItemTerminal, w.g.text(id+" term")
	default:
		it.Type, it.Status, it.Text = rollout.ItemError, rollout.ItemFailed, id+" error: exit status 1"
	}
	return it
}

// metaWriter appends metadata updates to random threads, concurrently with
// their turn writers: two goroutines appending to one rollout, so appends
// share fsyncs (group commit) and interleave with turns.
func metaWriter(h *host, workers []*worker, seed uint64, tag string) error {
	rng := rand.New(rand.NewPCG(seed, 0x6d657461))
	for n := 1; !h.stop(); n++ {
		pause(h, rng, 2*time.Millisecond)
		w := workers[rng.IntN(len(workers))]
		th := w.handle()
		if th == nil {
			continue
		}
		name := fmt.Sprintf("name-%s-%d", tag, n)
		body := rollout.MetadataUpdated{Name: &name}
		if rng.IntN(2) == 0 {
			body.Labels = []string{"l" + strconv.Itoa(rng.IntN(4)), "crash"}
		}
		if rng.IntN(3) == 0 {
			body.Flags = map[string]bool{"pinned": rng.IntN(2) == 0}
		}
		rec, err := rollout.NewRecord(rollout.KindMetadataUpdated, "", body)
		if err != nil {
			return err
		}
		op := fmt.Sprintf("meta-%s-%d", tag, n)
		h.j("A " + w.id + " " + op + " " + recordKey(rollout.KindMetadataUpdated, "", body))
		started := h.now()
		var res rollout.AppendResult
		if body.Labels == nil {
			// Through the host's call (a name and flags: the body it
			// writes is the one keyed above).
			res, err = th.UpdateMetadata(h.ctx, rolloutdb.MetadataUpdate{Name: body.Name, Flags: body.Flags})
		} else {
			res, err = th.Append(h.ctx, []rollout.Record{rec}, rollout.AppendOptions{})
		}
		if err == nil {
			h.j(fmt.Sprintf("K %s %s %d %d", w.id, op, res.FirstSeq, res.LastSeq))
		} else {
			h.j("F " + w.id + " " + op + " " + errClass(err))
			if errors.Is(err, rolloutdb.ErrClosed) || errors.Is(err, rollout.ErrClosed) {
				continue // its worker closed the thread to resume it
			}
			if err := h.onErr(errors.Wrapf(err, "thread %s op %s", w.id, op), started); err != nil {
				if errors.Is(err, errLost) {
					continue // its worker opens the thread again
				}
				return err
			}
		}
	}
	return nil
}

// reader lists, pages and searches while the writers write: read-repair
// runs against a projector that lags, and the state.db it leaves behind
// is what the checker compares with a rebuild after the crash.
func reader(h *host, ids []string, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0x72656164))
	for !h.stop() {
		var err error
		started := h.now()
		switch rng.IntN(4) {
		case 0:
			_, err = h.db.List(h.ctx, projection.ListOptions{Scope: projection.ScopeAll, Limit: 100})
		case 1:
			_, err = h.db.ThreadInfo(h.ctx, ids[rng.IntN(len(ids))])
		case 2:
			_, err = h.db.Turns(h.ctx, ids[rng.IntN(len(ids))], 1, 5)
		default:
			_, err = h.db.Search(h.ctx, words[rng.IntN(len(words))], projection.SearchOptions{Limit: 5})
		}
		if err != nil && !errors.Is(err, projection.ErrNotFound) {
			// A thread not yet created is not found; anything else is the
			// policy's.
			if err := h.onErr(errors.Wrap(err, "read"), started); err != nil {
				return err
			}
		}
		pause(h, rng, 5*time.Millisecond)
	}
	return nil
}

// pause paces a background writer or reader (it is load, not a wait).
func pause(h *host, rng *rand.Rand, d time.Duration) {
	t := time.NewTimer(time.Duration(rng.Int64N(int64(2 * d))))
	defer t.Stop()
	select {
	case <-t.C:
	case <-h.ctx.Done():
	}
}

// runWorkers runs a worker per thread (creating the new ones, resuming the
// others), plus, if meta, a metadata writer and, if read, a reader, until
// h.stop says so or every worker ended. Errors other than errStop are
// reported. It returns the workers, each with what ended it.
func runWorkers(h *host, existing, created []string, seed uint64, tag string, meta, read bool) []*worker {
	var workers []*worker
	var wg sync.WaitGroup
	for i, id := range append(append([]string{}, existing...), created...) {
		w := newWorker(h, id, fmt.Sprintf("%s%d", tag, i), seed+uint64(i)*7919)
		workers = append(workers, w)
		create := i >= len(existing)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.close()
			err := w.open(create)
			if err == nil {
				if h.opened != nil {
					h.opened(w.id)
				}
				if h.gate != nil {
					<-h.gate
				}
			}
			for {
				if err == nil {
					err = w.run()
				}
				if !errors.Is(err, errLost) {
					break
				}
				// Another host has the thread: open it again, waiting
				// for its turn.
				w.close()
				err = w.resume()
			}
			if err != nil && !errors.Is(err, errStop) {
				w.err = err
				h.report(err.Error())
			}
			if h.quotaMet != nil && w.clean.Load() < h.cleanQuota {
				h.quotaMet() // ended short of it
			}
		}()
	}
	var bg sync.WaitGroup
	done := make(chan struct{})
	bh := *h
	bh.stop = func() bool {
		select {
		case <-done:
			return true
		default:
			return h.stop()
		}
	}
	if meta && len(workers) > 0 {
		bg.Add(1)
		go func() {
			defer bg.Done()
			if err := metaWriter(&bh, workers, seed^0xabc, tag); err != nil && !errors.Is(err, errStop) {
				h.report(err.Error())
			}
		}()
	}
	if read && len(workers) > 0 {
		ids := append(append([]string{}, existing...), created...)
		bg.Add(1)
		go func() {
			defer bg.Done()
			if err := reader(&bh, ids, seed^0xdef); err != nil && !errors.Is(err, errStop) {
				h.report(err.Error())
			}
		}()
	}
	wg.Wait()
	close(done)
	bg.Wait()
	return workers
}
