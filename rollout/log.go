package rollout

import (
	"context"
	"sync"

	"github.com/rolloutdb/rolloutdb/vfs"
)

// A Log makes the frames of many rollouts durable together, so that an
// append waits for one shared commit instead of an fdatasync of its own
// rollout: the workspace journal (package journal) is one, and a log in a
// database would be another. The Writer writes each frame to its rollout
// itself, without an fsync, and then submits a copy; the append is
// acknowledged once the log has the copy durable. The rollout stays the
// authority: readers never look at the log, and after a crash the log's
// replay writes back into the rollouts what they lack.
//
// The contract between a Log and its writers:
//   - A writer submits the entries of its stream in rollout order (it holds
//     its lock across Submit), and the log makes them durable in that
//     order: an entry durable implies every earlier entry of its stream is.
//   - When the log cannot make an entry durable it abandons it and every
//     entry not yet durable, of every stream. An abandoned entry never
//     becomes durable later, in this process or in a replay. Submit then
//     refuses the streams concerned until their writers have cut their
//     rollouts back and called Reset.
//   - The log keeps an entry until the writer says its rollout is synced
//     past it (Release). A writer that closes without that leaves its
//     entries for WriteBack or the log's replay.
//
// A Log knows nothing of its writers: it is told what to hold, and asked
// for what it holds.
type Log interface {
	// MaxEntry is the largest rollout frame the log takes; a larger frame
	// is made durable by an fsync of its rollout.
	MaxEntry() int
	// Submit hands the log a frame the caller has written to its rollout
	// at e.Offset. It returns at once; the ticket's Wait says when the
	// entry is durable.
	Submit(e LogEntry) (LogTicket, error)
	// Reset lets a stream whose entries were abandoned submit again. The
	// caller holds its lock across Reset and the cut of its rollout past
	// them (the file is truncated before its next write). It returns the
	// stream's last entry the log made durable (zero if none, or if the
	// log has let the stream's entries go): the cut must keep it.
	Reset(s Stream) LogMark
	// Release says the stream's rollout is synced through end: the log
	// need not keep its entries before end. A Release of a stream the log
	// holds nothing of yet is dropped (it may overtake the commit it
	// covers): a writer says it again after each fsync and at Close.
	Release(s Stream, end int64)
	// WriteBack writes into f, the stream's rollout open for writing at
	// path, every durable entry of the stream's thread the log holds:
	// those f lacks, and those it seems to hold, which may be only in
	// pages a failed fsync marked clean. The caller syncs f.
	WriteBack(ctx context.Context, thread, path string, f vfs.File) error
	// Pressure is signalled when the log wants its writers' rollouts
	// synced and released (a segment filled).
	Pressure() <-chan struct{}
}

// A Stream names one rollout file: its thread and file id (a thread
// created again has a new file id).
type Stream struct {
	Thread string
	FileID uint64
}

// A LogEntry is one rollout frame handed to a Log: written to its stream's
// rollout at Offset, after the frame at Prev.
type LogEntry struct {
	Stream       Stream
	Offset, Prev int64
	Frame        []byte // header and payload, as written; the log copies it
}

// A LogTicket waits for a submitted entry.
type LogTicket interface {
	// Wait returns nil once the entry is durable, or the error that
	// abandoned it (it matches ErrNotDurable).
	Wait() error
}

// A LogMark is where a stream's durable entries end: the end of its last
// durable frame, that frame's offset and last seq.
type LogMark struct {
	End, Frame int64
	Seq        uint64
}

// A LogGroup is the writers of one process that share a Log: it syncs
// their rollouts when the log asks (Log.Pressure) and tells the log what
// it may let go, and it remembers the threads whose writer closed with
// entries only in the log, so that the next writer of the thread writes
// them back first. Use one per Log; set it as Options.Log.
type LogGroup struct {
	log Log

	mu      sync.Mutex
	writers map[*Writer]struct{}
	pinned  map[string]int // thread: writers closed unsynced
	closed  bool

	stop, done chan struct{}
}

// NewLogGroup starts the group of writers that share log.
func NewLogGroup(log Log) *LogGroup {
	g := &LogGroup{log: log, writers: map[*Writer]struct{}{}, pinned: map[string]int{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go g.run()
	return g
}

// Log returns the group's log.
func (g *LogGroup) Log() Log { return g.log }

func (g *LogGroup) run() {
	defer close(g.done)
	for {
		select {
		case <-g.stop:
			return
		case <-g.log.Pressure():
			g.SyncAll()
		}
	}
}

// SyncAll syncs every rollout of the group with frames not yet synced in
// it and releases them in the log. A rollout whose sync fails keeps its
// entries in the log (its writer says so on its next call).
func (g *LogGroup) SyncAll() {
	g.mu.Lock()
	ws := make([]*Writer, 0, len(g.writers))
	for w := range g.writers {
		ws = append(ws, w)
	}
	g.mu.Unlock()
	for _, w := range ws {
		_ = w.syncFile()
	}
}

// Close stops the group's background syncs. The writers are closed first.
func (g *LogGroup) Close() {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.closed = true
	g.mu.Unlock()
	close(g.stop)
	<-g.done
}

func (g *LogGroup) add(w *Writer) {
	g.mu.Lock()
	g.writers[w] = struct{}{}
	g.mu.Unlock()
}

// remove takes a closing writer out of the group; unsynced says it left
// entries only in the log.
func (g *LogGroup) remove(w *Writer, unsynced bool) {
	g.mu.Lock()
	delete(g.writers, w)
	if unsynced {
		g.pinned[w.hdr.ThreadID]++
	}
	g.mu.Unlock()
}

// restore writes back into a thread's rollout (open as f, locked by the
// caller) what a closed writer of it left only in the log. The caller
// syncs f and then calls restored.
func (g *LogGroup) restore(ctx context.Context, thread, path string, f vfs.File) (bool, error) {
	g.mu.Lock()
	n := g.pinned[thread]
	g.mu.Unlock()
	if n == 0 {
		return false, nil
	}
	return true, g.log.WriteBack(ctx, thread, path, f)
}

// restored records that the thread's rollout holds, synced, what its
// closed writers left in the log.
func (g *LogGroup) restored(thread string) {
	g.mu.Lock()
	delete(g.pinned, thread)
	g.mu.Unlock()
}
