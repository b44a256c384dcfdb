package rollout

import (
	"encoding/binary"

	"github.com/cockroachdb/errors"
)

// maxBodyDepth bounds the nesting of a record body. The bodies this package
// writes nest three or four levels deep.
const maxBodyDepth = 32

var errBody = errors.New("malformed msgpack body")

// checkMsgpack walks one msgpack value without allocating and refuses what
// would let a decoder allocate out of proportion to the input or recurse
// without bound: a container claiming more elements than there are bytes
// left (every element takes at least one), nesting deeper than
// maxBodyDepth, a length past the end, or trailing bytes. The msgpack
// library preallocates up to a million elements from a claimed length, so
// a ten-byte body could otherwise cost tens of megabytes.
func checkMsgpack(b []byte) error {
	// pending[i] is the number of values still to read at depth i.
	var pending [maxBodyDepth + 1]uint64
	depth := 0
	pending[0] = 1
	for {
		for depth >= 0 && pending[depth] == 0 {
			depth--
		}
		if depth < 0 {
			break
		}
		pending[depth]--
		if len(b) == 0 {
			return errBody
		}
		c := b[0]
		b = b[1:]
		var skip, children uint64
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			children = 2 * uint64(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			children = uint64(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			skip = uint64(c & 0x1f)
		default:
			var n uint64
			var ok bool
			switch c {
			case 0xc4, 0xd9: // bin8, str8
				n, b, ok = readLen(b, 1)
				skip = n
			case 0xc5, 0xda: // bin16, str16
				n, b, ok = readLen(b, 2)
				skip = n
			case 0xc6, 0xdb: // bin32, str32
				n, b, ok = readLen(b, 4)
				skip = n
			case 0xc7: // ext8
				n, b, ok = readLen(b, 1)
				skip = n + 1
			case 0xc8: // ext16
				n, b, ok = readLen(b, 2)
				skip = n + 1
			case 0xc9: // ext32
				n, b, ok = readLen(b, 4)
				skip = n + 1
			case 0xca, 0xce, 0xd2: // float32, uint32, int32
				skip, ok = 4, true
			case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
				skip, ok = 8, true
			case 0xcc, 0xd0: // uint8, int8
				skip, ok = 1, true
			case 0xcd, 0xd1: // uint16, int16
				skip, ok = 2, true
			case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16
				skip, ok = 1+(uint64(1)<<(c-0xd4)), true
			case 0xdc: // array16
				children, b, ok = readLen(b, 2)
			case 0xdd: // array32
				children, b, ok = readLen(b, 4)
			case 0xde: // map16
				n, b, ok = readLen(b, 2)
				children = 2 * n
			case 0xdf: // map32
				n, b, ok = readLen(b, 4)
				children = 2 * n
			}
			if !ok {
				return errBody // 0xc1 (never used), or a length past the end
			}
		}
		if skip > uint64(len(b)) {
			return errBody
		}
		b = b[skip:]
		if children > 0 {
			if children > uint64(len(b)) || depth == maxBodyDepth {
				return errBody
			}
			depth++
			pending[depth] = children
		}
	}
	if len(b) != 0 {
		return errBody
	}
	return nil
}

func readLen(b []byte, size int) (uint64, []byte, bool) {
	if len(b) < size {
		return 0, nil, false
	}
	switch size {
	case 1:
		return uint64(b[0]), b[1:], true
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), b[2:], true
	default:
		return uint64(binary.BigEndian.Uint32(b)), b[4:], true
	}
}
