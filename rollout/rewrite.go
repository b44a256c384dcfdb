package rollout

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// WriteFile writes a complete rollout for threadID at path (which must not
// exist), frame by frame, and syncs it. Records keep the seqs they carry,
// which must run 1, 2, 3... with no gap across the frames; each inner slice
// is one frame (so a turn commit stays one atomic unit). A new file id is
// drawn: no frame of the file it was copied from can be mistaken for one of
// this file's. It is the writing half of a repair; publishing the file
// (rename, directory sync) is the caller's.
func WriteFile(ctx context.Context, fsys vfs.FS, path, threadID string, frames [][]Record, compressAbove int) error {
	if err := ValidateThreadID(threadID); err != nil {
		return err
	}
	if fsys == nil {
		fsys = vfs.OS
	}
	hdr := NewFileHeader(threadID, time.Now())
	f, err := fsys.Create(path)
	if err != nil {
		return errors.Wrapf(err, "create %s", path)
	}
	fail := func(err error) error {
		_ = f.Close()
		_ = fsys.Remove(path)
		return err
	}
	buf := hdr.Marshal()
	off := int64(0)
	next := uint64(1)
	for _, fr := range frames {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		for i := range fr {
			if fr[i].Seq != next {
				return fail(errors.Newf("rollout: WriteFile: seq %d where %d was due", fr[i].Seq, next))
			}
			next++
		}
		// Nothing is published before the whole file is synced, so each
		// frame can vouch for everything before it: damage to the rewritten
		// file later reads as acknowledged data lost, as in the original.
		if buf, err = encodeFrame(buf, hdr.FileID, off+int64(len(buf)), fr, compressAbove); err != nil {
			return fail(err)
		}
		if len(buf) >= 1<<20 {
			if _, err := f.WriteAt(buf, off); err != nil {
				return fail(writeError(path, err))
			}
			off += int64(len(buf))
			buf = buf[:0]
		}
	}
	if _, err := f.WriteAt(buf, off); err != nil {
		return fail(writeError(path, err))
	}
	if err := f.Sync(); err != nil {
		return fail(withPath(err, "sync %s", path))
	}
	return f.Close()
}
