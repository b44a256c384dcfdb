package rolloutdb_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// BenchmarkFollow: one goroutine appends items (SyncAlways, 512 B) into an
// open turn, in rounds of 500, with 0, 1 and 64 followers in turn, b.N
// times over (the disk's speed drifts: the rounds interleave, in an order
// that turns, so that each configuration meets it alike). Reported per
// configuration: the append rate against the rate with no follower in the
// same run (x-rate: all rounds; x-med: the median of each iteration's
// ratio to its own round with no follower), and how long
// after its append returned a follower saw each record (p50, p99; 0 when
// it saw it before the call returned). "cross" followers belong to a
// second DB on the workspace, which does not write the thread, as
// another process's would: they learn of appends from file-change
// notification and sync the bytes themselves.
//
// "os-process" followers run in a child process of their own (this test
// binary again, TestHelperFollowers), as a client process would: they
// share the processors with the writer through the OS, not its Go
// runtime. One long-lived child per follower count keeps the workspace
// open for the whole run; for each of its rounds it opens its followers,
// lets them wait, and reports when they saw each record (wall clock, the
// same on both sides), and the processor time it used meanwhile
// (child-cpu-µs/append: a measure of the followers' cost that the disk's
// drift does not move). Between its rounds it only has the workspace open.
func BenchmarkFollow(b *testing.B) {
	for _, name := range []string{"in-process", "cross-process", "os-process"} {
		cross, osProc := name == "cross-process", name == "os-process"
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			fdb := db
			if cross {
				if fdb, err = rolloutdb.Open(ctx, dir, rolloutdb.Options{}); err != nil {
					b.Fatal(err)
				}
				defer fdb.Close()
			}
			th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{ID: "b"})
			if err != nil {
				b.Fatal(err)
			}
			turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "go"})
			if err != nil {
				b.Fatal(err)
			}
			item := rollout.Item{Type: rollout.ItemReasoning, Text: string(make([]byte, 512))}
			const round = 500
			configs := []int{0, 1, 64}
			children := make([]*followersChild, len(configs))
			if osProc {
				for ci, n := range configs {
					if n == 0 {
						continue
					}
					if children[ci], err = startFollowers(dir, n); err != nil {
						b.Fatal(err)
					}
					defer children[ci].close()
				}
			}
			elapsed := make([]time.Duration, len(configs))
			lats := make([][]time.Duration, len(configs))
			// Per iteration, each configuration's rate against none's in
			// the same iteration: paired, so the disk's drift between
			// iterations cancels (reported as the median of the pairs).
			pairs := make([][]float64, len(configs))
			childCPU := make([]time.Duration, len(configs)) // os-process
			b.ResetTimer()
			for iter := range b.N {
				var took [3]time.Duration
				// The order turns each iteration, so that no configuration
				// always runs right after another.
				for k := range configs {
					ci := (k + iter) % len(configs)
					n := configs[ci]
					first := th.LastSeq() + 1
					last := first + round - 1
					acked := make([]time.Time, round)
					ready := make(chan struct{})
					var mu sync.Mutex
					var wg sync.WaitGroup
					var fs []rolloutdb.Follower
					child := children[ci]
					if child != nil {
						if err := child.round(first, last); err != nil {
							b.Fatal(err)
						}
					}
					local := n // followers in this process
					if osProc {
						local = 0
					}
					for range local {
						f, err := fdb.Follow(ctx, "b", rolloutdb.FollowOptions{AfterSeq: first - 1})
						if err != nil {
							b.Fatal(err)
						}
						fs = append(fs, f)
						wg.Add(1)
						go func() {
							defer wg.Done()
							seen := make([]time.Time, 0, round)
							for f.Next() {
								if s := f.Record().Seq; s >= first && s <= last {
									seen = append(seen, time.Now())
									if s == last {
										break
									}
								}
							}
							<-ready
							mu.Lock()
							for i, t := range seen {
								lats[ci] = append(lats[ci], max(0, t.Sub(acked[i])))
							}
							mu.Unlock()
						}()
					}
					if child == nil {
						// The followers open the rollout and wait, as long-lived
						// ones would be, before the timed appends (a child
						// waits so before it says it is ready). Every round
						// waits alike, with or without followers: the first
						// appends after a pause are slower (the processors and
						// the disk idled), and a pause before the follower
						// rounds alone made them look 3-5% slower.
						time.Sleep(50 * time.Millisecond)
					}
					start := time.Now()
					for i := range round {
						if _, err := turn.Add(ctx, item); err != nil {
							b.Fatal(err)
						}
						acked[i] = time.Now()
					}
					took[ci] = time.Since(start)
					elapsed[ci] += took[ci]
					close(ready)
					wg.Wait()
					for _, f := range fs {
						f.Close()
					}
					if child != nil {
						seen, cpu, err := child.wait()
						if err != nil {
							b.Fatal(err)
						}
						childCPU[ci] += cpu
						for _, sn := range seen {
							lats[ci] = append(lats[ci], max(0, time.Duration(sn.at-acked[sn.seq-first].UnixNano())))
						}
					}
				}
				for ci := range configs {
					pairs[ci] = append(pairs[ci], took[0].Seconds()/took[ci].Seconds())
				}
			}
			b.StopTimer()
			base := float64(b.N*round) / elapsed[0].Seconds()
			b.ReportMetric(base, "appends/s-0")
			for ci, n := range configs[1:] {
				ci++
				rate := float64(b.N*round) / elapsed[ci].Seconds()
				b.ReportMetric(rate/base, fmt.Sprintf("x-rate-%d", n))
				slices.Sort(pairs[ci])
				b.ReportMetric(pairs[ci][len(pairs[ci])/2], fmt.Sprintf("x-med-%d", n))
				if osProc {
					b.ReportMetric(float64(childCPU[ci].Microseconds())/float64(b.N*round), fmt.Sprintf("child-cpu-µs/append-%d", n))
				}
				l := lats[ci]
				if len(l) == 0 {
					continue
				}
				slices.Sort(l)
				b.ReportMetric(float64(l[len(l)/2].Microseconds()), fmt.Sprintf("p50-µs-%d", n))
				b.ReportMetric(float64(l[len(l)*99/100].Microseconds()), fmt.Sprintf("p99-µs-%d", n))
			}
		})
	}
}

