package journal

import (
	"context"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

var bg = context.Background()

func opened(id string) rollout.ThreadOpened {
	return rollout.ThreadOpened{ThreadID: id, WorkspaceID: "ws-1", Source: rollout.Source{Kind: rollout.SourceUser}}
}

// flip returns a copy of b with one bit flipped at off.
func flip(b []byte, off int64) []byte {
	c := append([]byte(nil), b...)
	c[off] ^= 0x10
	return c
}

func readFileFS(t testing.TB, fsys vfs.FS, path string) []byte {
	t.Helper()
	f, err := fsys.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, _ := f.Size()
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, fsys vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fsys.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
}
