package projection

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Background work (the projector, the search index) must not take the
// processors an appender needs. An appender spends most of an append in
// fdatasync; when it returns and every processor runs background work, it
// waits for one to be preempted (up to 10 ms), which is the appender's
// latency and, one appender at a time, its throughput. So while appends
// arrive, background work runs on at most GOMAXPROCS-1 processors, one
// unit of work (a thread's batch, a run of index operations) at a time,
// yielding between units. When nothing has been appended for a while
// (a rebuild at open, an idle host) it runs on all of them.

// appendHot is how long after an append background work stays gated.
const appendHot = 100 * time.Millisecond

var (
	bgSlots    = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1))
	lastAppend atomic.Int64 // unix ns of the last Enqueue, in any store
)

// noteAppend records an append's time and returns it (unix ns).
func noteAppend() int64 {
	now := time.Now().UnixNano()
	lastAppend.Store(now)
	return now
}

func appendsHot() bool { return time.Now().UnixNano()-lastAppend.Load() <= int64(appendHot) }

// bgEnter starts a unit of background work; the caller calls the result
// when the unit is done.
func bgEnter() func() {
	if !appendsHot() {
		return func() {}
	}
	bgSlots <- struct{}{}
	return func() {
		<-bgSlots
		runtime.Gosched()
	}
}
