//go:build unix

package rolloutdb_test

import (
	"syscall"
	"time"
)

// processorTime is the processor time this process has used (user and
// system).
func processorTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
