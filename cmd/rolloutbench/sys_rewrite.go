package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// session is a thread saved whole at every change: the session as a JSON
// array, written to a temporary file, synced, renamed over the old one, and
// the directory synced. Each element is kept marshalled, so a save costs
// the bytes and the I/O, not re-encoding the history (kinder to it than
// json.Marshal of the whole session, which is what such tools do).
type session struct {
	mu    sync.Mutex
	path  string
	dir   *os.File
	elems [][]byte
	buf   []byte
}

func (s *session) save() error {
	s.buf = append(s.buf[:0], '[')
	for i, e := range s.elems {
		if i > 0 {
			s.buf = append(s.buf, ',')
		}
		s.buf = append(s.buf, e...)
	}
	s.buf = append(s.buf, ']')
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(s.buf)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.CombineErrors(err, f.Close()); err != nil {
		return err
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return err
	}
	return s.dir.Sync()
}

func (s *session) append(it rollout.Item) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := json.Marshal(jsonItemLine{Seq: uint64(len(s.elems)) + 1, Kind: rollout.KindItemAppended, Time: time.Now(), Turn: "turn-0", Body: it})
	if err != nil {
		return err
	}
	s.elems = append(s.elems, b)
	if err := s.save(); err != nil {
		s.elems = s.elems[:len(s.elems)-1] // not acknowledged
		return err
	}
	return nil
}

type rewriteAppend struct {
	dir      *os.File
	sessions []*session
}

func openRewriteAppend(_ context.Context, _ *env, dir string, threads int) (appendStore, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	s := &rewriteAppend{dir: d}
	for i := range threads {
		id := threadID(i)
		hdr, err := newJSONRecord(1, rollout.KindThreadOpened, time.Now(), "", jsonHeader{ThreadID: id, Title: id, Created: time.Now()})
		if err != nil {
			return nil, errors.CombineErrors(err, s.Close())
		}
		b, err := json.Marshal(hdr)
		if err != nil {
			return nil, errors.CombineErrors(err, s.Close())
		}
		ss := &session{path: filepath.Join(dir, id+".json"), dir: d, elems: [][]byte{b}}
		if err := ss.save(); err != nil {
			return nil, errors.CombineErrors(err, s.Close())
		}
		s.sessions = append(s.sessions, ss)
	}
	return s, nil
}

func (s *rewriteAppend) Append(_ context.Context, thread int, it rollout.Item) error {
	return s.sessions[thread].append(it)
}

func (s *rewriteAppend) Settle(context.Context) error { return nil }

func (s *rewriteAppend) LogBytes() int64 {
	var n int64
	for _, ss := range s.sessions {
		n += fileSize(ss.path)
	}
	return n
}

func (s *rewriteAppend) Close() error { return s.dir.Close() }

func (s *rewriteAppend) Count(context.Context) ([]int, error) {
	out := make([]int, len(s.sessions))
	for i, ss := range s.sessions {
		b, err := os.ReadFile(ss.path)
		if err != nil {
			return nil, err
		}
		var recs []struct{ Kind rollout.Kind }
		if err := json.Unmarshal(b, &recs); err != nil {
			return nil, errors.Wrapf(err, "%s", ss.path)
		}
		for _, r := range recs {
			if r.Kind == rollout.KindItemAppended {
				out[i]++
			}
		}
	}
	return out, nil
}

// writeJSONArray writes records as one JSON array, unsynced (a fixture).
func writeJSONArray(path string, recs []jsonRecord) error {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, r := range recs {
		if i > 0 {
			b.WriteByte(',')
		}
		line, err := json.Marshal(r)
		if err != nil {
			return err
		}
		b.Write(line)
	}
	b.WriteByte(']')
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func openRewriteReplay(_ context.Context, _ *env, dir string, bt *bigThread) (replayStore, error) {
	recs, err := threadRecords(bt.id, bt.title, bt.turns, fixtureTime)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, bt.id+".json")
	return &fileReplay{path: path, id: bt.id, decode: replayJSONArray}, writeJSONArray(path, recs)
}

// replayJSONArray reads the session and unmarshals the array, each body
// into its typed struct.
func replayJSONArray(_ context.Context, path string) (*replayState, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var recs []jsonRecord
	if err := json.Unmarshal(b, &recs); err != nil {
		return nil, errors.Wrapf(err, "%s", path)
	}
	st := newReplayState()
	for _, r := range recs {
		if err := st.add(r.Kind, r.Turn, r.Body); err != nil {
			return nil, err
		}
	}
	return st, nil
}

func openRewriteList(_ context.Context, _ *env, dir string, lt *listThreads) (listStore, error) {
	return writeFileList(dir, lt, ".json", writeJSONArray, jsonArrayHead)
}

// jsonArrayHead decodes only the first element of the session: its header.
func jsonArrayHead(f *os.File) (jsonHeader, error) {
	dec := json.NewDecoder(bufio.NewReaderSize(f, 4096))
	var h jsonHeader
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return h, errors.Newf("not a JSON array (%v)", err)
	}
	var r jsonRecord
	if err := dec.Decode(&r); err != nil {
		return h, err
	}
	return h, json.Unmarshal(r.Body, &h)
}
