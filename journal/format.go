package journal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The workspace journal's files, under the data directory:
//
//	journal/recovery.lock          held while a process replays dead journals
//	journal/<jid>.lock             held (flock) by the journal's process for its lifetime
//	journal/<jid>.<n>.seg          segment n = 1, 2, 3... (8 digits)
//	journal/<jid>.<n>.seg.tmp      a segment being zero-filled
//
// A segment is a file in the rollout format (header.go, frame.go): the
// 128-byte file header, with FileFlagJournal set, a file id drawn anew each
// time the file is (re)used, and "<jid>-<n>" where a rollout has its thread
// id; then frames. Each journal frame is one group commit: its records are
// journal entries, one per rollout frame made durable by it:
//
//	envelope: kind "frame", time, turn = the rollout's thread id, body (bin):
//
//	 0             8        16       24
//	 +-------------+--------+--------+-------------------------------------+
//	 | rollout     | offset | prev   | the rollout frame: header and       |
//	 | file id u64 | u64    | u64    | payload, byte for byte as written   |
//	 +-------------+--------+--------+-------------------------------------+
//
// offset is where the frame is in its rollout; prev is the offset of the
// frame before it there (the one it follows: replay writes a frame only
// after checking its predecessor is intact, so it never leaves a hole).
// The frame carries its own two CRCs; the journal frame's CRCs cover the
// entry as a whole. A segment that is recycled keeps its old bytes past the
// frames written since: they carry the file id of the segment's earlier
// life, so the reader takes them for a torn tail, never for entries.

const (
	// Dir is the journal's directory under the data directory.
	Dir = "journal"

	journalEntryKind = rollout.Kind("frame")
	journalLockExt   = ".lock"
	journalSegExt    = ".seg"
	journalTmpExt    = ".tmp"
	recoveryLockName = "recovery.lock"
	entryFixed       = 24 // file id, offset, prev
)

// journalEntry is one decoded journal entry.
type journalEntry struct {
	Thread        string
	FileID        uint64
	Offset, Prev  int64
	Frame         []byte // the rollout frame (aliases the segment's payload)
	Header        rollout.FrameHeader
	Seq, FirstSeq uint64 // journal frame seq; the rollout frame's first record seq
}

// entryEnvelopeSize is the size of an entry's envelope for a rollout frame
// of n bytes and a thread id of the given length (appendEntry writes
// exactly this many bytes).
func entryEnvelopeSize(thread string, n int) int {
	return 1 + (1 + len(journalEntryKind)) + 9 + strSize(len(thread)) + binSize(entryFixed+n) + entryFixed + n
}

func strSize(n int) int {
	switch {
	case n < 32:
		return 1 + n
	case n < 1<<8:
		return 2 + n
	case n < 1<<16:
		return 3 + n
	}
	return 5 + n
}

func binSize(n int) int {
	switch {
	case n < 1<<8:
		return 2
	case n < 1<<16:
		return 3
	}
	return 5
}

// appendEntry appends a journal entry's envelope to b.
func appendEntry(b []byte, nowNS int64, thread string, fileID uint64, off, prev int64, frame []byte) []byte {
	b = append(b, 0x94)
	b = appendStr(b, string(journalEntryKind))
	b = append(b, 0xd3)
	b = binary.BigEndian.AppendUint64(b, uint64(nowNS))
	b = appendStr(b, thread)
	n := entryFixed + len(frame)
	switch {
	case n < 1<<8:
		b = append(b, 0xc4, byte(n))
	case n < 1<<16:
		b = append(b, 0xc5)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0xc6)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	b = binary.LittleEndian.AppendUint64(b, fileID)
	b = binary.LittleEndian.AppendUint64(b, uint64(off))
	b = binary.LittleEndian.AppendUint64(b, uint64(prev))
	return append(b, frame...)
}

// decodeJournalEntry checks and decodes a journal record. Everything is
// checked before it is trusted: the thread id, the rollout frame's header
// and its payload CRC, and that the body is exactly that frame.
func decodeJournalEntry(rec rollout.Record) (journalEntry, error) {
	var e journalEntry
	if rec.Kind != journalEntryKind {
		return e, errors.Newf("journal record of kind %q", truncateForError(string(rec.Kind)))
	}
	if err := rollout.ValidateThreadID(rec.Turn); err != nil {
		return e, err
	}
	b := rec.Body
	if len(b) < entryFixed+rollout.FrameHeaderSize {
		return e, errors.Newf("journal entry of %d bytes", len(b))
	}
	e.Thread = rec.Turn
	e.FileID = binary.LittleEndian.Uint64(b[0:])
	off, prev := binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])
	if off > 1<<62 || prev > 1<<62 || prev < rollout.FileHeaderSize || prev >= off || e.FileID == 0 {
		return e, errors.Newf("journal entry offsets %d after %d", off, prev)
	}
	e.Offset, e.Prev = int64(off), int64(prev)
	e.Frame = b[entryFixed:]
	h, reason := rollout.ParseFrameHeader(e.Frame)
	if reason != "" {
		return e, errors.Newf("journal entry: rollout frame header: %s", reason)
	}
	if h.FileID != e.FileID || len(e.Frame) != rollout.FrameHeaderSize+h.Length {
		return e, errors.New("journal entry: frame does not match its entry")
	}
	if crc32.Checksum(e.Frame[rollout.FrameHeaderSize:], castagnoli) != h.DataCRC {
		return e, errors.New("journal entry: frame payload checksum mismatch")
	}
	e.Header, e.Seq, e.FirstSeq = h, rec.Seq, h.Seq
	return e, nil
}

// segmentName is segment n of journal jid; segmentStem is what its file
// header holds in place of a thread id.
func segmentName(jid string, n uint64) string {
	return fmt.Sprintf("%s.%08d%s", jid, n, journalSegExt)
}

func segmentStem(jid string, n uint64) string { return fmt.Sprintf("%s-%08d", jid, n) }

// parseJournalName splits a file name of the journal directory: the
// journal id, the segment number (0 for the lock file) and the kind.
func parseJournalName(name string) (jid string, n uint64, kind string, ok bool) {
	switch {
	case strings.HasSuffix(name, journalLockExt):
		jid = strings.TrimSuffix(name, journalLockExt)
		return jid, 0, journalLockExt, rollout.ValidateThreadID(jid) == nil
	case strings.HasSuffix(name, journalSegExt+journalTmpExt):
		kind, name = journalTmpExt, strings.TrimSuffix(name, journalSegExt+journalTmpExt)
	case strings.HasSuffix(name, journalSegExt):
		kind, name = journalSegExt, strings.TrimSuffix(name, journalSegExt)
	default:
		return "", 0, "", false
	}
	jid, num, found := strings.Cut(name, ".")
	if !found || rollout.ValidateThreadID(jid) != nil || len(num) != 8 {
		return "", 0, "", false
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n == 0 {
		return "", 0, "", false
	}
	return jid, n, kind, true
}

func journalPath(root string, name string) string { return filepath.Join(root, Dir, name) }
