package recovery

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// maxRepairGap bounds the seqs a repair replaces with placeholders: a header
// that checks can claim any seq, and a forged jump must not make repair
// write gigabytes.
const maxRepairGap = 1 << 20

// RepairOptions configure Repair.
type RepairOptions struct {
	// FS is the file system. Default: vfs.OS.
	FS vfs.FS
	// DryRun reports what would be done and changes nothing.
	DryRun bool
}

// Repair actions.
const (
	ActionNone     = "none"          // the rollout is clean
	ActionTruncate = "truncate_tail" // a torn (or zero) tail is cut
	ActionRewrite  = "rewrite"       // mid-file damage: rewritten with every surviving record
)

// RepairReport says what Repair found and did (or would do).
type RepairReport struct {
	Path     string    `json:"path"`
	Action   string    `json:"action"`
	DryRun   bool      `json:"dry_run"`
	TornTail *Skipped  `json:"torn_tail,omitempty"`
	ZeroTail int64     `json:"zero_tail,omitempty"`
	Damage   []Skipped `json:"damage"`
	// RecordsKept is the number of surviving records; SeqsLost the seqs
	// replaced by records_lost placeholders.
	RecordsKept int    `json:"records_kept"`
	SeqsLost    uint64 `json:"seqs_lost"`
	// TornSavedTo holds the bytes cut from a torn tail; OriginalSavedTo the
	// original of a rewritten rollout.
	TornSavedTo     string `json:"torn_saved_to,omitempty"`
	OriginalSavedTo string `json:"original_saved_to,omitempty"`
}

func toSkipped(d *rollout.CorruptionError) Skipped {
	s := Skipped{Offset: d.Offset, Length: d.Length, FirstSeq: d.FirstSeq, LastSeq: d.LastSeq, Reason: string(d.Reason), AckLost: d.AckLost}
	if d.FirstSeq != 0 && d.LastSeq >= d.FirstSeq {
		s.SeqGap = d.LastSeq - d.FirstSeq + 1
	}
	return s
}

// Repair makes a damaged rollout whole again, holding the thread's writer
// lock throughout (a live writer makes it fail with rollout.ErrThreadLocked
// at once). A torn tail is cut, its bytes kept beside the file. Mid-file
// damage is repaired by writing a new file with every surviving record, in
// order and in its original frame, and a records_lost placeholder for each
// lost seq (so seqs stay gapless and the loss stays on record); the new file
// is read back and checked, then atomically put in place (temporary file,
// fsync, rename, directory fsync) with the original kept aside as
// <path>.orig-<unix time>. A header that cannot be read is not repaired:
// that is an identity question for a person.
func Repair(ctx context.Context, path, threadID string, opts RepairOptions) (*RepairReport, error) {
	fsys := opts.FS
	if fsys == nil {
		fsys = vfs.OS
	}
	rep := &RepairReport{Path: path, DryRun: opts.DryRun, Action: ActionNone, Damage: []Skipped{}}

	// Take the lock first: repair never works on a file being written.
	// Open also cuts a torn tail, so in a dry run read without it.
	if opts.DryRun {
		f, err := fsys.OpenRW(path)
		if err != nil {
			return nil, errors.Wrapf(err, "open %s", path)
		}
		defer f.Close()
		if err := f.Lock(); err != nil {
			return nil, err
		}
		frames, r, err := readFrames(ctx, f, path)
		if err != nil {
			return nil, err
		}
		plan(rep, frames, r)
		return rep, nil
	}
	w, orep, err := rollout.Open(ctx, path, threadID, rollout.Options{FS: fsys, Sync: rollout.SyncAlways})
	if err != nil {
		return nil, err
	}
	defer w.Close()
	if orep.TornTail != nil {
		s := toSkipped(orep.TornTail)
		rep.TornTail, rep.TornSavedTo, rep.Action = &s, orep.TornSavedTo, ActionTruncate
	}
	if orep.ZeroTail > 0 {
		rep.ZeroTail, rep.Action = orep.ZeroTail, ActionTruncate
	}
	f, err := fsys.Open(path)
	if err != nil {
		return nil, errors.Wrapf(err, "open %s", path)
	}
	defer f.Close()
	frames, r, err := readFrames(ctx, f, path)
	if err != nil {
		return nil, err
	}
	plan(rep, frames, r)
	if rep.Action != ActionRewrite {
		return rep, nil
	}
	if rep.SeqsLost > maxRepairGap {
		return nil, errors.WithHint(errors.Newf("recovery: %s: damage claims %d lost seqs; refusing to write that many placeholders", path, rep.SeqsLost),
			"a gap this large is more likely a forged or corrupt header than lost records: inspect the file with rolloutctl verify")
	}
	withGaps := fillGaps(frames, r.Damage())
	tmp := fmt.Sprintf("%s.repair-%d", path, time.Now().UnixNano())
	if err := rollout.WriteFile(ctx, fsys, tmp, r.Header().ThreadID, withGaps, 0); err != nil {
		return nil, err
	}
	if err := checkRewrite(fsys, tmp, rep.RecordsKept+int(rep.SeqsLost)); err != nil {
		_ = fsys.Remove(tmp)
		return nil, err
	}
	// The original gets its second name durably before the new file takes
	// the first: a crash at any point leaves a readable copy under a name.
	backup := fmt.Sprintf("%s.orig-%d", path, time.Now().UnixNano())
	dir := filepath.Dir(path)
	if err := fsys.Link(path, backup); err != nil {
		_ = fsys.Remove(tmp)
		return nil, errors.Wrapf(err, "keep original as %s", backup)
	}
	if err := fsys.SyncDir(dir); err != nil {
		_ = fsys.Remove(tmp)
		return nil, errors.Wrapf(err, "sync directory of %s", path)
	}
	if err := fsys.Rename(tmp, path); err != nil {
		_ = fsys.Remove(tmp)
		return nil, errors.Wrapf(err, "put %s in place", path)
	}
	rep.OriginalSavedTo = backup
	if err := fsys.SyncDir(dir); err != nil {
		return rep, errors.Wrapf(err, "sync directory of %s (the original is kept as %s)", path, backup)
	}
	return rep, nil
}

