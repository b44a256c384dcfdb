package fleet

// WithTestDSNs has a Log's notifier and listener connect to notify and
// listen (a proxy, for a fault of theirs alone) instead of the pool's
// server; "" keeps it.
func WithTestDSNs(o Options, notify, listen string) Options {
	o.testing.notifyDSN, o.testing.listenDSN = notify, listen
	return o
}

// LateInsertForTest runs the commit round's insert for one frame of t at
// off under epoch, as a commit attempt that arrives late would, and says
// whether it inserted the frame.
func LateInsertForTest(t *Thread, off, epoch int64, data []byte) (bool, error) {
	got, err := t.l.com.insert(t.l.bg, []*entry{{t: t, off: off, seq: 99, epoch: epoch, data: data}})
	return got[frameKey{t.tid, off}], err
}

// DoubtForTest puts t in doubt, as a commit of unknown outcome does.
func DoubtForTest(t *Thread) {
	t.mu.Lock()
	t.doubt = true
	t.mu.Unlock()
}

// LoseNextBatchForTest has l lose the next WritePreparedWith's
// batch on its way to PostgreSQL (answer false) or, once it committed,
// its answer (answer true), as a network would: the append then settles
// its outcome against the database.
func LoseNextBatchForTest(l *Log, answer bool) {
	if answer {
		l.testing.lose.Store(loseAnswer)
	} else {
		l.testing.lose.Store(loseRequest)
	}
}
