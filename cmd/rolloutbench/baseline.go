package main

import (
	"encoding/json"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The baselines keep the same records as rolloutdb, as JSON: an envelope
// (seq, kind, time, turn) and a body. Bodies are the rollout package's own
// types (their JSON tags), except the model history, whose provider
// messages are kept as raw JSON rather than base64.

// jsonRecord is one record of a baseline: a JSONL line, an element of a
// rewritten session, or (envelope in columns) an SQLite row.
type jsonRecord struct {
	Seq  uint64          `json:"seq"`
	Kind rollout.Kind    `json:"kind"`
	Time time.Time       `json:"time"`
	Turn string          `json:"turn,omitempty"`
	Body json.RawMessage `json:"body"`
}

// jsonHeader is the body of a baseline's first record.
type jsonHeader struct {
	ThreadID string    `json:"thread_id"`
	Title    string    `json:"title"`
	Created  time.Time `json:"created"`
}

// jsonHistory is a turn's exact model history.
type jsonHistory struct {
	Messages []json.RawMessage `json:"messages"`
}

func newJSONRecord(seq uint64, kind rollout.Kind, at time.Time, turn string, body any) (jsonRecord, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return jsonRecord{}, errors.Wrapf(err, "marshal %s", kind)
	}
	return jsonRecord{Seq: seq, Kind: kind, Time: at, Turn: turn, Body: b}, nil
}

// threadRecords are the records of a whole thread in baseline form, seq
// 1 the header, each turn as rolloutdb writes it (turn_started, the user
// message, the items, the model history, turn_completed).
func threadRecords(id, title string, turns []turn, start time.Time) ([]jsonRecord, error) {
	var out []jsonRecord
	seq := uint64(0)
	at := start
	add := func(kind rollout.Kind, turn string, body any) error {
		seq++
		at = at.Add(time.Millisecond)
		r, err := newJSONRecord(seq, kind, at, turn, body)
		out = append(out, r)
		return err
	}
	if err := add(rollout.KindThreadOpened, "", jsonHeader{ThreadID: id, Title: title, Created: start}); err != nil {
		return nil, err
	}
	for i := range turns {
		t := &turns[i]
		if err := add(rollout.KindTurnStarted, t.id, rollout.TurnStarted{Model: t.model}); err != nil {
			return nil, err
		}
		for _, it := range append([]rollout.Item{t.user}, t.items...) {
			if err := add(rollout.KindItemAppended, t.id, it); err != nil {
				return nil, err
			}
		}
		h := jsonHistory{}
		for _, m := range t.history {
			h.Messages = append(h.Messages, m)
		}
		if err := add(rollout.KindModelHistoryAppended, t.id, h); err != nil {
			return nil, err
		}
		if err := add(rollout.KindTurnCompleted, t.id, rollout.TurnCompleted{Status: rollout.TurnStatusCompleted, Usage: t.usage}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// replayedTurn is what a baseline's replay assembles.
type replayedTurn struct {
	id      string
	items   []rollout.Item
	history []json.RawMessage
	status  string
}

// replayState assembles decoded records into turns: the least a resume
// must do. It is fed records in seq order.
type replayState struct {
	header  jsonHeader
	turns   []*replayedTurn
	byID    map[string]*replayedTurn
	history []json.RawMessage
	records int
}

func newReplayState() *replayState { return &replayState{byID: map[string]*replayedTurn{}} }

// add decodes one record's body into its typed struct and applies it.
func (s *replayState) add(kind rollout.Kind, turnID string, body []byte) error {
	s.records++
	turn := func() *replayedTurn {
		t := s.byID[turnID]
		if t == nil {
			t = &replayedTurn{id: turnID}
			s.byID[turnID] = t
			s.turns = append(s.turns, t)
		}
		return t
	}
	var err error
	switch kind {
	case rollout.KindThreadOpened:
		err = json.Unmarshal(body, &s.header)
	case rollout.KindTurnStarted:
		var v rollout.TurnStarted
		err = json.Unmarshal(body, &v)
		turn()
	case rollout.KindItemAppended:
		var v rollout.Item
		if err = json.Unmarshal(body, &v); err == nil {
			t := turn()
			t.items = append(t.items, v)
		}
	case rollout.KindModelHistoryAppended:
		var v jsonHistory
		if err = json.Unmarshal(body, &v); err == nil {
			t := turn()
			t.history = v.Messages
			s.history = append(s.history, v.Messages...)
		}
	case rollout.KindTurnCompleted:
		var v rollout.TurnCompleted
		if err = json.Unmarshal(body, &v); err == nil {
			turn().status = v.Status
		}
	default:
		return errors.Newf("unexpected record kind %q", kind)
	}
	return errors.Wrapf(err, "decode %s", kind)
}
