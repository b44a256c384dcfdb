package importer

import (
	"bytes"
	"encoding/json"
	"testing"
)

var jsonSeeds = []string{
	`{}`, `[]`, `""`, `0`, `-0.5e+10`, `true`, `false`, `null`, ` {"a" : [1, "x", {"b": null}] } `,
	`{"s":"caf\u00e9 \ud83d\ude00 \ud800 x\"y\\z\/\b\f\n\r\t"}`, "\"\xff\xfe bad utf-8\"",
	`{"a":1,}`, `[1,]`, `01`, `1.`, `1e`, `-`, `tru`, `{"a"}`, `{"a":}`, `"\x"`, `"\u12"`, "\"ctl \x01\"",
	`{"type":"user","message":{"content":[{"type":"text","text":"hi"}]}}`, `{"a":1} x`, `[[[[]]]]`,
}

func TestCheckJSONAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range jsonSeeds {
		if got, want := checkJSON([]byte(s)) == nil, json.Valid([]byte(s)); got != want {
			t.Errorf("%q: checkJSON valid %v, encoding/json %v (%v)", s, got, want, checkJSON([]byte(s)))
		}
	}
	if err := checkJSON([]byte(`{"a":`)); err == nil || err.Error() != "unexpected end of the line in a value at byte 5" {
		t.Errorf("torn line: %v", err)
	}
}

// FuzzJSONScan holds the scanner to encoding/json: the same lines are
// JSON, the same strings decode to the same text, an object's fields are
// the ones encoding/json finds.
func FuzzJSONScan(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := checkJSON(b)
		if (err == nil) != json.Valid(b) {
			t.Fatalf("%q: checkJSON %v, encoding/json valid %v", b, err, json.Valid(b))
		}
		if err != nil {
			return
		}
		v := bytes.TrimSpace(b)
		switch kind(v) {
		case '"':
			var want string
			if json.Unmarshal(v, &want) != nil {
				t.Fatal("a valid string does not decode")
			}
			if got, _ := str(v); got != want {
				t.Fatalf("%q decodes to %q, encoding/json %q", v, got, want)
			}
		case '{':
			var want map[string]json.RawMessage
			if json.Unmarshal(v, &want) != nil {
				return
			}
			got := map[string][]byte{}
			eachField(v, func(k, val []byte) {
				key, _ := str(append(append([]byte{'"'}, k...), '"'))
				got[key] = val
			})
			if len(got) != len(want) {
				t.Fatalf("%q: fields %q, encoding/json %q", v, got, want)
			}
			for k, w := range want {
				if !bytes.Equal(bytes.TrimSpace(got[k]), bytes.TrimSpace(w)) {
					t.Fatalf("%q: field %q is %q, encoding/json %q", v, k, got[k], w)
				}
			}
		case '[':
			var want []json.RawMessage
			if json.Unmarshal(v, &want) != nil {
				t.Fatal("a valid array does not decode")
			}
			n := 0
			eachElem(v, func(val []byte) {
				if n < len(want) && !bytes.Equal(val, bytes.TrimSpace(want[n])) {
					t.Fatalf("%q: element %d is %q, encoding/json %q", v, n, val, want[n])
				}
				n++
			})
			if n != len(want) {
				t.Fatalf("%q: %d elements, encoding/json %d", v, n, len(want))
			}
		}
	})
}
