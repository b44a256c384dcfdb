package rollout

import (
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

func TestCheckMsgpackAcceptsWhatWeWrite(t *testing.T) {
	for k, v := range allBodies() {
		b, err := EncodeBody(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkMsgpack(b); err != nil {
			t.Errorf("%s body refused: %v", k, err)
		}
	}
	// Every msgpack type the library may write.
	b, _ := msgpack.Marshal(map[string]any{
		"f32": float32(1.5), "f64": 2.5, "u8": uint8(200), "u16": uint16(60000), "u32": uint32(1 << 30), "u64": uint64(1 << 60),
		"i8": int8(-100), "i16": int16(-30000), "i32": int32(-1 << 30), "i64": int64(-1 << 60), "nil": nil, "t": true,
		"time": time.Now(), "bin": make([]byte, 300), "str": string(make([]byte, 70000)), "arr": make([]int, 20), "map": map[string]int{"a": 1},
	})
	if err := checkMsgpack(b); err != nil {
		t.Fatalf("library output refused: %v", err)
	}
}

func TestCheckMsgpackRefusesAmplification(t *testing.T) {
	deep := make([]byte, 0, 100)
	for i := 0; i < 40; i++ {
		deep = append(deep, 0x91)
	}
	deep = append(deep, 0x01)
	for name, b := range map[string][]byte{
		"map claiming 2^32-1 entries":   {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa0, 0xa0},
		"array claiming 65535 elements": {0xdc, 0xff, 0xff, 0x01},
		"str past the end":              {0xdb, 0x00, 0x10, 0x00, 0x00, 'x'},
		"nesting 40 deep":               deep,
		"trailing bytes":                {0x01, 0x02},
		"never-used 0xc1":               {0xc1},
		"empty":                         {},
	} {
		if checkMsgpack(b) == nil {
			t.Errorf("%s: accepted", name)
		}
		r := Record{Kind: KindItemAppended, Body: b}
		if _, err := r.DecodeBody(); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// FuzzDecodeBody: any bytes as the body of every kind. No panic, and no
// allocation out of proportion to the input.
func FuzzDecodeBody(f *testing.F) {
	for _, v := range allBodies() {
		b, _ := EncodeBody(v)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, k := range Kinds {
			r := Record{Kind: k, Body: b}
			_, _ = r.DecodeBody()
		}
	})
}
