package recovery

import (
	"github.com/rolloutdb/rolloutdb/rollout"
)

// State is a resumed thread.
type State struct {
	Header rollout.ThreadOpened
	// Turns are the visible turns, in order, after rollbacks. When Resume
	// read from a checkpoint's offset (Report.FromOffset > 0) they are the
	// turns after the checkpoint's covered turn only.
	Turns []*Turn
	// ModelHistory is the model history to continue with: the checkpoint's
	// replacement history, then each later turn's contribution.
	ModelHistory [][]byte
	// Interrupted lists turns with no end record (the host decides whether
	// to close them with turn_aborted).
	Interrupted []string
	// Metadata is the thread's name, labels, flags and status.
	Metadata Metadata
	// LastSeq is the seq of the last surviving record.
	LastSeq uint64
	Report  Report

	// offsetClean says a replay from a checkpoint's frame saw the covered
	// turn end there and every other turn start there.
	offsetClean bool
	// historyFrom is the first of Turns whose history is in ModelHistory
	// (the one after the checkpoint's covered turn).
	historyFrom int
}

// History sources of a turn's model contribution.
const (
	HistoryExact   = "exact"   // the turn's exact model history records
	HistoryRebuilt = "rebuilt" // rebuilt from items: an exact-history record was rejected
	HistoryItems   = "items"   // built from items: the turn recorded no exact history
)

// Turn is one visible turn.
type Turn struct {
	ID     string
	Status string // completed, aborted, or interrupted
	// Model and Metadata are the turn's, from its turn_started.
	Model    string
	Metadata map[string]string
	Items    []rollout.Item
	Usage    rollout.Usage
	// History is the turn's model contribution and HistorySource where it
	// came from.
	History       [][]byte
	HistorySource string
	StartSeq      uint64
	EndSeq        uint64 // 0 when interrupted
	// StartOffset is the offset of the frame holding turn_started (or the
	// turn's first surviving record).
	StartOffset int64
	// ItemAt and HistoryAt are set by Options.Locate: where each of Items
	// is (its shown version's record) and where the turn's exact-history
	// records are, in order. A Locator reads them.
	ItemAt    []Loc
	HistoryAt []Loc

	itemIndex       map[string]int
	exact           [][]byte
	exactRecords    int
	historyRejected bool // a record carrying (or maybe carrying) its exact history was rejected
	startSeen       bool // its turn_started record was read
	damageTied      bool // damage of unknown kind fell inside the turn
}

// Report says what recovery found and did.
type Report struct {
	// Skipped lists every record or region not applied, in file order.
	Skipped []Skipped `json:"skipped"`
	// RebuiltTurns are the turns whose model history was rebuilt from items
	// because an exact-history record was rejected.
	RebuiltTurns []string `json:"rebuilt_turns"`
	// Checkpoint is the checkpoint restored, nil if none.
	Checkpoint *CheckpointInfo `json:"checkpoint"`
	// PassedOver are later checkpoints that could not be used, newest first.
	PassedOver []CheckpointInfo `json:"passed_over"`
	// TornTail is true when the file ended in a torn tail (an interrupted
	// write: expected after a crash, not damage).
	TornTail       bool  `json:"torn_tail"`
	TornTailOffset int64 `json:"torn_tail_offset,omitempty"`
	// TornSavedTo is the file holding a torn tail's bytes when the writer
	// cut it before the replay (a resume through rolloutdb.DB.Resume).
	TornSavedTo string `json:"torn_saved_to,omitempty"`
	// FromOffset is the frame offset replay started at (0: the whole file).
	FromOffset int64 `json:"from_offset"`
	// BytesRead is how much of the rollout was read.
	BytesRead int64 `json:"bytes_read"`
}

// Skipped reason codes beyond the rollout's damage reasons (which are used
// as they are for damaged bytes).
const (
	ReasonUnknownKind     = "unknown_kind"     // a kind from a newer version: kept on disk, skipped
	ReasonUndecodable     = "undecodable_body" // the envelope read, the body did not
	ReasonDuplicateHeader = "duplicate_header" // a second header with the same identity
	ReasonNoTurn          = "no_turn"          // a turn record without a turn id
	ReasonRecordsLost     = "records_lost"     // placeholders a repair wrote for damage
	ReasonRolledBack      = "rolled_back"      // a record of a turn already rolled back
)

// Skipped is one record or damaged region not applied.
type Skipped struct {
	Offset   int64  `json:"offset"`
	Length   int64  `json:"length"`         // bytes; 0 for one record of an intact frame
	Kind     string `json:"kind,omitempty"` // when known
	Turn     string `json:"turn,omitempty"` // when known or tied
	FirstSeq uint64 `json:"first_seq,omitempty"`
	LastSeq  uint64 `json:"last_seq,omitempty"`
	// SeqGap is the number of seqs lost (0 when the record itself was
	// read but not applied).
	SeqGap  uint64 `json:"seq_gap"`
	Reason  string `json:"reason"`
	AckLost bool   `json:"ack_lost,omitempty"`
}

// CheckpointInfo names a checkpoint record.
type CheckpointInfo struct {
	ID          string `json:"id"`
	Seq         uint64 `json:"seq"`
	Offset      int64  `json:"offset"`
	CoveredTurn string `json:"covered_turn"`
	Trigger     string `json:"trigger"`
	Why         string `json:"why,omitempty"` // for passed-over ones
}
