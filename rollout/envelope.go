package rollout

import (
	"encoding/binary"
	"time"

	"github.com/cockroachdb/errors"
)

// A record's envelope on disk is a msgpack array of four elements (the seq is
// implicit: the frame's seq plus the record's index in the frame):
//
//	0x94 | kind (str) | time (int, unix nanoseconds) | turn (str) | body (bin)
//
// It is written and read by hand rather than through reflection: it is on
// the hot path of every append and every replay, and a hand decoder checks
// each length against the bytes that remain before it slices anything.

func appendEnvelope(b []byte, r *Record) []byte {
	b = append(b, 0x94)
	b = appendStr(b, string(r.Kind))
	b = append(b, 0xd3)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Time.UnixNano()))
	b = appendStr(b, r.Turn)
	return appendBin(b, r.Body)
}

// envelopeSize is an upper bound of appendEnvelope's output.
func envelopeSize(r *Record) int {
	return 1 + 5 + len(r.Kind) + 9 + 5 + len(r.Turn) + 5 + len(r.Body)
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 1<<8:
		b = append(b, 0xd9, byte(n))
	case n < 1<<16:
		b = append(b, 0xda)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0xdb)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, s...)
}

func appendBin(b, p []byte) []byte {
	n := len(p)
	switch {
	case n < 1<<8:
		b = append(b, 0xc4, byte(n))
	case n < 1<<16:
		b = append(b, 0xc5)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0xc6)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, p...)
}

var errEnvelope = errors.New("malformed record envelope")

// decodeEnvelope decodes one envelope from the front of b. Body aliases b.
func decodeEnvelope(b []byte, r *Record, prevTurn string) (rest []byte, err error) {
	if len(b) < 1 || b[0] != 0x94 {
		return nil, errEnvelope
	}
	b = b[1:]
	var kind, turn []byte
	if kind, b, err = readStrBin(b, false); err != nil {
		return nil, err
	}
	if len(kind) == 0 || len(kind) > MaxKindLen {
		return nil, errEnvelope
	}
	var ns int64
	if ns, b, err = readInt(b); err != nil {
		return nil, err
	}
	if turn, b, err = readStrBin(b, false); err != nil {
		return nil, err
	}
	if len(turn) > MaxTurnLen {
		return nil, errEnvelope
	}
	var body []byte
	if body, b, err = readStrBin(b, true); err != nil {
		return nil, err
	}
	r.Kind = internKind(kind)
	r.Time = time.Unix(0, ns).UTC()
	if string(turn) == prevTurn {
		r.Turn = prevTurn // a frame's records are mostly one turn's: one string
	} else {
		r.Turn = string(turn)
	}
	r.Body = body
	return b, nil
}

// internKind avoids an allocation per record for the known kinds.
func internKind(b []byte) Kind {
	for _, k := range Kinds {
		if string(k) == string(b) {
			return k
		}
	}
	return Kind(b)
}

// readStrBin reads a msgpack str (bin == false) or bin (bin == true).
func readStrBin(b []byte, bin bool) (v, rest []byte, err error) {
	if len(b) < 1 {
		return nil, nil, errEnvelope
	}
	c := b[0]
	var n, h int
	switch {
	case !bin && c&0xe0 == 0xa0:
		n, h = int(c&0x1f), 1
	case (!bin && c == 0xd9) || (bin && c == 0xc4):
		if len(b) < 2 {
			return nil, nil, errEnvelope
		}
		n, h = int(b[1]), 2
	case (!bin && c == 0xda) || (bin && c == 0xc5):
		if len(b) < 3 {
			return nil, nil, errEnvelope
		}
		n, h = int(binary.BigEndian.Uint16(b[1:])), 3
	case (!bin && c == 0xdb) || (bin && c == 0xc6):
		if len(b) < 5 {
			return nil, nil, errEnvelope
		}
		n, h = int(binary.BigEndian.Uint32(b[1:])), 5
	default:
		return nil, nil, errEnvelope
	}
	if n > len(b)-h {
		return nil, nil, errEnvelope
	}
	return b[h : h+n : h+n], b[h+n:], nil
}

// readInt reads any msgpack integer encoding that fits an int64.
func readInt(b []byte) (int64, []byte, error) {
	if len(b) < 1 {
		return 0, nil, errEnvelope
	}
	c := b[0]
	switch {
	case c <= 0x7f:
		return int64(c), b[1:], nil
	case c >= 0xe0:
		return int64(int8(c)), b[1:], nil
	}
	var size int
	switch c {
	case 0xcc, 0xd0:
		size = 1
	case 0xcd, 0xd1:
		size = 2
	case 0xce, 0xd2:
		size = 4
	case 0xcf, 0xd3:
		size = 8
	}
	if size == 0 || len(b) < 1+size {
		return 0, nil, errEnvelope
	}
	p := b[1 : 1+size]
	var v int64
	switch c {
	case 0xcc:
		v = int64(p[0])
	case 0xcd:
		v = int64(binary.BigEndian.Uint16(p))
	case 0xce:
		v = int64(binary.BigEndian.Uint32(p))
	case 0xcf:
		u := binary.BigEndian.Uint64(p)
		if u > 1<<63-1 {
			return 0, nil, errEnvelope
		}
		v = int64(u)
	case 0xd0:
		v = int64(int8(p[0]))
	case 0xd1:
		v = int64(int16(binary.BigEndian.Uint16(p)))
	case 0xd2:
		v = int64(int32(binary.BigEndian.Uint32(p)))
	case 0xd3:
		v = int64(binary.BigEndian.Uint64(p))
	}
	return v, b[1+size:], nil
}
