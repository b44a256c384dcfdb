package rolloutdb

import (
	"encoding/binary"
	"path/filepath"
	"sync"

	"github.com/cockroachdb/errors"
	"golang.org/x/sys/unix"
)

// notifyLinux reads inotify's events only when a round starts, never as
// they come. While nothing reads them, the kernel keeps the first write's
// event queued, merges the writes to that file that follow into it, and
// wakes nobody: a writer in another process that streams wakes this
// process once per round, not once per write. fsnotify keeps a read
// outstanding through Go's netpoller, which the kernel wakes at every
// event not merged, even while dispatch sleeps: a process doing nothing
// but take fsnotify's events in such rounds used 8.8 ms of processor
// time and 470 context switches per 500 appends of a writer streaming
// 7,000 a second; read this way, 3.6 ms and 200 (docs/BENCHMARKS.md).
//
// The round's wait is a poll(2) of the inotify descriptor and an eventfd
// that close signals; the descriptors are closed by wait once it sees the
// signal.
type notifyLinux struct {
	ifd, efd  int
	dirs      map[int32]string // watch descriptor: directory
	buf       []byte
	evs       []fsEvent
	closeOnce sync.Once
}

// inotifyMask: what the thread directories are watched for.
const inotifyMask = unix.IN_MODIFY | unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

func newPlatformNotifier(dirs []string) (dirNotifier, error) {
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, errors.Wrap(err, "inotify_init1")
	}
	n := &notifyLinux{ifd: ifd, efd: -1, dirs: map[int32]string{}, buf: make([]byte, 64<<10)}
	if n.efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		n.release()
		return nil, errors.Wrap(err, "eventfd")
	}
	for _, d := range dirs {
		wd, err := unix.InotifyAddWatch(ifd, d, inotifyMask)
		if err != nil {
			n.release()
			return nil, errors.Wrapf(err, "inotify_add_watch %s", d)
		}
		n.dirs[int32(wd)] = d
	}
	return n, nil
}

func (n *notifyLinux) release() {
	_ = unix.Close(n.ifd)
	if n.efd >= 0 {
		_ = unix.Close(n.efd)
	}
}

func (n *notifyLinux) wait() ([]fsEvent, bool, bool) {
	fds := []unix.PollFd{{Fd: int32(n.ifd), Events: unix.POLLIN}, {Fd: int32(n.efd), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			// Not expected (EFAULT, ENOMEM): a round with everything
			// to look at again, after a moment.
			return nil, true, true
		}
		if fds[1].Revents != 0 {
			n.release()
			return nil, false, false
		}
		if fds[0].Revents != 0 {
			break
		}
	}
	n.evs = n.evs[:0]
	overflow := false
	for {
		k, err := unix.Read(n.ifd, n.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || k <= 0 {
			break // EAGAIN: all read
		}
		overflow = n.parse(n.buf[:k]) || overflow
	}
	return n.evs, overflow, true
}

// parse appends the events in b (struct inotify_event, each followed by
// its name padded with NULs); it reports an overflow, or a watched
// directory gone.
func (n *notifyLinux) parse(b []byte) (overflow bool) {
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(b[0:]))
		mask := binary.NativeEndian.Uint32(b[4:])
		size := unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(b[12:]))
		if size > len(b) {
			return true // cannot happen: the kernel writes whole events
		}
		name := b[unix.SizeofInotifyEvent:size]
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		b = b[size:]
		if mask&(unix.IN_Q_OVERFLOW|unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
			overflow = true
			continue
		}
		dir, ok := n.dirs[wd]
		if !ok || len(name) == 0 {
			continue
		}
		var op fsOp
		if mask&unix.IN_MODIFY != 0 {
			op |= opWrite
		}
		if mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
			op |= opCreate
		}
		if mask&unix.IN_DELETE != 0 {
			op |= opRemove
		}
		if mask&unix.IN_MOVED_FROM != 0 {
			op |= opRename
		}
		if op != 0 {
			n.evs = append(n.evs, fsEvent{Name: filepath.Join(dir, string(name)), Op: op})
		}
	}
	return overflow
}

// close signals wait, which closes the descriptors.
func (n *notifyLinux) close() error {
	var err error
	n.closeOnce.Do(func() {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		_, err = unix.Write(n.efd, one[:])
	})
	return errors.Wrap(err, "eventfd write")
}