// followersChild is a child process following thread "b" (os-process).
type followersChild struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

type seenAt struct {
	seq uint64
	at  int64 // unix ns
}

// startFollowers starts a child that follows with n followers a round at
// a time, and waits until it has the workspace open.
func startFollowers(dir string, n int) (*followersChild, error) {
	args := []string{"-test.run=^TestHelperFollowers$"}
	if d := os.Getenv("ROLLOUTDB_FOLLOWERS_PROFILE"); d != "" { // a CPU profile of each child, into directory d
		args = append(args, fmt.Sprintf("-test.cpuprofile=%s/child-%d.prof", d, n))
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("ROLLOUTDB_FOLLOWERS=%s|%d", dir, n))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &followersChild{cmd: cmd, in: in, out: bufio.NewScanner(stdout)}
	if err := c.expect("open"); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *followersChild) expect(line string) error {
	for c.out.Scan() {
		if c.out.Text() == line {
			return nil
		}
	}
	return fmt.Errorf("followers' child ended before it said %q", line)
}

// round has the child's followers follow seqs first..last, and returns
// once they are open and have waited, as long-lived ones would.
func (c *followersChild) round(first, last uint64) error {
	if _, err := fmt.Fprintf(c.in, "%d %d\n", first, last); err != nil {
		return err
	}
	return c.expect("ready")
}

// wait reads what the round's followers saw, and the processor time the
// child used from "ready" until they saw it all, until the child is done.
func (c *followersChild) wait() ([]seenAt, time.Duration, error) {
	var seen []seenAt
	var cpu time.Duration
	for c.out.Scan() {
		line := c.out.Text()
		if line == "done" {
			return seen, cpu, nil
		}
		if v, ok := strings.CutPrefix(line, "cpu "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			cpu = time.Duration(n)
			continue
		}
		if f := strings.Fields(line); len(f) == 2 {
			seq, err1 := strconv.ParseUint(f[0], 10, 64)
			at, err2 := strconv.ParseInt(f[1], 10, 64)
			if err1 == nil && err2 == nil {
				seen = append(seen, seenAt{seq, at})
			}
		}
	}
	return seen, 0, fmt.Errorf("followers' child ended in a round")
}

func (c *followersChild) close() {
	_ = c.in.Close()
	_ = c.cmd.Wait()
}

// TestHelperFollowers is BenchmarkFollow's os-process child: the
// workspace open, and for each "first last" line on its input n
// followers of thread "b" from first, each until it has seen last; then
// when each saw each record.
func TestHelperFollowers(t *testing.T) {
	env := os.Getenv("ROLLOUTDB_FOLLOWERS")
	if env == "" {
		return // not the child
	}
	dir, count, ok := strings.Cut(env, "|")
	n, err := strconv.Atoi(count)
	if !ok || err != nil {
		t.Fatalf("ROLLOUTDB_FOLLOWERS=%q", env)
	}
	db, err := rolloutdb.Open(ctx, dir, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fmt.Println("open")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var first, last uint64
		if _, err := fmt.Sscanf(in.Text(), "%d %d", &first, &last); err != nil {
			t.Fatal(err)
		}
		seen := make([][]seenAt, n)
		var wg sync.WaitGroup
		for i := range n {
			f, err := db.Follow(ctx, "b", rolloutdb.FollowOptions{AfterSeq: first - 1})
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer f.Close()
				for f.Next() {
					if s := f.Record().Seq; s >= first && s <= last {
						seen[i] = append(seen[i], seenAt{s, time.Now().UnixNano()})
						if s == last {
							return
						}
					}
				}
			}()
		}
		time.Sleep(50 * time.Millisecond)
		cpu0 := processorTime()
		fmt.Println("ready")
		wg.Wait()
		w := bufio.NewWriter(os.Stdout)
		fmt.Fprintf(w, "cpu %d\n", processorTime()-cpu0)
		for _, fs := range seen {
			for _, sn := range fs {
				fmt.Fprintf(w, "%d %d\n", sn.seq, sn.at)
			}
		}
		fmt.Fprintln(w, "done")
		_ = w.Flush()
	}
}
