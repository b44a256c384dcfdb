package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// A pebble key is a record's place: its thread, then its seq, so that a
// thread's records are contiguous and in seq order. The NUL ends the
// thread id (which holds none), so that "thread-1" does not sort among
// "thread-10"'s records.
//
//	+--------------------+------+--------------------+
//	| thread id, n bytes | 0x00 | seq, uint64 BE (8) |
//	+--------------------+------+--------------------+
//
// The value is the record as the JSONL system writes its line: the
// envelope (seq, kind, time, turn: the SQLite row's columns) and the body
// as SQLite stores it, so that the three keep the same bytes.
const pebbleSeqLen = 1 + 8

func pebbleKey(id string, seq uint64) []byte {
	k := make([]byte, 0, len(id)+pebbleSeqLen)
	k = append(k, id...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

// pebbleThread splits a key into its thread id and seq.
func pebbleThread(key []byte) (string, uint64, error) {
	n := len(key) - pebbleSeqLen
	if n < 0 || key[n] != 0 {
		return "", 0, errors.Newf("malformed key %q", key)
	}
	return string(key[:n]), binary.BigEndian.Uint64(key[n+1:]), nil
}

// pebbleAppend is the strongest embedded peer: one pebble DB for all
// threads, each append one Batch committed with pebble.Sync (a WAL write
// and fdatasync before it returns). Concurrent appenders commit on their
// own; pebble's commit pipeline groups the WAL syncs of the commits that
// queue behind one another, as rolloutdb's journal does.
type pebbleAppend struct {
	dir  string
	opts *pebble.Options
	db   *pebble.DB
	ids  []string
	seqs []atomic.Uint64 // per thread, the last seq handed out
	note string
}

// pebbleLogger sends pebble's log to the run's logger, where its info
// lines (each WAL found on open) fall below the level and errors do not.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) { p.l.Info(fmt.Sprintf(format, args...)) }

func (p pebbleLogger) Errorf(format string, args ...any) { p.l.Error(fmt.Sprintf(format, args...)) }

// Fatalf must not return: pebble calls it where it cannot go on.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg)
	panic("pebble: " + msg)
}

// pebbleOptions are pebble's defaults (4 MiB memtable, fdatasync'd WAL),
// its log sent to the run's.
func pebbleOptions(e *env) *pebble.Options {
	l := e.logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return &pebble.Options{Logger: pebbleLogger{l}}
}

func openPebbleAppend(_ context.Context, e *env, dir string, threads int) (appendStore, error) {
	db, err := pebble.Open(dir, pebbleOptions(e))
	if err != nil {
		return nil, err
	}
	s := &pebbleAppend{dir: dir, opts: pebbleOptions(e), db: db, seqs: make([]atomic.Uint64, threads)}
	if err := s.init(threads); err != nil {
		return nil, errors.CombineErrors(err, db.Close())
	}
	return s, nil
}

// init writes each thread's header, seq 1, in one synced batch.
func (s *pebbleAppend) init(threads int) error {
	b := s.db.NewBatch()
	defer b.Close()
	now := time.Now()
	for i := range threads {
		id := threadID(i)
		s.ids = append(s.ids, id)
		hdr, err := newJSONRecord(1, rollout.KindThreadOpened, now, "", jsonHeader{ThreadID: id, Title: id, Created: now})
		if err != nil {
			return err
		}
		v, err := json.Marshal(hdr)
		if err != nil {
			return err
		}
		if err := b.Set(pebbleKey(id, 1), v, nil); err != nil {
			return err
		}
		s.seqs[i].Store(1)
	}
	return b.Commit(pebble.Sync)
}

// Append commits one record as one batch. Seqs are handed out before the
// commit, so concurrent appenders to one thread may land out of seq order;
// the keys still sort in it.
func (s *pebbleAppend) Append(_ context.Context, thread int, it rollout.Item) error {
	seq := s.seqs[thread].Add(1)
	v, err := json.Marshal(jsonItemLine{Seq: seq, Kind: rollout.KindItemAppended, Time: time.Now(), Turn: "turn-0", Body: it})
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Set(pebbleKey(s.ids[thread], seq), v, nil); err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
}

// Settle waits for the memtable flushes and compactions that the appends
// set off, so that their writes are counted in pebble's written bytes.
func (s *pebbleAppend) Settle(ctx context.Context) error {
	for {
		m := s.db.Metrics()
		if m.Flush.NumInProgress == 0 && m.Compact.NumInProgress == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// LogBytes is the whole DB: its WAL and sstables are the authoritative
// data alike.
func (s *pebbleAppend) LogBytes() int64 {
	n, _ := dirSize(s.dir)
	return n
}

func (s *pebbleAppend) Close() error {
	m := s.db.Metrics()
	s.note = fmt.Sprintf("%d memtable flushes, %d compactions over the scenario", m.Flush.Count, m.Compact.Count)
	return s.db.Close()
}

func (s *pebbleAppend) Note() string { return s.note }

// Count reopens the DB read-only and counts each thread's items.
func (s *pebbleAppend) Count(context.Context) ([]int, error) {
	opts := *s.opts
	opts.ReadOnly = true
	db, err := pebble.Open(s.dir, &opts)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	index := map[string]int{}
	for i, id := range s.ids {
		index[id] = i
	}
	iter, err := db.NewIter(nil)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(s.ids))
	for ok := iter.First(); ok; ok = iter.Next() {
		id, seq, err := pebbleThread(iter.Key())
		if err != nil {
			return nil, errors.CombineErrors(err, iter.Close())
		}
		i, known := index[id]
		if !known {
			return nil, errors.CombineErrors(errors.Newf("unexpected thread %q", id), iter.Close())
		}
		v, err := iter.ValueAndErr()
		if err != nil {
			return nil, errors.CombineErrors(err, iter.Close())
		}
		var env struct {
			Seq  uint64
			Kind rollout.Kind
		}
		if err := json.Unmarshal(v, &env); err != nil {
			return nil, errors.CombineErrors(errors.Wrapf(err, "%s seq %d", id, seq), iter.Close())
		}
		if env.Seq != seq {
			return nil, errors.CombineErrors(errors.Newf("%s: key seq %d holds record %d", id, seq, env.Seq), iter.Close())
		}
		if env.Kind == rollout.KindItemAppended {
			out[i]++
		}
	}
	return out, iter.Close()
}
