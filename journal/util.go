package journal

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/rolloutdb/rolloutdb/vfs"
)

// castagnoli is the CRC of the rollout format's frames.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var (
	withPath   = vfs.WithPath
	writeError = vfs.WriteError
)

// appendStr appends s as a msgpack string.
func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 1<<8:
		b = append(b, 0xd9, byte(n))
	case n < 1<<16:
		b = append(b, 0xda)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0xdb)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, s...)
}

func truncateForError(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
