package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/klauspost/compress/zstd"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// jsonItemLine is an appended item as a JSONL line (the body typed, so it
// is marshalled once).
type jsonItemLine struct {
	Seq  uint64       `json:"seq"`
	Kind rollout.Kind `json:"kind"`
	Time time.Time    `json:"time"`
	Turn string       `json:"turn"`
	Body rollout.Item `json:"body"`
}

// jsonlFile is what most agent tools do: append a line, fsync, per record.
type jsonlFile struct {
	mu   sync.Mutex
	f    *os.File
	path string
	seq  uint64
}

func (j *jsonlFile) append(it rollout.Item) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.seq++
	b, err := json.Marshal(jsonItemLine{Seq: j.seq, Kind: rollout.KindItemAppended, Time: time.Now(), Turn: "turn-0", Body: it})
	if err != nil {
		return err
	}
	if _, err := j.f.Write(append(b, '\n')); err != nil {
		return err
	}
	return j.f.Sync()
}

type jsonlAppend struct{ files []*jsonlFile }

func openJSONLAppend(_ context.Context, _ *env, dir string, threads int) (appendStore, error) {
	s := &jsonlAppend{}
	for i := range threads {
		id := threadID(i)
		path := filepath.Join(dir, id+".jsonl")
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, errors.CombineErrors(err, s.Close())
		}
		j := &jsonlFile{f: f, path: path, seq: 1}
		s.files = append(s.files, j)
		hdr, err := newJSONRecord(1, rollout.KindThreadOpened, time.Now(), "", jsonHeader{ThreadID: id, Title: id, Created: time.Now()})
		if err != nil {
			return nil, errors.CombineErrors(err, s.Close())
		}
		line, err := json.Marshal(hdr)
		if err == nil {
			_, err = f.Write(append(line, '\n'))
		}
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			return nil, errors.CombineErrors(err, s.Close())
		}
	}
	return s, syncDir(dir)
}

func (s *jsonlAppend) Append(_ context.Context, thread int, it rollout.Item) error {
	return s.files[thread].append(it)
}

func (s *jsonlAppend) Settle(context.Context) error { return nil }

func (s *jsonlAppend) LogBytes() int64 {
	var n int64
	for _, j := range s.files {
		n += fileSize(j.path)
	}
	return n
}

func (s *jsonlAppend) Close() error {
	var err error
	for _, j := range s.files {
		err = errors.CombineErrors(err, j.f.Close())
	}
	return err
}

func (s *jsonlAppend) Count(context.Context) ([]int, error) {
	out := make([]int, len(s.files))
	for i, j := range s.files {
		f, err := os.Open(j.path)
		if err != nil {
			return nil, err
		}
		sc := newLineScanner(f)
		for sc.Scan() {
			var env struct{ Kind rollout.Kind }
			if err := json.Unmarshal(sc.Bytes(), &env); err != nil {
				_ = f.Close()
				return nil, errors.Wrapf(err, "%s", j.path)
			}
			if env.Kind == rollout.KindItemAppended {
				out[i]++
			}
		}
		err = errors.CombineErrors(sc.Err(), f.Close())
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func newLineScanner(f *os.File) *bufio.Scanner {
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	return sc
}

// writeJSONL writes records as JSON lines, unsynced (a fixture).
func writeJSONL(path string, recs []jsonRecord) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// fileReplay is the big thread in one file (JSONL or a JSON array).
type fileReplay struct {
	path, id string
	decode   func(ctx context.Context, path string) (*replayState, error)
}

func openJSONLReplay(_ context.Context, _ *env, dir string, bt *bigThread) (replayStore, error) {
	recs, err := threadRecords(bt.id, bt.title, bt.turns, fixtureTime)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, bt.id+".jsonl")
	return &fileReplay{path: path, id: bt.id, decode: replayJSONL}, writeJSONL(path, recs)
}

// replayJSONL reads every line and unmarshals it into typed structs.
func replayJSONL(_ context.Context, path string) (*replayState, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st := newReplayState()
	sc := newLineScanner(f)
	for sc.Scan() {
		var r jsonRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, errors.Wrapf(err, "%s", path)
		}
		if err := st.add(r.Kind, r.Turn, r.Body); err != nil {
			return nil, err
		}
	}
	return st, sc.Err()
}

