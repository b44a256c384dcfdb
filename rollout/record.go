package rollout

import (
	"time"

	"github.com/cockroachdb/errors"
	"github.com/vmihailenco/msgpack/v5"
)

// Kind names a record's type. Kinds are strings on disk so that a kind
// written by a newer version survives an older reader untouched.
type Kind string

// The kinds this version writes and understands.
const (
	KindThreadOpened         Kind = "thread_opened"          // header, always seq 1
	KindTurnStarted          Kind = "turn_started"           // a turn begins
	KindItemAppended         Kind = "item_appended"          // one client-visible item
	KindTurnCompleted        Kind = "turn_completed"         // a turn ends, with status and usage
	KindTurnAborted          Kind = "turn_aborted"           // a turn ends without completing
	KindModelHistoryAppended Kind = "model_history_appended" // the exact provider messages of a turn
	KindCheckpoint           Kind = "checkpoint"             // compaction: replacement history through a turn
	KindThreadRolledBack     Kind = "thread_rolled_back"     // drop the last N turns
	KindMetadataUpdated      Kind = "metadata_updated"       // name, labels, flags, status
	KindArchived             Kind = "archived"               // appended before the file moves to archived/
	KindRestored             Kind = "restored"               // appended after the file moves back
	KindRecordsLost          Kind = "records_lost"           // written by repair in place of records lost to damage
)

// Kinds lists every kind this version knows, in a stable order.
var Kinds = []Kind{
	KindThreadOpened, KindTurnStarted, KindItemAppended, KindTurnCompleted,
	KindTurnAborted, KindModelHistoryAppended, KindCheckpoint,
	KindThreadRolledBack, KindMetadataUpdated, KindArchived, KindRestored,
	KindRecordsLost,
}

// Known reports whether this version understands the kind. Readers keep and
// yield unknown kinds; replay skips them with a diagnostic.
func (k Kind) Known() bool {
	switch k {
	case KindThreadOpened, KindTurnStarted, KindItemAppended, KindTurnCompleted,
		KindTurnAborted, KindModelHistoryAppended, KindCheckpoint,
		KindThreadRolledBack, KindMetadataUpdated, KindArchived, KindRestored,
		KindRecordsLost:
		return true
	}
	return false
}

// Bounds on envelope fields, checked by the writer and the decoder.
const (
	MaxKindLen = 64
	MaxTurnLen = 128
)

// Record is one entry of a rollout: the envelope and a msgpack body. Seq is
// assigned by the writer (callers leave it zero) and is implicit on disk: the
// records of a frame are numbered from the frame's seq. Body is the raw
// msgpack; Decode or DecodeBody turns it into a typed value.
type Record struct {
	Seq  uint64
	Kind Kind
	Time time.Time // stored with nanosecond precision, read back in UTC
	Turn string    // turn id, empty for records outside a turn
	Body []byte
}

// NewRecord builds a record of a kind with a body encoded as msgpack. Time is
// left zero: the writer stamps it at append.
func NewRecord(kind Kind, turn string, body any) (Record, error) {
	b, err := EncodeBody(body)
	if err != nil {
		return Record{}, errors.Wrapf(err, "encode %s body", kind)
	}
	return Record{Kind: kind, Turn: turn, Body: b}, nil
}

// EncodeBody encodes a record body as msgpack. Items are encoded by hand
// (fastencode.go), everything else through the msgpack library.
func EncodeBody(v any) ([]byte, error) {
	switch b := v.(type) {
	case Item:
		return appendItem(make([]byte, 0, itemSize(&b)), &b), nil
	case *Item:
		if b != nil {
			return appendItem(make([]byte, 0, itemSize(b)), b), nil
		}
	}
	return msgpack.Marshal(v)
}

// Decode decodes the record's body into v.
func (r *Record) Decode(v any) error {
	// The hand decoders bound what they read themselves, and take only
	// well-formed bodies; anything else is checked before the library
	// sees it.
	if decodeFast(r.Body, v) {
		return nil
	}
	if err := checkMsgpack(r.Body); err != nil {
		return errors.Wrapf(err, "decode %s body of seq %d", r.Kind, r.Seq)
	}
	if err := msgpack.Unmarshal(r.Body, v); err != nil {
		return errors.Wrapf(err, "decode %s body of seq %d", r.Kind, r.Seq)
	}
	return nil
}

// DecodeItem decodes an item_appended body, as Decode into a new Item
// would, without allocating the Item (replay decodes one per item).
func (r *Record) DecodeItem() (Item, error) {
	var it Item
	if decodeItemFast(r.Body, &it) {
		return it, nil
	}
	if err := checkMsgpack(r.Body); err != nil {
		return Item{}, errors.Wrapf(err, "decode %s body of seq %d", r.Kind, r.Seq)
	}
	p := new(Item) // the library's way; it escapes
	if err := msgpack.Unmarshal(r.Body, p); err != nil {
		return Item{}, errors.Wrapf(err, "decode %s body of seq %d", r.Kind, r.Seq)
	}
	return *p, nil
}

// DecodeBody decodes the body into the typed value of its kind (for example
// *TurnCompleted). An unknown kind is ErrUnknownKind: keep the record, skip
// it.
func (r *Record) DecodeBody() (any, error) {
	v := newBody(r.Kind)
	if v == nil {
		return nil, errors.Wrapf(ErrUnknownKind, "%q at seq %d", truncateForError(string(r.Kind)), r.Seq)
	}
	if err := r.Decode(v); err != nil {
		return nil, err
	}
	return v, nil
}

// newBody returns a new value of the kind's body type, nil for a kind
// this version does not know. A switch, not a map: it runs for every
// record replayed.
func newBody(k Kind) any {
	switch k {
	case KindThreadOpened:
		return new(ThreadOpened)
	case KindTurnStarted:
		return new(TurnStarted)
	case KindItemAppended:
		return new(Item)
	case KindTurnCompleted:
		return new(TurnCompleted)
	case KindTurnAborted:
		return new(TurnAborted)
	case KindModelHistoryAppended:
		return new(ModelHistory)
	case KindCheckpoint:
		return new(Checkpoint)
	case KindThreadRolledBack:
		return new(ThreadRolledBack)
	case KindMetadataUpdated:
		return new(MetadataUpdated)
	case KindArchived, KindRestored:
		return new(Lifecycle)
	case KindRecordsLost:
		return new(RecordsLost)
	}
	return nil
}
