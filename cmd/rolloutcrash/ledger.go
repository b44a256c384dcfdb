package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
)

// A journal line says what a writer did, one line per event, written in the
// order the events happened:
//
//	A <thread> <op> <key>,<key>,...  about to call the library: the records the call writes
//	K <thread> <op> <first> <last>   the call returned nil (seqs 0 0 when the caller cannot know them)
//	F <thread> <op> <reason>         the call returned an error: nothing acknowledged
//	C <thread>                       about to create the thread
//	CK <thread>                      the thread's rollout was created (or opened) for writing
//	R <name>                         the child reached a point (ready-<iteration>: its workspace is open)
//	V <thread> <seq> <key>           twoproc: a reader in another process saw this record
//	N <name> <n>                     a counter the child reports
//	E <text>                         the child found something wrong
//
// An A line is written before the call and a K line only after it returned
// nil, so a kill at any instant leaves the parent knowing a superset of what
// may be on disk and a subset of what must be.
type journal func(line string)

// pipeJournal writes lines to the side channel of a child process. Each
// line is one write(2) of less than PIPE_BUF bytes, so a kill never leaves
// half a line that parses.
func pipeJournal(f *os.File) journal {
	var mu sync.Mutex
	return func(line string) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = f.WriteString(line + "\n")
	}
}

// op is one library call that writes one frame.
type op struct {
	thread string
	id     string
	keys   []string
	// attempt is the event number of the first attempt (a retry writes
	// the same records again), ack that of the acknowledgement (0: none),
	// fail that of the last failure.
	attempt, ack, fail int64
	first, last        uint64 // from the ack; 0 when unknown
	reason             string // of the last failure
}

// threadLedger is what the writers said about one thread.
type threadLedger struct {
	id              string
	createAttempted bool
	createAcked     bool
	ops             []*op
	byKey           map[string]*op
	byID            map[string]*op
}

// ledger collects the journal lines of every writer of a workspace, in
// event order: the parent's expectations.
type ledger struct {
	mu       sync.Mutex
	ev       int64
	threads  map[string]*threadLedger
	problems []string // malformed lines, child-reported errors
	counters map[string]int64
	signals  map[string]chan struct{}
	views    []view // twoproc: records another process saw
	// onAck, if set, is told each acknowledged frame (twoproc passes it on
	// to the reader process).
	onAck func(thread string, first, last uint64)
}

// view is a record a reading process reported.
type view struct {
	thread string
	seq    uint64
	key    string
}

func newLedger() *ledger {
	return &ledger{threads: map[string]*threadLedger{}, counters: map[string]int64{}, signals: map[string]chan struct{}{}}
}

// signal returns a channel closed once the line "R name" was seen (or, for
// "ck:<thread>", once the thread was opened for writing). A ledger lives
// as long as its workspace: names carry the iteration.
func (l *ledger) signal(name string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.signalLocked(name)
}

func (l *ledger) signalLocked(name string) chan struct{} {
	ch := l.signals[name]
	if ch == nil {
		ch = make(chan struct{})
		l.signals[name] = ch
	}
	return ch
}

func (l *ledger) fire(name string) {
	ch := l.signalLocked(name)
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func (l *ledger) thread(id string) *threadLedger {
	t := l.threads[id]
	if t == nil {
		t = &threadLedger{id: id, byKey: map[string]*op{}, byID: map[string]*op{}}
		l.threads[id] = t
	}
	return t
}

// journal returns a journal that records into l directly (in-process
// writers).
func (l *ledger) journal() journal { return l.line }

// line applies one journal line.
func (l *ledger) line(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ev++
	f := strings.Fields(s)
	if len(f) == 0 {
		return
	}
	bad := func() { l.problems = append(l.problems, "malformed journal line: "+s) }
	switch f[0] {
	case "A":
		if len(f) != 4 {
			bad()
			return
		}
		t := l.thread(f[1])
		if o := t.byID[f[2]]; o != nil {
			if strings.Join(o.keys, ",") != f[3] {
				l.problems = append(l.problems, fmt.Sprintf("thread %s op %s retried with other content", f[1], f[2]))
			}
			return // a retry: the first attempt is the earliest the records could be written
		}
		o := &op{thread: f[1], id: f[2], keys: strings.Split(f[3], ","), attempt: l.ev}
		t.ops = append(t.ops, o)
		t.byID[o.id] = o
		for _, k := range o.keys {
			if prev := t.byKey[k]; prev != nil {
				l.problems = append(l.problems, fmt.Sprintf("thread %s: ops %s and %s write the same record %s (harness bug)", f[1], prev.id, o.id, k))
			}
			t.byKey[k] = o
		}
	case "K":
		if len(f) != 5 {
			bad()
			return
		}
		o := l.thread(f[1]).byID[f[2]]
		first, err1 := strconv.ParseUint(f[3], 10, 64)
		last, err2 := strconv.ParseUint(f[4], 10, 64)
		if o == nil || err1 != nil || err2 != nil {
			bad()
			return
		}
		o.ack, o.first, o.last = l.ev, first, last
		if l.onAck != nil {
			l.onAck(o.thread, first, last)
		}
	case "F":
		if len(f) < 3 {
			bad()
			return
		}
		o := l.thread(f[1]).byID[f[2]]
		if o == nil {
			bad()
			return
		}
		o.fail = l.ev
		o.reason = strings.Join(f[3:], " ")
	case "C":
		if len(f) != 2 {
			bad()
			return
		}
		l.thread(f[1]).createAttempted = true
	case "CK":
		if len(f) != 2 {
			bad()
			return
		}
		t := l.thread(f[1])
		t.createAttempted, t.createAcked = true, true
		l.fire("ck:" + f[1])
	case "R":
		if len(f) != 2 {
			bad()
			return
		}
		l.fire(f[1])
	case "V":
		seq, err := strconv.ParseUint(f[min(2, len(f)-1)], 10, 64)
		if len(f) != 4 || err != nil {
			bad()
			return
		}
		l.views = append(l.views, view{thread: f[1], seq: seq, key: f[3]})
	case "N":
		n, err := strconv.ParseInt(f[min(2, len(f)-1)], 10, 64)
		if len(f) != 3 || err != nil {
			bad()
			return
		}
		l.counters[f[1]] += n
	case "E":
		l.problems = append(l.problems, strings.TrimPrefix(s, "E "))
	default:
		bad()
	}
}

// read applies every complete line of r until EOF. A last line without
// its newline (a write cut short) is dropped.
func (l *ledger) read(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		s, err := br.ReadString('\n')
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		l.line(strings.TrimSuffix(s, "\n"))
	}
}

// takeProblems returns and clears the problems reported so far.
func (l *ledger) takeProblems() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.problems
	l.problems = nil
	return p
}

// takeCounters returns and clears the counters the writers reported.
func (l *ledger) takeCounters() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.counters
	l.counters = map[string]int64{}
	return c
}

// takeViewsLocked returns and clears the views reported so far (l.mu
// held).
func (l *ledger) takeViewsLocked() []view {
	v := l.views
	l.views = nil
	return v
}

// acked counts the acknowledged records.
func (l *ledger) acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, t := range l.threads {
		for _, o := range t.ops {
			if o.ack != 0 {
				n += len(o.keys)
			}
		}
	}
	return n
}
