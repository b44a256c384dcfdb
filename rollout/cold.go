package rollout

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/klauspost/compress/zstd"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// Cold compression of archived rollouts: threads/archived/<id>.rollout.zst
// is the whole rollout file compressed with zstd (one stream, its content
// size in the header). It is read whole into memory (archived threads are
// read rarely), within a limit, so a decompression bomb is refused rather
// than expanded.

// ColdExt is appended to an archived rollout's name once it is compressed.
const ColdExt = ".zst"

// MaxColdSize bounds the decompressed size of a compressed rollout.
const MaxColdSize = 2 << 30

// ColdPath is the compressed rollout of an archived thread under root.
func ColdPath(root, threadID string) (string, error) {
	if err := ValidateThreadID(threadID); err != nil {
		return "", err
	}
	return filepath.Join(root, ArchivedDir, threadID+RolloutExt+ColdExt), nil
}

// CompressRollout compresses a rollout file's bytes for cold storage.
func CompressRollout(b []byte) ([]byte, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer enc.Close()
	return enc.EncodeAll(b, make([]byte, 0, len(b)/4)), nil
}

// MaxColdRatio bounds how many times its size a compressed rollout may
// expand to (beyond a first MiB). A rollout's frames carry seqs, times,
// ids and checksums that zstd cannot fold away; real ones compress tens of
// times at most. A bomb (a small file of zeros claiming gigabytes) is
// refused after decoding that much, not the whole claim.
const MaxColdRatio = 1000

// DecompressRollout reverses CompressRollout, refusing more than limit
// bytes (MaxColdSize if limit <= 0), more than MaxColdRatio times the
// compressed size, and content that does not start as a rollout does.
func DecompressRollout(b []byte, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = MaxColdSize
	}
	limit = min(limit, max(1<<20, MaxColdRatio*int64(len(b))))
	var h zstd.Header
	if err := h.Decode(b); err != nil {
		return nil, &CorruptionError{Reason: ReasonBadFileHeader, Length: int64(len(b))}
	}
	if !h.HasFCS || h.FrameContentSize > uint64(limit) {
		return nil, errors.Wrapf(ErrTooLarge, "compressed rollout claims %d bytes (limit %d)", h.FrameContentSize, limit)
	}
	// Streamed into a buffer that grows with what actually decodes: a
	// small file claiming a large size costs nothing until it delivers.
	dec, err := zstd.NewReader(bytes.NewReader(b), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(limit)))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	// The file header first: what is not a rollout is refused before it
	// is expanded.
	var out bytes.Buffer
	head, err := io.CopyN(&out, dec, FileHeaderSize)
	switch {
	case err != nil && !errors.Is(err, io.EOF):
		return nil, &CorruptionError{Reason: ReasonDecode, Length: int64(len(b))}
	case err != nil || [8]byte(out.Bytes()[0:8]) != fileMagic: // too short, or not a rollout
		return nil, &CorruptionError{Reason: ReasonBadFileHeader, Length: int64(len(b))}
	}
	n, err := io.Copy(&out, io.LimitReader(dec, limit+1-head))
	n += head
	switch {
	case n > limit:
		return nil, errors.Wrapf(ErrTooLarge, "compressed rollout expands past %d bytes", limit)
	case err != nil:
		return nil, &CorruptionError{Reason: ReasonDecode, Length: int64(len(b))}
	case uint64(n) != h.FrameContentSize:
		return nil, &CorruptionError{Reason: ReasonTruncated, Length: int64(len(b))}
	}
	return out.Bytes(), nil
}

// OpenCold reads and decompresses a compressed rollout: the reader and
// size to hand to NewReader.
func OpenCold(fsys vfs.FS, path string) (io.ReaderAt, int64, error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	f, err := fsys.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, 0, err
	}
	if size > MaxColdSize {
		return nil, 0, errors.Wrapf(ErrTooLarge, "%s: %d bytes", path, size)
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, withPath(err, "read %s", path)
	}
	raw, err := DecompressRollout(b, 0)
	if err != nil {
		var ce *CorruptionError
		if errors.As(err, &ce) {
			ce.Path = path
		}
		return nil, 0, err
	}
	return bytes.NewReader(raw), int64(len(raw)), nil
}

// OpenRead opens a rollout for reading, plain or compressed (by its name:
// ColdExt). close releases it; a compressed one is read whole into memory.
func OpenRead(fsys vfs.FS, path string) (src io.ReaderAt, size int64, close func(), err error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	if strings.HasSuffix(path, ColdExt) {
		src, size, err := OpenCold(fsys, path)
		return src, size, func() {}, err
	}
	f, err := fsys.Open(path)
	if err != nil {
		return nil, 0, nil, err
	}
	size, err = f.Size()
	if err != nil {
		f.Close()
		return nil, 0, nil, err
	}
	return f, size, func() { f.Close() }, nil
}
