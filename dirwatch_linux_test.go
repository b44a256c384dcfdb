package rolloutdb

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// While nothing reads inotify's queue, the writes to one file that follow
// its first are merged into that event: a streaming writer wakes the
// follower's process once per round, not once per write.
func TestNotifyLinuxMergesWritesBetweenRounds(t *testing.T) {
	dir := t.TempDir()
	n, err := newPlatformNotifier([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	defer waitClosed(t, n)
	f, err := os.Create(filepath.Join(dir, "a.rollout"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	evs, _, ok := n.wait()
	if !ok || len(evs) != 1 || evs[0].Op != opCreate || evs[0].Name != f.Name() {
		t.Fatalf("the creation: %+v (ok %v)", evs, ok)
	}
	for range 1000 {
		if _, err := f.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, "b.rollout")); err != nil {
		t.Fatal(err)
	}
	evs, overflow, ok := n.wait()
	want := []fsEvent{{f.Name(), opWrite}, {f.Name(), opRename}, {filepath.Join(dir, "b.rollout"), opCreate}}
	if !ok || overflow || len(evs) != len(want) {
		t.Fatalf("1,000 writes and a rename in one round: %+v (overflow %v, ok %v), want %+v", evs, overflow, ok, want)
	}
	for i := range want {
		if evs[i] != want[i] {
			t.Fatalf("event %d: %+v, want %+v", i, evs[i], want[i])
		}
	}
	if err := os.Remove(filepath.Join(dir, "b.rollout")); err != nil {
		t.Fatal(err)
	}
	if evs, _, _ := n.wait(); len(evs) != 1 || evs[0].Op != opRemove {
		t.Fatalf("the removal: %+v", evs)
	}
}

// close ends a wait that is blocked, from another goroutine, and the
// notifier's descriptors are closed then.
func TestNotifyLinuxCloseEndsAWait(t *testing.T) {
	n, err := newPlatformNotifier([]string{t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan bool)
	go func() {
		_, _, ok := n.wait()
		done <- ok
	}()
	time.Sleep(10 * time.Millisecond) // let it block (a pace: either way it must end)
	if err := n.close(); err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-done:
		if ok {
			t.Fatal("a wait ended by close reported events")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("close did not end the wait")
	}
	ln := n.(*notifyLinux)
	if _, err := unix.FcntlInt(uintptr(ln.ifd), unix.F_GETFD, 0); err != unix.EBADF {
		t.Fatalf("the inotify descriptor is still open after close: %v", err)
	}
	if err := n.close(); err != nil {
		t.Fatalf("a second close: %v", err)
	}
}

// waitClosed closes n and lets a wait see it (which closes its descriptors).
func waitClosed(t *testing.T, n dirNotifier) {
	t.Helper()
	if err := n.close(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, _, ok := n.wait(); !ok {
			return
		}
	}
}

// The events read are parsed without trusting their lengths: an overflow,
// a watched directory gone, an event cut short and an unknown watch are
// each taken safely.
func TestNotifyLinuxParse(t *testing.T) {
	ev := func(wd int32, mask uint32, name string) []byte {
		padded := len(name)
		if padded > 0 {
			padded = (len(name) + 16) / 16 * 16
		}
		b := make([]byte, unix.SizeofInotifyEvent+padded)
		binary.NativeEndian.PutUint32(b[0:], uint32(wd))
		binary.NativeEndian.PutUint32(b[4:], mask)
		binary.NativeEndian.PutUint32(b[12:], uint32(padded))
		copy(b[unix.SizeofInotifyEvent:], name)
		return b
	}
	cat := func(bs ...[]byte) (out []byte) {
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		buf      []byte
		want     []fsEvent
		overflow bool
	}{
		{"a write and a creation", cat(ev(1, unix.IN_MODIFY, "a.rollout"), ev(1, unix.IN_MOVED_TO, "b.rollout")),
			[]fsEvent{{"/w/a.rollout", opWrite}, {"/w/b.rollout", opCreate}}, false},
		{"the queue overflowed", cat(ev(1, unix.IN_DELETE, "a.rollout"), ev(-1, unix.IN_Q_OVERFLOW, "")),
			[]fsEvent{{"/w/a.rollout", opRemove}}, true},
		{"the directory went away", cat(ev(1, unix.IN_DELETE_SELF, ""), ev(1, unix.IN_IGNORED, "")), nil, true},
		{"an unknown watch, and no name", cat(ev(7, unix.IN_MODIFY, "a.rollout"), ev(1, unix.IN_MODIFY, "")), nil, false},
		{"an event cut short", ev(1, unix.IN_MODIFY, "a.rollout")[:unix.SizeofInotifyEvent+3], nil, true},
		{"less than a header", []byte{1, 2, 3}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &notifyLinux{dirs: map[int32]string{1: "/w"}}
			overflow := n.parse(tc.buf)
			if overflow != tc.overflow || len(n.evs) != len(tc.want) {
				t.Fatalf("%+v (overflow %v), want %+v (overflow %v)", n.evs, overflow, tc.want, tc.overflow)
			}
			for i := range tc.want {
				if n.evs[i] != tc.want[i] {
					t.Fatalf("event %d: %+v, want %+v", i, n.evs[i], tc.want[i])
				}
			}
		})
	}
}
