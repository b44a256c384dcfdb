package rollout

import (
	"crypto/rand"
	"encoding/binary"
	"hash/crc32"
	"time"

	"github.com/cockroachdb/errors"
)

// The file header, 128 bytes at offset 0, little-endian:
//
//	 0       8      10      12      16          24          32   33              97        124     128
//	 +-------+------+-------+-------+-----------+-----------+----+---------------+---------+-------+
//	 | magic | ver  | hsize | flags | file id   | created   |idln| thread id     | zero    | crc   |
//	 | 8     | u16  | u16   | u32   | u64       | i64 ns    | u8 | 64, 0-padded  | 27      | u32   |
//	 +-------+------+-------+-------+-----------+-----------+----+---------------+---------+-------+
//
// crc is CRC-32C of bytes [0,124). The file id is random per file: every
// frame repeats it, so a frame copied from another rollout (or left over in
// a recycled block) is never taken for one of this file's.

// FileHeaderSize is the size of the file header; the first frame starts here.
const FileHeaderSize = 128

// FileVersion is the frame format version in the file header.
const FileVersion = 1

var fileMagic = [8]byte{0x89, 'R', 'O', 'L', 'L', 'O', 'U', 'T'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// FileHeader is the decoded file header.
type FileHeader struct {
	Version uint16
	// Flags is 0 for a rollout. A journal segment (package journal) sets
	// FileFlagJournal, so that neither is ever read as the other.
	Flags    uint32
	FileID   uint64
	Created  time.Time
	ThreadID string
}

// FileFlagJournal marks a journal segment: the same file header and frames
// as a rollout, holding other rollouts' frames (package journal).
const FileFlagJournal = 1 << 0

func NewFileHeader(threadID string, now time.Time) FileHeader {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := binary.LittleEndian.Uint64(b[:])
	if id == 0 {
		id = 1 // zero never identifies a file: zeroed frames must not match
	}
	return FileHeader{Version: FileVersion, FileID: id, Created: now.UTC(), ThreadID: threadID}
}

func (h *FileHeader) Marshal() []byte {
	b := make([]byte, FileHeaderSize)
	copy(b[0:8], fileMagic[:])
	binary.LittleEndian.PutUint16(b[8:], h.Version)
	binary.LittleEndian.PutUint16(b[10:], FileHeaderSize)
	binary.LittleEndian.PutUint32(b[12:], h.Flags)
	binary.LittleEndian.PutUint64(b[16:], h.FileID)
	binary.LittleEndian.PutUint64(b[24:], uint64(h.Created.UnixNano()))
	b[32] = byte(len(h.ThreadID))
	copy(b[33:97], h.ThreadID)
	binary.LittleEndian.PutUint32(b[124:], crc32.Checksum(b[:124], castagnoli))
	return b
}

// ParseFileHeader decodes and checks a file header. Anything that fails a
// check is a *CorruptionError with ReasonBadFileHeader.
func ParseFileHeader(b []byte) (FileHeader, error) {
	bad := func(why string, args ...any) (FileHeader, error) {
		return FileHeader{}, errors.Wrapf(&CorruptionError{Offset: 0, Length: FileHeaderSize, Reason: ReasonBadFileHeader}, why, args...)
	}
	if len(b) < FileHeaderSize {
		return bad("short file header")
	}
	if [8]byte(b[0:8]) != fileMagic {
		return bad("not a rollout file (bad magic)")
	}
	if crc32.Checksum(b[:124], castagnoli) != binary.LittleEndian.Uint32(b[124:]) {
		return bad("file header checksum mismatch")
	}
	h := FileHeader{
		Version:  binary.LittleEndian.Uint16(b[8:]),
		Flags:    binary.LittleEndian.Uint32(b[12:]),
		FileID:   binary.LittleEndian.Uint64(b[16:]),
		Created:  time.Unix(0, int64(binary.LittleEndian.Uint64(b[24:]))).UTC(),
		ThreadID: string(b[33 : 33+min(int(b[32]), MaxThreadIDLen)]),
	}
	if h.Version != FileVersion {
		return bad("unsupported format version %d", h.Version)
	}
	if binary.LittleEndian.Uint16(b[10:]) != FileHeaderSize || h.FileID == 0 {
		return bad("bad header size or file id")
	}
	if h.Flags&^FileFlagJournal != 0 {
		return bad("unknown file flags %#x", h.Flags)
	}
	if err := ValidateThreadID(h.ThreadID); err != nil {
		return bad("bad thread id in file header")
	}
	return h, nil
}
