package rollout

import (
	"encoding/binary"
	"slices"
)

// Item bodies, one per streamed item on every append, are encoded by hand
// here: msgpack's reflection costs a quarter of Turn.Add's CPU with 64
// appenders. The bytes are the library's own for the same Item (a map of
// the fields that are not empty, in the struct's order; strings as str;
// the artifact's size as int64), except that data's keys are sorted where
// the library writes them in map order. FuzzItemEncoder holds the hand
// encoder to that, and to decoding back to the same Item.

// appendItem appends it, encoded as msgpack.
func appendItem(b []byte, it *Item) []byte {
	strs := [...]struct {
		key, val string
	}{{"status", it.Status}, {"text", it.Text}, {"call_id", it.CallID}, {"name", it.Name}, {"arguments", it.Arguments}}
	n := 2
	for _, f := range strs {
		if f.val != "" {
			n++
		}
	}
	if it.Ref != nil {
		n++
	}
	if len(it.Data) > 0 {
		n++
	}
	b = append(b, 0x80|byte(n)) // fixmap: at most 9 fields
	b = appendStr(appendStr(b, "id"), it.ID)
	b = appendStr(appendStr(b, "type"), string(it.Type))
	for _, f := range strs {
		if f.val != "" {
			b = appendStr(appendStr(b, f.key), f.val)
		}
	}
	if r := it.Ref; r != nil {
		b = append(appendStr(b, "ref"), 0x83)
		b = appendStr(appendStr(b, "path"), r.Path)
		b = append(appendStr(b, "size"), 0xd3)
		b = binary.BigEndian.AppendUint64(b, uint64(r.Size))
		b = appendStr(appendStr(b, "sha256"), r.SHA256)
	}
	if len(it.Data) > 0 {
		b = appendMapLen(appendStr(b, "data"), len(it.Data))
		keys := make([]string, 0, len(it.Data))
		for k := range it.Data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = appendStr(appendStr(b, k), it.Data[k])
		}
	}
	return b
}

// itemSize is an upper bound of appendItem's output.
func itemSize(it *Item) int {
	n := 1 + 8 + len(it.ID) + 10 + len(it.Type) + 12 + len(it.Status) + 10 + len(it.Text) +
		13 + len(it.CallID) + 10 + len(it.Name) + 15 + len(it.Arguments)
	if r := it.Ref; r != nil {
		n += 5 + 10 + len(r.Path) + 14 + 12 + len(r.SHA256)
	}
	if len(it.Data) > 0 {
		n += 10
		for k, v := range it.Data {
			n += 10 + len(k) + len(v)
		}
	}
	return n
}

func appendMapLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n < 1<<16:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
	}
}
