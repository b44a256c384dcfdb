package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// childEnv carries a child's configuration (JSON). A process started with
// it set runs the child side of a mode instead of the harness: main checks
// it first, and so does TestMain in the tests, whose binary is re-executed
// the same way.
const childEnv = "ROLLOUTCRASH_CHILD"

// childConfig is what a child process does.
type childConfig struct {
	Role      string   `json:"role"` // "kill", "twoproc" or "fleet"
	Workspace string   `json:"workspace"`
	Seed      uint64   `json:"seed"`
	Iter      int      `json:"iter"`
	Existing  []string `json:"existing"` // threads to resume
	Created   []string `json:"created"`  // threads to create
	Meta      bool     `json:"meta"`     // a second goroutine appends to the threads
	Large     float64  `json:"large"`    // probability of a large text
	// Phase1 is how long a twoproc child checks the locks and reads while
	// the parent writes.
	Phase1 time.Duration `json:"phase1"`
	// MaxRun ends a kill child that was never killed.
	MaxRun time.Duration `json:"max_run"`
	// Fleet: the host's name, the tag that makes its op ids unique (and
	// names its ready signal), and its lease.
	Host     string        `json:"host,omitempty"`
	Tag      string        `json:"tag,omitempty"`
	LeaseTTL time.Duration `json:"lease_ttl,omitempty"`
}

// childMain runs the child side; its side channel is file descriptor 3.
func childMain() int {
	var cc childConfig
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &cc); err != nil {
		fmt.Fprintf(os.Stderr, "rolloutcrash child: bad %s: %v\n", childEnv, err)
		return 2
	}
	j := pipeJournal(os.NewFile(3, "side-channel"))
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	switch cc.Role {
	case "kill":
		return childKill(context.Background(), cc, j, logger)
	case "twoproc":
		return childTwoproc(context.Background(), cc, j, logger)
	case "fleet":
		return childFleet(context.Background(), cc, j, logger)
	}
	fmt.Fprintf(os.Stderr, "rolloutcrash child: unknown role %q\n", cc.Role)
	return 2
}

// oneLine makes an error fit a journal line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// child is a running child process and its side channel.
type child struct {
	cmd      *exec.Cmd
	out      *cappedBuffer
	stdin    io.WriteCloser
	exited   chan struct{}
	readDone chan struct{}
	waitErr  error
}

// startChild starts cfg.exe as a child with cc, its side channel read into
// led until the child is gone.
func startChild(cfg *config, cc childConfig, led *ledger, withStdin bool) (*child, error) {
	b, err := json.Marshal(cc)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	ch := &child{cmd: exec.Command(cfg.exe), out: &cappedBuffer{max: 64 << 10}, exited: make(chan struct{}), readDone: make(chan struct{})}
	// A data race found in a child ends it at once (it would be killed
	// before reporting otherwise).
	ch.cmd.Env = append(os.Environ(), childEnv+"="+string(b), "GORACE=halt_on_error=1")
	ch.cmd.ExtraFiles = []*os.File{w}
	ch.cmd.Stdout, ch.cmd.Stderr = ch.out, ch.out
	if os.Getenv("ROLLOUTCRASH_DEBUG") != "" {
		ch.cmd.Stderr = io.MultiWriter(ch.out, os.Stderr)
	}
	if withStdin {
		if ch.stdin, err = ch.cmd.StdinPipe(); err != nil {
			r.Close()
			w.Close()
			return nil, err
		}
	}
	if err := ch.cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	w.Close() // the child holds the only write end: EOF once it is gone
	go func() {
		defer close(ch.readDone)
		defer r.Close()
		if err := led.read(r); err != nil {
			led.line("E side channel: " + oneLine(err.Error()))
		}
	}()
	go func() {
		ch.waitErr = ch.cmd.Wait()
		close(ch.exited)
	}()
	return ch, nil
}

// kill sends SIGKILL and waits for the child and its side channel.
func (ch *child) kill() {
	_ = ch.cmd.Process.Kill() // SIGKILL on unix
	ch.wait()
}

func (ch *child) wait() {
	<-ch.exited
	<-ch.readDone
}

// tail is the end of what the child printed, for a failure report.
func (ch *child) tail() string {
	s := strings.TrimSpace(ch.out.String())
	if s == "" {
		return "(no output)"
	}
	return "output:\n" + s
}

// cappedBuffer keeps the last max bytes written.
type cappedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if over := c.buf.Len() - c.max; over > 0 {
		c.buf.Next(over)
	}
	return len(p), nil
}

func (c *cappedBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
