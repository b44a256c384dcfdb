package pgtest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"
	"golang.org/x/sys/unix"
)

// env is the environment of every PostgreSQL program: this process's,
// less the PG* variables that would point a program at another server,
// with the C locale so that the log reads the same everywhere (Start looks
// for words in it), and HOME in the cluster's directory, which the user
// postgres can read when root's home is not.
func env(dir string) []string {
	var e []string
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "PG"), strings.HasPrefix(kv, "LC_"), strings.HasPrefix(kv, "LANG="), strings.HasPrefix(kv, "HOME="):
			continue
		}
		e = append(e, kv)
	}
	return append(e, "LC_ALL=C", "LANG=C", "HOME="+dir)
}

// runTool runs one of the PostgreSQL programs (initdb, pg_basebackup) to
// completion in the cluster's directory, as the server's user. What it
// printed is in the error.
func (c *Cluster) runTool(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, c.bin.path(name), args...)
	cmd.Dir = c.dir
	cmd.Env = env(c.dir)
	// The tool is waited for on this goroutine, so the thread that forks
	// it outlives it: the parent-death signal fires only if this process
	// dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.user.credential(), Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return errors.Wrapf(err, "pgtest: %s failed: %s", name, tail(out, 2048))
	}
	return nil
}

// postmaster is a running server: the postgres process this one started.
type postmaster struct {
	pid  int
	done chan struct{} // closed once the postmaster has exited
	err  error         // how it exited, once done is closed
}

// spawn starts the postmaster on the cluster's data directory and port,
// without waiting for it to accept connections. Its output is appended to
// the cluster's log.
//
// Port, socket directory and listen address are given on the command
// line, so that a standby's copy of the primary's postgresql.conf needs no
// change; every other setting is in postgresql.conf, where ALTER SYSTEM can
// override it.
func (c *Cluster) spawn() (*postmaster, error) {
	logf, err := os.OpenFile(c.LogPath(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, errors.Wrap(err, "pgtest: open the server log")
	}
	cmd := exec.Command(c.bin.path("postgres"), "-D", c.DataDir(), "-p", strconv.Itoa(c.port), "-k", c.dir, "-h", "127.0.0.1")
	cmd.Dir = c.dir
	cmd.Env = env(c.dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: c.user.credential(),
		// Dies with this process: see the package comment.
		Pdeathsig: syscall.SIGKILL,
		// A terminal's ^C goes to this process, which stops the server in
		// order, and not to the server directly.
		Setpgid: true,
	}
	pm := &postmaster{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal is sent when the forking thread ends,
		// which the Go runtime may otherwise do at any time for a locked
		// goroutine's thread; keep this one until the postmaster is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := startPinned(cmd, c.opts.CPUs)
		logf.Close() // the postmaster has its own descriptor
		if err != nil {
			started <- errors.Wrap(err, "pgtest: start postgres")
			return
		}
		pm.pid = cmd.Process.Pid
		started <- nil
		pm.err = cmd.Wait()
		close(pm.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return pm, nil
}

// startPinned starts cmd bound to cpus (none: unbound). A child inherits
// the CPU affinity of the thread that forks it, so the calling thread,
// locked to its goroutine, is bound for the fork and given its own
// binding back after.
func startPinned(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	var was, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		return errors.Wrap(err, "pgtest: read the CPU affinity")
	}
	for _, cpu := range cpus {
		set.Set(cpu)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return errors.Wrapf(err, "pgtest: bind to CPUs %v", cpus)
	}
	err := cmd.Start()
	return errors.CombineErrors(err, errors.Wrap(unix.SchedSetaffinity(0, &was), "pgtest: restore the CPU affinity"))
}

// exited reports whether the postmaster has exited.
func (pm *postmaster) exited() bool {
	select {
	case <-pm.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the postmaster only, which passes a shutdown on to
// its children in order.
func (pm *postmaster) signal(sig syscall.Signal) {
	if !pm.exited() {
		_ = syscall.Kill(pm.pid, sig)
	}
}

// signalAll sends sig to the postmaster and to each of its children.
// A process group would not reach them: every child of the postmaster
// calls setsid. The children are listed before the postmaster is
// signalled (a killed postmaster's children are handed to init), and
// listed again after a SIGSTOP (for one forked in between); a SIGCONT
// reaches the children before the postmaster.
func (pm *postmaster) signalAll(sig syscall.Signal) {
	if pm.exited() {
		return
	}
	kids := children(pm.pid)
	if sig != syscall.SIGCONT {
		_ = syscall.Kill(pm.pid, sig)
	}
	if sig == syscall.SIGSTOP {
		kids = append(kids, children(pm.pid)...)
	}
	for _, k := range kids {
		_ = syscall.Kill(k, sig)
	}
	if sig == syscall.SIGCONT {
		_ = syscall.Kill(pm.pid, sig)
	}
}

// children lists the processes whose parent is pid, from /proc.
func children(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var kids []int
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		if k, err := strconv.Atoi(filepath.Base(filepath.Dir(s))); err == nil {
			kids = append(kids, k)
		}
	}
	return kids
}

// shutdownWait bounds an orderly shutdown before the server and its
// children are killed.
const shutdownWait = 30 * time.Second

// stopServer shuts the running server down with sig (SIGINT: fast,
// SIGQUIT: immediate) and waits for the postmaster to exit; one that has
// not within shutdownWait is killed with its children. A paused server is
// continued first, or it would never see the signal.
func (c *Cluster) stopServer(sig syscall.Signal) {
	pm := c.pm
	if pm == nil {
		return
	}
	c.pm = nil
	if c.paused {
		pm.signalAll(syscall.SIGCONT)
		c.paused = false
	}
	pm.signal(sig)
	t := time.NewTimer(shutdownWait)
	defer t.Stop()
	select {
	case <-pm.done:
	case <-t.C:
		pm.signalAll(syscall.SIGKILL)
		<-pm.done
	}
}

// tail returns the end of b, at most n bytes, from a line's start.
func tail(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// readFrom returns what the file at path holds from offset on.
func readFrom(path string, offset int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		return nil
	}
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(f)
	return buf.Bytes()
}

// fileSize is the size of the file at path, 0 if there is none.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// processAlive reports whether a process with this pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
