package rollout

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/klauspost/compress/zstd"
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

// DecompressRollout reverses CompressRollout, refusing more than limit
// bytes (MaxColdSize if limit <= 0).
func DecompressRollout(b []byte, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = MaxColdSize
	}
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
	var out bytes.Buffer
	n, err := io.Copy(&out, io.LimitReader(dec, limit+1))
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
func OpenCold(fsys FS, path string) (io.ReaderAt, int64, error) {
	if fsys == nil {
		fsys = OSFS
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
		return nil, 0, errors.Wrapf(err, "read %s", path)
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
func OpenRead(fsys FS, path string) (src io.ReaderAt, size int64, close func(), err error) {
	if fsys == nil {
		fsys = OSFS
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