func (s *fileReplay) Replay(ctx context.Context) (int, error) {
	st, err := s.decode(ctx, s.path)
	if err != nil {
		return 0, err
	}
	if st.header.ThreadID != s.id {
		return 0, errors.Newf("%s: header names %q", s.path, st.header.ThreadID)
	}
	return len(st.turns), nil
}

func (s *fileReplay) Size() (int64, int64) {
	n := fileSize(s.path)
	return n, n
}

// Archive is what people do with an old session file: compress it (zstd,
// default level), sync the copy, remove the original.
func (s *fileReplay) Archive(context.Context) (int64, int64, string, error) {
	b, err := os.ReadFile(s.path)
	if err != nil {
		return 0, 0, "", err
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return 0, 0, "", err
	}
	out := enc.EncodeAll(b, nil)
	if err := enc.Close(); err != nil {
		return 0, 0, "", err
	}
	zpath := s.path + ".zst"
	f, err := os.OpenFile(zpath, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, 0, "", err
	}
	_, err = f.Write(out)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.CombineErrors(err, f.Close()); err != nil {
		return 0, 0, "", err
	}
	if err := os.Remove(s.path); err != nil {
		return 0, 0, "", err
	}
	if err := syncDir(filepath.Dir(s.path)); err != nil {
		return 0, 0, "", err
	}
	n := fileSize(zpath)
	return n, n, "zstd default level (klauspost/compress)", nil
}

func (s *fileReplay) Close() error { return nil }

// fileList is a directory of session files listed the way tools without an
// index do: the head of every file for its title, a stat for its
// modification time, sort, cut a page.
type fileList struct {
	dir  string
	head func(f *os.File) (jsonHeader, error)
}

func openJSONLList(_ context.Context, _ *env, dir string, lt *listThreads) (listStore, error) {
	return writeFileList(dir, lt, ".jsonl", writeJSONL, jsonlHead)
}

// writeFileList writes the list fixture as one file a thread (ext, write)
// with its update time as the file's, and lists it by reading heads.
func writeFileList(dir string, lt *listThreads, ext string, write func(string, []jsonRecord) error, head func(*os.File) (jsonHeader, error)) (listStore, error) {
	for i := range lt.n {
		t := lt.turn(i)
		recs, err := threadRecords(lt.id(i), lt.title(i), []turn{*t}, lt.created(i))
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, lt.id(i)+ext)
		if err := write(path, recs); err != nil {
			return nil, err
		}
		if err := os.Chtimes(path, lt.updated(i), lt.updated(i)); err != nil {
			return nil, err
		}
	}
	return &fileList{dir: dir, head: head}, nil
}

// jsonlHead reads the first line: the thread's header.
func jsonlHead(f *os.File) (jsonHeader, error) {
	line, err := bufio.NewReaderSize(f, 4096).ReadBytes('\n')
	if err != nil {
		return jsonHeader{}, err
	}
	var r jsonRecord
	var h jsonHeader
	if err := json.Unmarshal(line, &r); err != nil {
		return h, err
	}
	return h, json.Unmarshal(r.Body, &h)
}

type listed struct {
	id, title string
	updated   time.Time
}

func (s *fileList) List(context.Context) ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	all := make([]listed, 0, len(ents))
	for _, e := range ents {
		f, err := os.Open(filepath.Join(s.dir, e.Name()))
		if err != nil {
			return nil, err
		}
		h, err := s.head(f)
		var fi os.FileInfo
		if err == nil {
			fi, err = f.Stat()
		}
		_ = f.Close()
		if err != nil {
			return nil, errors.Wrapf(err, "%s", e.Name())
		}
		all = append(all, listed{id: h.ThreadID, title: h.Title, updated: fi.ModTime()})
	}
	slices.SortFunc(all, func(a, b listed) int {
		if c := b.updated.Compare(a.updated); c != 0 {
			return c
		}
		return strings.Compare(b.id, a.id)
	})
	ids := make([]string, 0, 50)
	for _, l := range all[:min(50, len(all))] {
		ids = append(ids, l.id)
	}
	return ids, nil
}

func (s *fileList) Close() error { return nil }
