package main

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"
)

// rawLimits are the disk's own limits for durable 1 KiB records, measured
// in the run (no library, no encoding), so that every system's figure can
// be read against what the disk allows at that moment.
type rawLimits struct {
	// AppendSync measures one writer that writes at the end of a growing
	// file, then calls fdatasync (data, the new size, the flush).
	AppendSync float64 `json:"append_fdatasync_per_sec"`
	// OverwriteSync measures one writer that overwrites in place on space
	// zero-filled and synced beforehand (data and the flush only).
	OverwriteSync float64 `json:"overwrite_fdatasync_per_sec"`
	// Files64 measures 64 writers, a growing file each, one fdatasync per
	// record.
	Files64 float64 `json:"files64_fdatasync_per_sec"`
	// Shared64 measures 64 writers into one pre-zeroed file,
	// group-committed (one write and one fdatasync for everything pending).
	Shared64 float64 `json:"shared64_group_commit_per_sec"`
}

const rawRecord = 1024

// measureRawLimits runs each raw pattern for n records in dir.
func measureRawLimits(dir string, n int) (rawLimits, error) {
	var lim rawLimits
	var err error
	rec := make([]byte, rawRecord)
	for i := range rec {
		rec[i] = byte('a' + i%26)
	}
	if lim.AppendSync, err = rawSequential(filepath.Join(dir, "append"), n, rec, false); err != nil {
		return lim, err
	}
	if lim.OverwriteSync, err = rawSequential(filepath.Join(dir, "overwrite"), n, rec, true); err != nil {
		return lim, err
	}
	if lim.Files64, err = rawFiles(dir, 64, n, rec); err != nil {
		return lim, err
	}
	if lim.Shared64, err = rawShared(filepath.Join(dir, "shared"), 64, n, rec); err != nil {
		return lim, err
	}
	return lim, nil
}

// zeroed makes a file of size bytes of zeros, written a page at a time
// (larger writes give it large page-cache folios, and every small write
// then dirties a whole folio) and synced.
func zeroed(path string, size int64) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	page := make([]byte, 4096)
	for off := int64(0); off < size; off += int64(len(page)) {
		if _, err := f.WriteAt(page, off); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := syscall.Fdatasync(int(f.Fd())); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func rawSequential(path string, n int, rec []byte, prezero bool) (float64, error) {
	var f *os.File
	var err error
	if prezero {
		f, err = zeroed(path, int64(n+1)*int64(len(rec)))
	} else {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	}
	if err != nil {
		return 0, err
	}
	defer os.Remove(path)
	defer f.Close()
	start := time.Now()
	for i := range n {
		if _, err := f.WriteAt(rec, int64(i)*int64(len(rec))); err != nil {
			return 0, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func rawFiles(dir string, writers, n int, rec []byte) (float64, error) {
	per := max(1, n/writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range writers {
		wg.Go(func() {
			path := filepath.Join(dir, "file-"+string(rune('a'+g%26))+string(rune('a'+g/26)))
			f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				errs[g] = err
				return
			}
			defer os.Remove(path)
			defer f.Close()
			for i := range per {
				if _, err := f.WriteAt(rec, int64(i)*int64(len(rec))); err != nil {
					errs[g] = err
					return
				}
				if err := syscall.Fdatasync(int(f.Fd())); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(per*writers) / time.Since(start).Seconds(), errors.Join(errs...)
}

// rawShared is the ideal group commit: writers queue their record, the
// first to find no commit running writes everything queued and syncs it.
func rawShared(path string, writers, n int, rec []byte) (float64, error) {
	per := max(1, n/writers)
	f, err := zeroed(path, int64(per*writers+writers)*int64(len(rec)))
	if err != nil {
		return 0, err
	}
	defer os.Remove(path)
	defer f.Close()
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	var queued, written, synced int64
	syncing := false
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for range writers {
		wg.Go(func() {
			for range per {
				mu.Lock()
				queued++
				mine := queued
				for synced < mine && firstErr == nil {
					if syncing {
						cond.Wait()
						continue
					}
					syncing = true
					from, to := written, queued
					mu.Unlock()
					buf := make([]byte, (to-from)*int64(len(rec)))
					for i := int64(0); i < to-from; i++ {
						copy(buf[i*int64(len(rec)):], rec)
					}
					_, err := f.WriteAt(buf, from*int64(len(rec)))
					if err == nil {
						err = syscall.Fdatasync(int(f.Fd()))
					}
					mu.Lock()
					syncing = false
					if err != nil && firstErr == nil {
						firstErr = err
					}
					written, synced = to, to
					cond.Broadcast()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return float64(per*writers) / time.Since(start).Seconds(), firstErr
}
