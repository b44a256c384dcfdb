package recovery

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// A frame written whole (its checksums hold) whose payload does not decode,
// in a rollout written without fsync (no later frame vouches for it): it is
// mid-file damage to Open, to Resume and to Repair alike, never a torn tail
// one of them cuts and another keeps. Repair rewrites the file, Resume
// afterwards sees every other record and no damage but the placeholder.
func TestRepairOfAFrameWrittenWholeThatDoesNotDecode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t1"+rollout.RolloutExt)
	w, err := rollout.Create(ctx, path, rollout.ThreadOpened{ThreadID: "t1", WorkspaceID: "ws"}, rollout.Options{Sync: rollout.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for i := range 6 {
		r, _ := rollout.NewRecord(rollout.KindItemAppended, fmt.Sprintf("turn-%d", i), rollout.Item{ID: fmt.Sprint(i), Type: rollout.ItemUserMessage, Text: "x"})
		res, err := w.Append(ctx, []rollout.Record{r}, rollout.AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, res.Offset)
	}
	w.Close()
	b, _ := os.ReadFile(path)
	off := offs[2] // seq 4
	cast := crc32.MakeTable(crc32.Castagnoli)
	n := int64(binary.LittleEndian.Uint32(b[off+12:]))
	p := b[off+rollout.FrameHeaderSize : off+rollout.FrameHeaderSize+n]
	p[0] = 0xc1 // never used in msgpack
	binary.LittleEndian.PutUint32(b[off+44:], crc32.Checksum(p, cast))
	binary.LittleEndian.PutUint32(b[off+4:], crc32.Checksum(b[off+8:off+rollout.FrameHeaderSize], cast))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := ResumeFile(ctx, nil, path, Options{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if before.Report.TornTail || before.LastSeq != 7 || len(before.Report.Skipped) != 1 {
		t.Fatalf("before repair: torn %v, last seq %d, skipped %+v", before.Report.TornTail, before.LastSeq, before.Report.Skipped)
	}
	rep, err := Repair(ctx, path, "t1", RepairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.TornTail != nil {
		t.Fatalf("repair reports a torn tail %+v", rep.TornTail)
	}
	st, err := ResumeFile(ctx, nil, path, Options{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Report.TornTail || st.LastSeq != 7 || len(st.Turns) != 5 {
		t.Fatalf("after repair (%s): torn %v, last seq %d, %d turns", rep.Action, st.Report.TornTail, st.LastSeq, len(st.Turns))
	}
	for _, s := range st.Report.Skipped {
		if s.Reason != ReasonRecordsLost {
			t.Fatalf("after repair: skipped %+v", s)
		}
	}
}