// readFrames reads every surviving record grouped by frame.
func readFrames(ctx context.Context, f vfs.File, path string) ([][]rollout.Record, *rollout.Reader, error) {
	size, err := f.Size()
	if err != nil {
		return nil, nil, err
	}
	r, err := rollout.NewReader(f, size, rollout.ReaderOptions{Path: path})
	if err != nil {
		return nil, nil, errors.WithHint(err, "the file header is damaged: repair cannot tell whose thread this is; restore it from a backup")
	}
	var frames [][]rollout.Record
	last := int64(-1)
	for i := 0; r.Next(); i++ {
		if i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
		}
		if r.FrameOffset() != last {
			frames = append(frames, nil)
			last = r.FrameOffset()
		}
		frames[len(frames)-1] = append(frames[len(frames)-1], r.Record())
	}
	if err := r.Err(); err != nil {
		return nil, nil, err
	}
	if len(frames) == 0 || frames[0][0].Seq != 1 {
		return nil, nil, errors.WithHint(errors.Wrapf(ErrNoHeader, "%s", path),
			"the thread header record is lost: repair cannot tell whose thread this is; restore it from a backup")
	}
	return frames, r, nil
}

// plan fills the report from what a read found.
func plan(rep *RepairReport, frames [][]rollout.Record, r *rollout.Reader) {
	for _, fr := range frames {
		rep.RecordsKept += len(fr)
	}
	if t := r.TornTail(); t != nil && rep.TornTail == nil {
		s := toSkipped(t)
		rep.TornTail, rep.Action = &s, ActionTruncate
	}
	if z := r.ZeroTail(); z > 0 && rep.ZeroTail == 0 {
		rep.ZeroTail, rep.Action = z, ActionTruncate
	}
	for _, d := range r.Damage() {
		s := toSkipped(d)
		rep.Damage = append(rep.Damage, s)
		rep.SeqsLost += s.SeqGap
		rep.Action = ActionRewrite
	}
}

// fillGaps returns the frames with a frame of records_lost placeholders
// wherever seqs are missing.
func fillGaps(frames [][]rollout.Record, damage []*rollout.CorruptionError) [][]rollout.Record {
	detail := func(first uint64) rollout.RecordsLost {
		for _, d := range damage {
			if d.FirstSeq <= first && first <= d.LastSeq {
				return rollout.RecordsLost{Reason: string(d.Reason), Offset: d.Offset, Length: d.Length, FirstSeq: first, LastSeq: d.LastSeq}
			}
		}
		return rollout.RecordsLost{Reason: "seq", FirstSeq: first}
	}
	var out [][]rollout.Record
	next := uint64(1)
	for _, fr := range frames {
		if first := fr[0].Seq; first > next {
			d := detail(next)
			d.LastSeq = first - 1
			out = append(out, placeholders(next, first-1, d)...)
		}
		out = append(out, fr)
		next = fr[len(fr)-1].Seq + 1
	}
	return out
}

func placeholders(first, last uint64, d rollout.RecordsLost) [][]rollout.Record {
	var out [][]rollout.Record
	body, _ := rollout.EncodeBody(d)
	now := time.Now()
	for s := first; s <= last; {
		n := min(last-s+1, rollout.MaxRecordsPerFrame)
		fr := make([]rollout.Record, n)
		for i := range fr {
			fr[i] = rollout.Record{Seq: s + uint64(i), Kind: rollout.KindRecordsLost, Time: now, Body: []byte{0xc0}}
		}
		if s == first {
			fr[0].Body = body
		}
		out = append(out, fr)
		s += n
	}
	return out
}

// checkRewrite reads a rewritten file back: clean, gapless, all there.
func checkRewrite(fsys vfs.FS, path string, want int) error {
	f, err := fsys.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return err
	}
	r, err := rollout.NewReader(f, size, rollout.ReaderOptions{Path: path})
	if err != nil {
		return err
	}
	n := 0
	for r.Next() {
		n++
		if r.Record().Seq != uint64(n) {
			return errors.Newf("repair: rewritten file has seq %d at position %d", r.Record().Seq, n)
		}
	}
	if r.Err() != nil || len(r.Damage()) > 0 || r.TornTail() != nil || n != want {
		return errors.Newf("repair: rewritten file does not read back clean (%d of %d records, %v)", n, want, r.Err())
	}
	return nil
}
