package artifacts

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/rolloutdb/rolloutdb/vfs"
)

// GCOptions say what is alive. GC removes nothing it is not sure of.
type GCOptions struct {
	// Referenced holds every artifact path (Ref.Path) a surviving record
	// references, rolled back or not.
	Referenced map[string]bool
	// Threads holds every thread that exists (active or archived).
	Threads map[string]bool
	// Grace keeps files younger than this whatever else holds: a tool
	// output is spilled before the record that references it is appended.
	// Default: 1 hour.
	Grace time.Duration
	// DryRun reports what would be removed and removes nothing.
	DryRun bool
}

// GCReport is what GC removed and what it kept, with why.
type GCReport struct {
	Removed []Entry `json:"removed"`
	Kept    []Entry `json:"kept"`
}

// Entry is one file GC looked at.
type Entry struct {
	Path string `json:"path"` // relative to the data directory
	Size int64  `json:"size"`
	Why  string `json:"why"`
}

// Why codes of GC.
const (
	WhyUnreferenced = "unreferenced"   // removed: no surviving record references it
	WhyThreadGone   = "thread_gone"    // removed: its thread no longer exists
	WhyTempLeft     = "temp_left"      // removed: a temporary file a crash left
	WhyReferenced   = "referenced"     // kept
	WhyYoung        = "within_grace"   // kept: too new to judge
	WhyTerminal     = "terminal_alive" // kept: its thread exists (retention sweeps terminals)
)

// GC removes tool results and attachments no surviving record references,
// everything under a thread directory whose thread is gone, and temporary
// files left by crashes, and reports what it removed and kept.
func (s *Store) GC(o GCOptions) (GCReport, error) {
	if o.Grace <= 0 {
		o.Grace = time.Hour
	}
	young := s.opts.Now().Add(-o.Grace)
	var rep GCReport
	var errs []error
	for _, top := range []string{ToolResultsDir, AttachmentsDir, TerminalsDir} {
		base := filepath.Join(s.root, top)
		err := vfs.Walk(s.fs, base, func(path string, info vfs.Info) error {
			rel := s.rel(path)
			e := Entry{Path: rel, Size: info.Size}
			thread := ""
			if top != AttachmentsDir {
				thread, _, _ = strings.Cut(strings.TrimPrefix(rel, top+"/"), "/")
			}
			switch {
			case strings.HasPrefix(filepath.Base(path), vfs.TempPrefix) && info.ModTime.Before(young):
				e.Why = WhyTempLeft
			case o.Referenced[rel]:
				e.Why = WhyReferenced
			case info.ModTime.After(young):
				e.Why = WhyYoung
			case thread != "" && !o.Threads[thread]:
				e.Why = WhyThreadGone
			case top == TerminalsDir:
				e.Why = WhyTerminal
			default:
				e.Why = WhyUnreferenced
			}
			switch e.Why {
			case WhyReferenced, WhyYoung, WhyTerminal:
				rep.Kept = append(rep.Kept, e)
				return nil
			}
			if !o.DryRun {
				if err := s.fs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, fmt.Errorf("artifacts: remove %s: %w", rel, err))
					e.Why = "remove failed: " + err.Error()
					rep.Kept = append(rep.Kept, e)
					return nil
				}
			}
			rep.Removed = append(rep.Removed, e)
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("artifacts: walk %s: %w", top, err))
		}
	}
	sort.Slice(rep.Removed, func(i, j int) bool { return rep.Removed[i].Path < rep.Removed[j].Path })
	sort.Slice(rep.Kept, func(i, j int) bool { return rep.Kept[i].Path < rep.Kept[j].Path })
	return rep, errors.Join(errs...)
}
