package recovery

import (
	"context"
	"io"
	"runtime"
	"sync/atomic"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// Options for Resume. ThreadID is required.
type Options struct {
	// ThreadID is the thread being resumed; the rollout must hold it.
	ThreadID string
	// WorkspaceID, if set, must match the header's workspace id.
	WorkspaceID string
	// CheckpointOffset, if > 0, is the frame offset of the latest
	// checkpoint (the projection stores it): replay reads the header frame,
	// then only from there. It is used only for a post-turn checkpoint in
	// its turn's commit frame with no turn straddling it; otherwise (or if
	// the checkpoint is damaged, or a later rollback goes past it) Resume
	// falls back to a full pass. The records before the offset are trusted
	// as already checked (a second header with another identity there goes
	// unseen): pass an offset only from a projection that replayed them.
	// Default: 0, one forward pass over the whole file.
	CheckpointOffset int64
	// IgnoreCheckpoints builds the model history from every turn, as if no
	// checkpoint had been written (checkpoints are still listed).
	IgnoreCheckpoints bool
	// History rebuilds a turn's model contribution from its items.
	// Default: DefaultHistory.
	History HistoryBuilder
	// Path names the file in errors and the report.
	Path string
	// SkipHistory keeps no model history: Turn.History and
	// State.ModelHistory stay empty (HistorySource and the report are
	// what they would be). For a reader that wants the turns only, such
	// as an export: the history is most of a thread's state.
	SkipHistory bool
	// Locate keeps where each item and each exact-history record is
	// instead of its body: Turn.Items hold their IDs only, with
	// Turn.ItemAt and Turn.HistoryAt, and there is no model history (as
	// SkipHistory). A Locator reads the bodies back, a turn at a time: for
	// a reader that streams a thread larger than it should hold (rolloutctl
	// replay and export). Everything else is what it would be.
	Locate bool
}

// countingReader counts the bytes read, for the report (and the
// benchmark's proof that resume from a checkpoint reads what follows it).
type countingReader struct {
	r io.ReaderAt
	n atomic.Int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

// Resume replays the rollout in src (size bytes) into the thread's state.
// It fails with an identity error (see ErrIdentity) and no state when the
// rollout is not safely this thread's; damage is not an error, it is
// reported.
func Resume(ctx context.Context, src io.ReaderAt, size int64, opts Options) (*State, error) {
	if opts.ThreadID == "" {
		return nil, errors.New("recovery: Resume needs the thread id")
	}
	if opts.History == nil {
		opts.History = DefaultHistory
	}
	if opts.Locate {
		opts.SkipHistory = true
	}
	if opts.SkipHistory {
		opts.History = func(string, []rollout.Item) [][]byte { return nil }
	}
	cr := &countingReader{r: src}
	if opts.CheckpointOffset > rollout.FileHeaderSize {
		st, err := resume(ctx, cr, size, opts, opts.CheckpointOffset)
		if err != nil {
			return nil, err
		}
		if offsetUsable(st, opts.CheckpointOffset) {
			st.Report.BytesRead = cr.n.Load()
			return st, nil
		}
		// The checkpoint is not usable from here: read everything.
	}
	st, err := resume(ctx, cr, size, opts, 0)
	if err != nil {
		return nil, err
	}
	st.Report.BytesRead = cr.n.Load()
	return st, nil
}

// ResumeFile resumes the rollout at path, read through fsys (read-only: it
// takes no lock, so a live writer may be appending; replay sees a
// consistent prefix).
func ResumeFile(ctx context.Context, fsys vfs.FS, path string, opts Options) (*State, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	f, err := fsys.Open(path)
	if err != nil {
		return nil, errors.Wrapf(err, "open %s", path)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, errors.Wrapf(err, "stat %s", path)
	}
	if opts.Path == "" {
		opts.Path = path
	}
	return Resume(ctx, f, size, opts)
}

// CheckIdentity reads the rollout as Resume does and fails with the same
// identity error Resume would (see ErrIdentity), but builds no state:
// only thread headers are decoded, so its memory does not grow with the
// thread (rolloutctl verify). Damage is not an error.
func CheckIdentity(ctx context.Context, src io.ReaderAt, size int64, opts Options) error {
	if opts.ThreadID == "" {
		return errors.New("recovery: CheckIdentity needs the thread id")
	}
	_, err := replayFrom(ctx, src, size, opts, 0, true)
	return err
}

func resume(ctx context.Context, src io.ReaderAt, size int64, opts Options, from int64) (*State, error) {
	return replayFrom(ctx, src, size, opts, from, false)
}

func replayFrom(ctx context.Context, src io.ReaderAt, size int64, opts Options, from int64, identityOnly bool) (*State, error) {
	ropts := rollout.ReaderOptions{Path: opts.Path}
	if from > 0 {
		ropts.ReadAhead = 4096 // only the header frame is read from the start
	}
	r, err := rollout.NewReader(src, size, ropts)
	if err != nil {
		if errors.Is(err, rollout.ErrCorrupt) {
			return nil, identityError(ErrNoHeader, hintInspect, "%v", err)
		}
		return nil, err
	}
	fileThread := r.Header().ThreadID
	p := newReplay(opts)
	p.identityOnly = identityOnly
	// The header record comes first, whatever the starting offset.
	if !r.Next() {
		if err := r.Err(); err != nil {
			return nil, err
		}
		return nil, identityError(ErrNoHeader, hintInspect, "%s: no records", opts.Path)
	}
	if len(r.Damage()) > 0 {
		return nil, identityError(ErrNoHeader, hintInspect, "%s: damage before the first record: %v", opts.Path, r.Damage()[0])
	}
	if err := p.header(r.Record(), fileThread); err != nil {
		return nil, err
	}
	p.st.LastSeq = 1
	if from > 0 {
		p.st.Report.FromOffset = from
		if r, err = rollout.NewReader(src, size, rollout.ReaderOptions{Path: opts.Path, StartOffset: from}); err != nil {
			return nil, err
		}
		p.partial = true
	}
	if err := drain(ctx, r, p, size); err != nil {
		return nil, err
	}
	if identityOnly {
		return nil, nil
	}
	p.finish(opts.History)
	if from > 0 {
		trimToCheckpoint(p.st)
	}
	return p.st, nil
}

// drain applies every record and damage region after the first record.
// A rollout with more than pipelineMin bytes left is read and decoded on a
// second goroutine while this one applies (drainPipelined) when there is a
// second processor; a short one is not worth the hand-off.
func drain(ctx context.Context, r *rollout.Reader, p *replay, size int64) error {
	if size-r.End() > pipelineMin && runtime.GOMAXPROCS(0) > 1 {
		return drainPipelined(ctx, r, p)
	}
	seen := len(r.Damage())
	var d decoded
	for i := 0; r.Next(); i++ {
		if i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		for dm := r.Damage(); seen < len(dm); seen++ {
			p.damage(dm[seen])
		}
		d = decoded{off: r.FrameOffset(), rec: r.Record()}
		p.decode(&d)
		if err := p.record(&d); err != nil {
			return err
		}
	}
	if err := r.Err(); err != nil {
		return err
	}
	for dm := r.Damage(); seen < len(dm); seen++ {
		p.damage(dm[seen])
	}
	p.tornTail(r)
	return nil
}

func (p *replay) tornTail(r *rollout.Reader) {
	if t := r.TornTail(); t != nil {
		p.st.Report.TornTail, p.st.Report.TornTailOffset = true, t.Offset
	}
}

// pipelineMin is the size left to read above which drain reads on a
// second goroutine (BenchmarkReplay: 1.4-1.6x one goroutine's speed on two
// processors).
var pipelineMin int64 = 1 << 20

// feedBatch is how many records (and damage regions) go to the applying
// goroutine at a time.
const feedBatch = 256

// drainPipelined is drain with the reading (frames, checksums, envelopes)
// and the decoding of bodies on a second goroutine, which hands batches
// of decoded records, and the damage met between them in file order, to
// this one. This goroutine keeps all of the replay's state; the reader
// and its damage list are read here only after the other has finished.
func drainPipelined(ctx context.Context, r *rollout.Reader, p *replay) error {
	batches := make(chan []decoded, 2)
	free := make(chan []decoded, 4)
	stop := make(chan struct{})
	var readErr error // set before batches is closed
	go func() {
		defer close(batches)
		buf := make([]decoded, 0, feedBatch)
		flush := func() bool {
			select {
			case batches <- buf:
			case <-stop:
				return false
			}
			select {
			case buf = <-free:
				buf = buf[:0]
			default:
				buf = make([]decoded, 0, feedBatch)
			}
			return true
		}
		// next returns the next slot of the batch (entries are built in
		// place: they are large), or nil when the applier has stopped.
		next := func() *decoded {
			if len(buf) == feedBatch && !flush() {
				return nil
			}
			buf = buf[:len(buf)+1]
			d := &buf[len(buf)-1]
			*d = decoded{}
			return d
		}
		damage := func(seen int) (int, bool) {
			for dm := r.Damage(); seen < len(dm); seen++ {
				d := next()
				if d == nil {
					return seen, false
				}
				*d = decoded{dmg: dm[seen]}
			}
			return seen, true
		}
		seen, ok := len(r.Damage()), true
		for i := 0; r.Next(); i++ {
			if i%4096 == 0 {
				if err := ctx.Err(); err != nil {
					readErr = err
					return
				}
			}
			if seen, ok = damage(seen); !ok {
				return
			}
			d := next()
			if d == nil {
				return
			}
			d.off, d.rec = r.FrameOffset(), r.Record()
			if len(batches) > 0 {
				// The applier has a batch waiting, so decoding here costs
				// it nothing; otherwise the body is left for it. That
				// keeps both goroutines busy whatever the mix of records.
				p.decode(d)
			}
		}
		if _, ok = damage(seen); !ok {
			return
		}
		if len(buf) > 0 {
			flush()
		}
	}()
	defer func() {
		// However this returns (an identity error, even a panic), the
		// reader stops first: it must not read on after this returns (the
		// caller may close the file). batches is closed when it has.
		close(stop)
		for range batches {
		}
	}()
	for buf := range batches {
		for i := range buf {
			if d := &buf[i]; d.dmg != nil {
				p.damage(d.dmg)
			} else {
				p.decode(d)
				if err := p.record(d); err != nil {
					return err
				}
			}
		}
		clear(buf) // drop what the records point at before it is reused
		select {
		case free <- buf:
		default:
		}
	}
	if readErr != nil {
		return readErr
	}
	if err := r.Err(); err != nil {
		return err
	}
	p.tornTail(r)
	return nil
}

// offsetUsable says whether a replay from a checkpoint's frame stands for
// the whole thread: the checkpoint at that offset was chosen, it is a
// post-turn checkpoint whose covered turn ended in the part read (so the
// turn's commit frame holds it), and every other turn seen started there
// too (none straddles the checkpoint). Otherwise Resume reads everything.
func offsetUsable(st *State, off int64) bool {
	c := st.Report.Checkpoint
	if c == nil || c.Offset != off || c.Trigger != rollout.TriggerPostTurn || !st.offsetClean {
		return false
	}
	return true
}

// trimToCheckpoint drops, from a state replayed from a checkpoint's frame,
// the turns up to and including the covered turn: the checkpoint's
// replacement history stands for them, and their records were read only in
// part.
func trimToCheckpoint(st *State) {
	c := st.Report.Checkpoint
	if c == nil {
		return
	}
	for i, t := range st.Turns {
		if t.ID == c.CoveredTurn {
			dropped := map[string]bool{}
			for _, d := range st.Turns[:i+1] {
				dropped[d.ID] = true
			}
			st.Turns = st.Turns[i+1:]
			var inter []string
			for _, id := range st.Interrupted {
				if !dropped[id] {
					inter = append(inter, id)
				}
			}
			st.Interrupted = inter
			return
		}
	}
}
