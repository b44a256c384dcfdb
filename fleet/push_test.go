package fleet_test

import (
	"bytes"
	"io"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// snapshotBytes reads a fleet thread whole, as rollout bytes.
func snapshotBytes(t testing.TB, l *fleet.Log, id string) []byte {
	t.Helper()
	s, err := l.Read(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, s.Size())
	if _, err := s.ReadAt(b, 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return b
}

// A local rollout pushed into the fleet is there byte for byte; a push
// again copies nothing, a push after local appends copies only them; a
// fleet copy that went on is left alone, one that differs is refused,
// and a torn local tail is not copied.
func TestPushIdempotentAndIncremental(t *testing.T) {
	dsn := testDSN(t)
	l := openLog(t, dsn, "pusher", fleet.Options{})
	fsys := vfs.NewMemFS()
	if err := fsys.MkdirAll("/w"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("/w", "t1"+rollout.RolloutExt)
	w, err := rollout.Create(ctx, path, rollout.ThreadOpened{ThreadID: "t1"}, rollout.Options{FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := w.Append(ctx, []rollout.Record{item(t, "", string(rune('a'+i)))}, rollout.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	local := func() []byte {
		b, err := vfs.ReadFile(fsys, path, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	push := func() (fleet.PushResult, error) {
		b := local()
		return l.Push(ctx, "t1", "active", bytes.NewReader(b), int64(len(b)))
	}
	res, err := push()
	if err != nil || !res.Created || res.Frames != 21 {
		t.Fatalf("first push: %+v %v", res, err)
	}
	if got := snapshotBytes(t, l, "t1"); !bytes.Equal(got, local()) {
		t.Fatal("the fleet's thread is not the rollout byte for byte")
	}
	if res, err := push(); err != nil || res.Frames != 0 || res.Created {
		t.Fatalf("second push: %+v %v", res, err)
	}
	for range 3 {
		if _, err := w.Append(ctx, []rollout.Record{item(t, "", "more")}, rollout.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := push(); err != nil || res.Frames != 3 {
		t.Fatalf("incremental push: %+v %v", res, err)
	}
	if got := snapshotBytes(t, l, "t1"); !bytes.Equal(got, local()) {
		t.Fatal("after the incremental push the fleet's thread differs")
	}
	// A torn tail (half a frame) is not copied.
	b := local()
	torn := append(bytes.Clone(b), b[rollout.FileHeaderSize:rollout.FileHeaderSize+30]...)
	if res, err := l.Push(ctx, "t1", "active", bytes.NewReader(torn), int64(len(torn))); err != nil || res.Frames != 0 {
		t.Fatalf("push with a torn tail: %+v %v", res, err)
	}

	// The fleet goes on: a push of the older rollout is ahead, not an
	// error; a rollout that went on differently is refused.
	th, err := l.Open(ctx, "t1", "active")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := th.Append(ctx, []rollout.Record{item(t, "", "in the fleet")}, rollout.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := push(); !errors.Is(err, rollout.ErrThreadLocked) {
		t.Fatalf("push into an owned thread: %v", err)
	}
	th.Close()
	if res, err := push(); err != nil || !res.Ahead || res.Frames != 0 {
		t.Fatalf("push behind the fleet: %+v %v", res, err)
	}
	if _, err := w.Append(ctx, []rollout.Record{item(t, "", "locally, differently")}, rollout.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := push(); !errors.Is(err, fleet.ErrDiverged) {
		t.Fatalf("push of a diverged rollout: %v", err)
	}
	w.Close()
	// Damage before the end refuses the push, and leaves nothing.
	p2 := filepath.Join("/w", "t2"+rollout.RolloutExt)
	w2, err := rollout.Create(ctx, p2, rollout.ThreadOpened{ThreadID: "t2"}, rollout.Options{FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	first := w2.End()
	for range 3 {
		if _, err := w2.Append(ctx, []rollout.Record{item(t, "", "x")}, rollout.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w2.Close()
	d, err := vfs.ReadFile(fsys, p2, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	d[first+rollout.FrameHeaderSize+1] ^= 0xff // the payload of the first append's frame
	var ce *rollout.CorruptionError
	if _, err := l.Push(ctx, "t2", "active", bytes.NewReader(d), int64(len(d))); !errors.As(err, &ce) {
		t.Fatalf("push of a damaged rollout: %v", err)
	}
	if _, err := l.Locate(ctx, "t2"); !vfs.IsNotExist(err) {
		t.Fatalf("a refused push left a thread: %v", err)
	}
}
