package recovery

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// (5) One crafted frame header (valid CRC, right file id) with a forward seq
// jump: Repair materialises every missing seq as a placeholder, in memory,
// before writing. The format allows seq up to 2^62.
func TestReview_RepairHugeSeqGap(t *testing.T) {
	b, data := sixTurnFile(t)
	f := b.frames["u4/commit"]
	h := data[f.off : f.off+48]
	gap := uint64(2_000_000)
	binary.LittleEndian.PutUint64(h[28:], binary.LittleEndian.Uint64(h[28:])+gap)
	binary.LittleEndian.PutUint32(h[4:], crc32.Checksum(h[8:48], crc32.MakeTable(crc32.Castagnoli)))
	path := filepath.Join(t.TempDir(), fxThread+".rollout")
	os.WriteFile(path, data, 0o644)
	rep, err := Repair(ctx, path, fxThread, RepairOptions{})
	if err == nil {
		t.Fatalf("repair wrote %d placeholders for a forged seq jump", rep.SeqsLost)
	}
	if after, _ := os.ReadFile(path); len(after) != len(data) {
		t.Fatalf("a refused repair changed the file: %d -> %d bytes", len(data), len(after))
	}
}
