package artifacts

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"time"

	"github.com/rolloutdb/rolloutdb/vfs"
)

// Terminal statuses.
const (
	TerminalRunning   = "running"
	TerminalCompleted = "completed"
	TerminalLost      = "lost" // still running when its host went away
)

// Terminal is a background terminal's record (terminals/<thread>/<id>.json).
type Terminal struct {
	ID        string     `json:"id"`
	Thread    string     `json:"thread"`
	Command   string     `json:"command"`
	Status    string     `json:"status"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	ExitCode  *int       `json:"exit_code,omitempty"`
	// Log is the terminal's output, capped at Options.TerminalLogCap
	// (its size and digest are recorded when the terminal ends);
	// Truncated says output was dropped past the cap.
	Log       Ref  `json:"log"`
	Truncated bool `json:"truncated,omitempty"`
}

func (s *Store) terminalPaths(thread, id string) (rec, log string, err error) {
	if err := checkName("thread", thread); err != nil {
		return "", "", err
	}
	if err := checkName("terminal", id); err != nil {
		return "", "", err
	}
	dir := filepath.Join(s.root, TerminalsDir, thread)
	return filepath.Join(dir, id+".json"), filepath.Join(dir, id+".log"), nil
}

// StartTerminal records a new running terminal with an empty log.
func (s *Store) StartTerminal(thread, id, command string) (Terminal, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	recPath, logPath, err := s.terminalPaths(thread, id)
	if err != nil {
		return Terminal{}, err
	}
	if err := s.mkdirDurable(filepath.Dir(recPath)); err != nil {
		return Terminal{}, err
	}
	f, err := s.fs.Create(logPath)
	if err != nil {
		return Terminal{}, fmt.Errorf("artifacts: terminal %s/%s: %w", thread, id, err)
	}
	f.Close()
	t := Terminal{ID: id, Thread: thread, Command: command, Status: TerminalRunning, StartedAt: s.opts.Now().UTC(),
		Log: Ref{Path: s.rel(logPath), SHA256: digest(nil)}}
	return t, s.saveTerminal(recPath, t)
}

// AppendLog adds output to a running terminal's log, up to the cap. It
// returns how many bytes were kept.
func (s *Store) AppendLog(thread, id string, b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	recPath, logPath, err := s.terminalPaths(thread, id)
	if err != nil {
		return 0, err
	}
	t, err := s.loadTerminal(recPath)
	if err != nil {
		return 0, err
	}
	if t.Status != TerminalRunning {
		return 0, fmt.Errorf("artifacts: terminal %s/%s is %s", thread, id, t.Status)
	}
	// The log's size is the file's: the record is rewritten only when
	// the terminal ends or its output starts being dropped.
	f, err := s.fs.OpenRW(logPath)
	if err != nil {
		return 0, fmt.Errorf("artifacts: %w", err)
	}
	size, err := f.Size()
	if err != nil {
		_ = f.Close()
		return 0, fmt.Errorf("artifacts: %w", err)
	}
	keep := min(int64(len(b)), s.opts.TerminalLogCap-size)
	if keep > 0 {
		_, err = f.WriteAt(b[:keep], size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, fmt.Errorf("artifacts: terminal log %s/%s: %w", thread, id, err)
		}
	} else {
		_ = f.Close()
		keep = 0
	}
	if keep < int64(len(b)) && !t.Truncated {
		t.Truncated = true
		if err := s.saveTerminal(recPath, t); err != nil {
			return int(keep), err
		}
	}
	return int(keep), nil
}

// EndTerminal records a terminal's exit; its log is synced and its digest
// recorded.
func (s *Store) EndTerminal(thread, id string, exitCode int) (Terminal, error) {
	return s.endTerminal(thread, id, TerminalCompleted, &exitCode)
}

func (s *Store) endTerminal(thread, id, status string, exitCode *int) (Terminal, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	recPath, logPath, err := s.terminalPaths(thread, id)
	if err != nil {
		return Terminal{}, err
	}
	t, err := s.loadTerminal(recPath)
	if err != nil {
		return Terminal{}, err
	}
	// The record names the log's size and digest: the log is synced
	// first, or a power cut could leave it shorter than the record says.
	if f, err := s.fs.OpenRW(logPath); err == nil {
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return Terminal{}, fmt.Errorf("artifacts: sync terminal log %s/%s: %w", thread, id, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Terminal{}, fmt.Errorf("artifacts: %w", err)
	}
	log, err := vfs.ReadFile(s.fs, logPath, s.opts.MaxArtifact) // a log written under a larger cap ends too
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Terminal{}, fmt.Errorf("artifacts: %w", err)
	}
	now := s.opts.Now().UTC()
	t.Status, t.EndedAt, t.ExitCode = status, &now, exitCode
	t.Log.Size, t.Log.SHA256 = int64(len(log)), digest(log)
	return t, s.saveTerminal(recPath, t)
}

// MarkLost marks every terminal still recorded as running as lost: at
// open, no terminal of an earlier host can still be running for it.
// live, if not nil, names threads a host elsewhere holds now (another
// process with the workspace open): their terminals may well be running
// and are left alone.
func (s *Store) MarkLost(live func(thread string) bool) ([]Terminal, error) {
	all, err := s.Terminals("")
	if err != nil {
		return nil, err
	}
	var lost []Terminal
	for _, t := range all {
		if t.Status != TerminalRunning || (live != nil && live(t.Thread)) {
			continue
		}
		t, err := s.endTerminal(t.Thread, t.ID, TerminalLost, nil)
		if err != nil {
			return lost, err
		}
		lost = append(lost, t)
	}
	return lost, nil
}

// Terminals lists the terminals of a thread ("" for all threads), by start.
func (s *Store) Terminals(thread string) ([]Terminal, error) {
	dir := filepath.Join(s.root, TerminalsDir)
	if thread != "" {
		if err := checkName("thread", thread); err != nil {
			return nil, err
		}
		dir = filepath.Join(dir, thread)
	}
	var paths []string
	err := vfs.Walk(s.fs, dir, func(p string, _ vfs.Info) error {
		// Records only: terminals/<thread>/<id>.json.
		if filepath.Ext(p) == ".json" && filepath.Dir(filepath.Dir(p)) == filepath.Join(s.root, TerminalsDir) {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("artifacts: %w", err)
	}
	var out []Terminal
	for _, p := range paths {
		t, err := s.loadTerminal(p)
		if err != nil {
			// A record that is not where it says it is (or does not
			// parse) is not ours to sweep or mark: left alone.
			continue
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StartedAt.Before(out[j].StartedAt) })
	return out, nil
}

// SweepTerminals removes completed and lost terminals that ended more than
// the retention period ago (records and logs). Running ones stay, however
// old. It returns the removed terminals.
func (s *Store) SweepTerminals() ([]Terminal, error) {
	all, err := s.Terminals("")
	if err != nil {
		return nil, err
	}
	cutoff := s.opts.Now().Add(-s.opts.TerminalRetention)
	var removed []Terminal
	for _, t := range all {
		if t.Status == TerminalRunning || t.EndedAt == nil || t.EndedAt.After(cutoff) {
			continue
		}
		recPath, logPath, err := s.terminalPaths(t.Thread, t.ID)
		if err != nil {
			return removed, err
		}
		// The log first: a record without its log is still listed and
		// swept next time; a log without a record would be an orphan.
		for _, p := range []string{logPath, recPath} {
			if err := s.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return removed, fmt.Errorf("artifacts: %w", err)
			}
		}
		removed = append(removed, t)
	}
	return removed, nil
}

// maxTerminalRecord bounds a terminal record read back (its command
// included).
const maxTerminalRecord = 1 << 20

func (s *Store) loadTerminal(path string) (Terminal, error) {
	b, err := vfs.ReadFile(s.fs, path, maxTerminalRecord)
	if err != nil {
		return Terminal{}, fmt.Errorf("artifacts: %w", err)
	}
	var t Terminal
	if err := json.Unmarshal(b, &t); err != nil {
		return Terminal{}, fmt.Errorf("artifacts: terminal record %s: %w", path, err)
	}
	if filepath.Base(path) != t.ID+".json" || filepath.Base(filepath.Dir(path)) != t.Thread ||
		checkName("thread", t.Thread) != nil || checkName("terminal", t.ID) != nil {
		return Terminal{}, fmt.Errorf("artifacts: terminal record %s names terminal %q of thread %q", path, t.ID, t.Thread)
	}
	return t, nil
}

// saveTerminal replaces a terminal record atomically (temp, sync, rename,
// directory sync).
func (s *Store) saveTerminal(path string, t Terminal) error {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	if err := vfs.WriteFileAtomic(s.fs, path, b); err != nil {
		return fmt.Errorf("artifacts: save terminal: %w", err)
	}
	return nil
}
