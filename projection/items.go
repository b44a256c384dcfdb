package projection

import (
	"hash/fnv"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// An items row is integers only: the item's place (seq), its turn, a hash
// of its id, where its shown version is, and its type as a code. An item
// appended again (streamed in progress, then final) is found by its id in
// the turn's slots: a map kept in memory for the turn in progress and
// loaded from the turn's rows (one range scan) when it is not there, so
// applying a record costs the same at the turn's first item and its ten
// thousandth.

// Item type codes (items.type). 0 is a type this version does not know.
var itemTypes = []rollout.ItemType{"", rollout.ItemUserMessage, rollout.ItemAgentMessage, rollout.ItemReasoning,
	rollout.ItemToolCall, rollout.ItemToolResult, rollout.ItemFileChange, rollout.ItemTerminal, rollout.ItemError}

func typeCode(t rollout.ItemType) uint8 {
	for i, k := range itemTypes {
		if i > 0 && k == t {
			return uint8(i)
		}
	}
	return 0
}

func typeOf(code int64) rollout.ItemType {
	if code > 0 && int(code) < len(itemTypes) {
		return itemTypes[code]
	}
	return ""
}

var userCode = typeCode(rollout.ItemUserMessage)

// idHash is an item id's key within its turn (0: no id; an item without
// one is never replaced).
func idHash(id string) uint64 {
	if id == "" {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	if v := h.Sum64(); v != 0 {
		return v
	}
	return 1
}

// itemSlot is an item of a turn, as the applier tracks it.
type itemSlot struct {
	seq uint64 // its place
	typ uint8  // the shown version's type
}

// slots are a turn's items by id hash.
type slots map[uint64]*itemSlot

// turnCache is the slots of a thread's turn in progress, kept between
// write transactions. It is good while the thread's row is still at seq
// (no other writer moved it since).
type turnCache struct {
	seq      uint64
	instance uint64
	items    slots
}

// maxTurnCaches bounds the threads whose turn in progress is kept.
const maxTurnCaches = 1024

// takeTurnCache hands a thread's cached turn to the applier that will
// change it (it is published again when that transaction commits), if it
// is the turn asked for and the row has not moved since.
func (s *Store) takeTurnCache(thread string, instance, seq uint64) slots {
	// An earlier applier of this transaction staged it (the thread's
	// queued frames, then a catch-up past a gap in them): it is newer
	// than the published one, which that applier took.
	if c, ok := s.txCaches[thread]; ok {
		delete(s.txCaches, thread)
		if c.instance != instance || c.seq != seq {
			return nil
		}
		return c.items
	}
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	c, ok := s.turnCaches[thread]
	if !ok {
		return nil
	}
	delete(s.turnCaches, thread)
	if c.instance != instance || c.seq != seq {
		return nil
	}
	return c.items
}

func (s *Store) forgetTurnCache(thread string) {
	s.cacheMu.Lock()
	delete(s.turnCaches, thread)
	delete(s.rowCache, thread)
	s.cacheMu.Unlock()
}

func (s *Store) clearTurnCaches() {
	s.cacheMu.Lock()
	s.turnCaches = map[string]*turnCache{}
	s.rowCache = map[string]*threadRow{}
	s.cacheMu.Unlock()
}

// takeRow hands a thread's row, as this store last committed it, to the
// transaction that will change it (it is published again at commit).
func (s *Store) takeRow(thread string) *threadRow {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	r := s.rowCache[thread]
	delete(s.rowCache, thread)
	return r
}

// publishCaches keeps what a committed transaction's appliers staged:
// thread rows and the slots of turns in progress.
func (s *Store) publishCaches(rows map[string]*threadRow, turns map[string]*turnCache) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	for id, r := range rows {
		if _, ok := s.rowCache[id]; !ok && len(s.rowCache) >= maxTurnCaches {
			for k := range s.rowCache {
				delete(s.rowCache, k)
				break
			}
		}
		s.rowCache[id] = r
	}
	for id, c := range turns {
		if _, ok := s.turnCaches[id]; !ok && len(s.turnCaches) >= maxTurnCaches {
			for k := range s.turnCaches {
				delete(s.turnCaches, k)
				break
			}
		}
		s.turnCaches[id] = c
	}
}

// decodeItemRecord decodes an item_appended record's body.
func decodeItemRecord(rec rollout.Record) (rollout.Item, error) {
	var it rollout.Item
	err := rec.Decode(&it)
	return it, err
}
