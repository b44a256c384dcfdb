package main

import (
	"os/exec"
	"runtime"

	"github.com/cockroachdb/errors"
	"golang.org/x/sys/unix"
)

// startPinned starts cmd bound to cpus (none: unbound) and sends what
// cmd.Wait returns to done once it exits. A child inherits the CPU
// affinity of the thread that forks it, so the fork is made from a
// goroutine locked to its thread, bound for the fork and given its own
// binding back after; the goroutine stays on that thread until the child
// exits, so that a parent-death signal, which follows the forking thread,
// would follow this process.
func startPinned(cmd *exec.Cmd, cpus []int, done chan<- error) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		started <- pinnedStart(cmd, cpus)
		done <- cmd.Wait()
	}()
	return <-started
}

func pinnedStart(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	var was, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		return errors.Wrap(err, "read the CPU affinity")
	}
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return errors.Wrapf(err, "bind to CPUs %v", cpus)
	}
	err := cmd.Start()
	return errors.CombineErrors(err, errors.Wrap(unix.SchedSetaffinity(0, &was), "restore the CPU affinity"))
}
