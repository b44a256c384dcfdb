package artifacts

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/rolloutdb/rolloutdb/vfs"
)

// Options configure a Store. The zero value works.
type Options struct {
	// SpillAbove is the size in bytes above which a tool output is spilled
	// to a file. Default: 32 KiB.
	SpillAbove int
	// PreviewBytes caps the preview an item keeps of a spilled output.
	// Default: 2 KiB.
	PreviewBytes int
	// PreviewLines is how many lines the preview keeps from the head and
	// from the tail. Default: 10 each.
	PreviewLines int
	// MaxArtifact caps one tool output or attachment. Default: 1 GiB.
	MaxArtifact int64
	// TerminalLogCap caps a terminal's log; output past it is dropped and
	// the record says so. Default: 8 MiB.
	TerminalLogCap int64
	// TerminalRetention is how long completed and lost terminals are kept.
	// Running ones are never removed by it. Default: 7 days.
	TerminalRetention time.Duration
	// Now is the clock. Default: time.Now.
	Now func() time.Time
	// FS is the file system. Default: vfs.OS.
	FS vfs.FS
}

func (o Options) withDefaults() Options {
	if o.SpillAbove <= 0 {
		o.SpillAbove = 32 << 10
	}
	if o.PreviewBytes <= 0 {
		o.PreviewBytes = 2 << 10
	}
	if o.PreviewLines <= 0 {
		o.PreviewLines = 10
	}
	if o.MaxArtifact <= 0 {
		o.MaxArtifact = 1 << 30
	}
	if o.TerminalLogCap <= 0 {
		o.TerminalLogCap = 8 << 20
	}
	if o.TerminalRetention <= 0 {
		o.TerminalRetention = 7 * 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.FS == nil {
		o.FS = vfs.OS
	}
	return o
}

// Store keeps the artifacts of one workspace data directory.
type Store struct {
	root string
	fs   vfs.FS
	opts Options
	mu   sync.Mutex // orders updates of terminal records
	// durableDirs are the directories whose entries, and their parents'
	// up to root, this Store has synced (mkdirDurable).
	durableDirs sync.Map
}

// New returns the store of the data directory root.
func New(root string, opts Options) *Store {
	opts = opts.withDefaults()
	return &Store{root: root, fs: opts.FS, opts: opts}
}

// Ref references an artifact: what a record keeps (rollout.ArtifactRef has
// the same fields).
type Ref struct {
	Path   string `json:"path"` // relative to the data directory, '/'-separated
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // hex
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Read returns an artifact's bytes after checking its path stays inside
// the data directory, its size, and its digest.
func (s *Store) Read(ref Ref) ([]byte, error) {
	path, err := join(s.root, ref.Path)
	if err != nil {
		return nil, err
	}
	if ref.Size < 0 || ref.Size > s.opts.MaxArtifact {
		return nil, fmt.Errorf("%w: %s claims %d bytes", ErrTooLarge, ref.Path, ref.Size)
	}
	// At most one byte past the claimed size: a file grown (or a
	// reference lying about its size) is caught without reading it all.
	b, err := vfs.ReadFile(s.fs, path, ref.Size)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("artifacts: %w", err)
		}
		if size, serr := s.fs.Stat(path); serr == nil && size > ref.Size {
			return nil, fmt.Errorf("%w: %s (%d bytes on disk, reference says %d)", ErrDigestMismatch, ref.Path, size, ref.Size)
		}
		return nil, fmt.Errorf("artifacts: read %s: %w", ref.Path, err)
	}
	if int64(len(b)) != ref.Size || digest(b) != ref.SHA256 {
		return nil, fmt.Errorf("%w: %s (%d bytes on disk, reference says %d)", ErrDigestMismatch, ref.Path, len(b), ref.Size)
	}
	return b, nil
}

// createNew writes b durably under dir/name, or under dir/name-2, -3...
// if that name holds other bytes. If a name already holds exactly b (a
// retried write), that file is the answer. It never overwrites.
func (s *Store) createNew(dir, name, ext string, b []byte) (string, error) {
	if err := s.mkdirDurable(dir); err != nil {
		return "", err
	}
	sum := digest(b)
	tmp, err := vfs.WriteTemp(s.fs, dir, b)
	if err != nil {
		return "", fmt.Errorf("artifacts: write %s: %w", dir, err)
	}
	defer s.fs.Remove(tmp)
	for n := 1; n < 1000; n++ {
		final := name + ext
		if n > 1 {
			final = name + "-" + strconv.Itoa(n) + ext
		}
		path := filepath.Join(dir, final)
		err := s.fs.Link(tmp, path)
		if err == nil {
			return path, s.syncDir(dir)
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("artifacts: %w", err)
		}
		if old, err := vfs.ReadFile(s.fs, path, int64(len(b))); err == nil && digest(old) == sum {
			// The same bytes: a retry. The call that linked it may have
			// failed at the directory sync, so it is synced again.
			return path, s.syncDir(dir)
		}
	}
	return "", fmt.Errorf("artifacts: %s: too many versions of %s", dir, name)
}

// mkdirDurable makes dir and its missing parents, and makes each one's
// entry durable up to root, once per Store. Syncing only the parents of
// what this call made is not enough: a directory made by an earlier call
// whose sync failed, or by a process that was killed, exists and may
// still not survive a power cut, and every artifact in it with it.
func (s *Store) mkdirDurable(dir string) error {
	dir = filepath.Clean(dir)
	if _, ok := s.durableDirs.Load(dir); ok {
		return nil
	}
	if err := s.fs.MkdirAll(dir); err != nil {
		return fmt.Errorf("artifacts: %w", err)
	}
	root := filepath.Clean(s.root)
	for d := dir; d != root && d != filepath.Dir(d); d = filepath.Dir(d) {
		if err := s.syncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	s.durableDirs.Store(dir, struct{}{})
	return nil
}

func (s *Store) syncDir(dir string) error {
	if err := s.fs.SyncDir(dir); err != nil {
		return fmt.Errorf("artifacts: sync %s: %w", dir, err)
	}
	return nil
}

func (s *Store) rel(path string) string {
	r, _ := filepath.Rel(s.root, path)
	return filepath.ToSlash(r)
}
