package rollout

import (
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func itemSamples() []Item {
	return []Item{
		{},
		{ID: "i1", Type: ItemUserMessage, Text: "hello"},
		{ID: "i2", Type: ItemToolCall, Status: ItemInProgress, CallID: "c1", Name: "grep", Arguments: `{"q":"x"}`},
		{ID: "i3", Type: ItemToolResult, CallID: "c1", Text: strings.Repeat("long output ", 3000),
			Ref: &ArtifactRef{Path: "tool-results/t/abc", Size: 1 << 40, SHA256: "ab12"}, Data: map[string]string{"exit": "0", "": ""}},
		{ID: "i4", Type: ItemAgentMessage, Data: map[string]string{}},
		{ID: strings.Repeat("x", 300), Type: ItemError, Ref: &ArtifactRef{Size: -5}},
	}
}

// libraryItem decodes as the msgpack library does (no fast path).
func libraryItem(b []byte) (Item, error) {
	var it Item
	err := msgpack.Unmarshal(b, &it)
	return it, err
}

// Every item the encoder writes decodes by hand, to what the library
// decodes it to.
func TestItemDecoderAgreesWithTheLibrary(t *testing.T) {
	for i, want := range itemSamples() {
		b, err := EncodeBody(want)
		if err != nil {
			t.Fatal(err)
		}
		var got Item
		if !decodeItemFast(b, &got) {
			t.Fatalf("sample %d: the hand decoder gave up on the encoder's own output", i)
		}
		lib, err := libraryItem(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, lib) {
			t.Fatalf("sample %d: hand %+v, library %+v", i, got, lib)
		}
		rec := Record{Kind: KindItemAppended, Body: b}
		var viaDecode Item
		if err := rec.Decode(&viaDecode); err != nil || !reflect.DeepEqual(viaDecode, lib) {
			t.Fatalf("sample %d: Record.Decode %+v %v", i, viaDecode, err)
		}
	}
	// Shapes it leaves to the library: an unknown field, a string as bin.
	for _, v := range []any{
		map[string]any{"id": "x", "future_field": []int{1, 2}},
		map[string]any{"id": []byte("as bin")},
	} {
		b, _ := msgpack.Marshal(v)
		var it Item
		if decodeItemFast(b, &it) {
			t.Fatalf("%v: taken by hand", v)
		}
		rec := Record{Kind: KindItemAppended, Body: b}
		var got Item
		lib, lerr := libraryItem(b)
		if err := rec.Decode(&got); (err == nil) != (lerr == nil) || !reflect.DeepEqual(got, lib) {
			t.Fatalf("%v: Record.Decode %+v %v, library %+v %v", v, got, err, lib, lerr)
		}
	}
}

// hotBodies are fresh values of the kinds decodeFast takes.
func hotBodies() []func() any {
	return []func() any{
		func() any { return new(Item) },
		func() any { return new(TurnStarted) },
		func() any { return new(TurnCompleted) },
		func() any { return new(ModelHistory) },
	}
}

func hotSamples() []any {
	var out []any
	for _, it := range itemSamples() {
		out = append(out, it)
	}
	return append(out,
		TurnStarted{}, TurnStarted{Model: "m1", Metadata: map[string]string{"k": "v"}},
		TurnCompleted{Status: TurnStatusCompleted, Usage: Usage{InputTokens: 10, CachedInputTokens: 1 << 33, OutputTokens: 5, ReasoningTokens: 2, TotalTokens: -1}},
		TurnCompleted{},
		ModelHistory{}, ModelHistory{Messages: [][]byte{[]byte(`{"role":"user"}`), {}, nil, make([]byte, 70000)}})
}

// Every hot body the encoder writes decodes by hand, to what the library
// decodes it to.
func TestHotBodiesDecodeAsTheLibraryDoes(t *testing.T) {
	for i, v := range hotSamples() {
		b, err := EncodeBody(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, mk := range hotBodies() {
			got, lib := mk(), mk()
			if reflect.TypeOf(got).Elem() != reflect.TypeOf(v) {
				continue
			}
			if !decodeFast(b, got) {
				t.Fatalf("sample %d (%T): the hand decoder gave up on the encoder's own output", i, v)
			}
			if err := msgpack.Unmarshal(b, lib); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, lib) {
				t.Fatalf("sample %d: hand %+v, library %+v", i, got, lib)
			}
		}
	}
}

// FuzzItemDecoder: whatever the hand decoders accept, the library decodes
// to the same value; they never panic.
func FuzzItemDecoder(f *testing.F) {
	for _, v := range hotSamples() {
		b, _ := EncodeBody(v)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if checkMsgpack(b) != nil {
			return // Record.Decode refuses it before either decoder
		}
		for _, mk := range hotBodies() {
			got, lib := mk(), mk()
			if !decodeFast(b, got) {
				continue
			}
			if err := msgpack.Unmarshal(b, lib); err != nil {
				t.Fatalf("hand decoder took %x as %T, the library refuses it: %v", b, got, err)
			}
			if !reflect.DeepEqual(got, lib) {
				t.Fatalf("%x: hand %+v, library %+v", b, got, lib)
			}
		}
	})
}

// encodeCompare checks the hand encoder against the library on it: the
// same bytes (where data's order cannot differ), the same Item decoded
// back by the library and by hand, and itemSize an upper bound.
func encodeCompare(t *testing.T, it Item) {
	t.Helper()
	got, err := EncodeBody(it)
	if err != nil {
		t.Fatal(err)
	}
	if n := itemSize(&it); len(got) > n {
		t.Fatalf("%+v: %d bytes encoded, itemSize said at most %d", it, len(got), n)
	}
	if p, err := EncodeBody(&it); err != nil || string(p) != string(got) {
		t.Fatalf("%+v: *Item encodes otherwise than Item: %x, %v", it, p, err)
	}
	lib, err := msgpack.Marshal(it)
	if err != nil {
		t.Fatal(err)
	}
	if len(it.Data) <= 1 && string(got) != string(lib) {
		t.Fatalf("%+v:\nhand    %x\nlibrary %x", it, got, lib)
	}
	want := it
	if len(want.Data) == 0 {
		want.Data = nil // empty: omitted, as the library does
	}
	back, err := libraryItem(got)
	if err != nil || !reflect.DeepEqual(back, want) {
		t.Fatalf("%+v: the library decodes the hand encoding to %+v, %v", want, back, err)
	}
	var hand Item
	if !decodeItemFast(got, &hand) || !reflect.DeepEqual(hand, want) {
		t.Fatalf("%+v: the hand decoder reads %+v", want, hand)
	}
}

// Items are encoded by hand, as the library would encode them.
func TestItemEncoderWritesWhatTheLibraryWrites(t *testing.T) {
	long := strings.Repeat("y", 70000)
	more := itemSamples()
	more = append(more,
		Item{ID: "d", Type: ItemTerminal, Data: map[string]string{"b": "2", "a": "1", "c": long}},
		Item{Text: strings.Repeat("z", 31), Name: strings.Repeat("z", 32), Arguments: strings.Repeat("z", 255), CallID: strings.Repeat("z", 256)},
		Item{ID: "big", Text: strings.Repeat("w", 1<<16), Ref: &ArtifactRef{Path: long, Size: 1<<63 - 1, SHA256: strings.Repeat("f", 64)}},
	)
	data := map[string]string{}
	for i := range 20 {
		data[strings.Repeat("k", i)] = "v"
	}
	more = append(more, Item{ID: "many", Data: data})
	for _, it := range more {
		encodeCompare(t, it)
	}
}

// FuzzItemEncoder: any item encodes by hand as the library encodes it, and
// decodes back to itself.
func FuzzItemEncoder(f *testing.F) {
	for _, it := range itemSamples() {
		k, v := "", ""
		for k, v = range it.Data {
			break
		}
		var ref string
		var size int64
		if it.Ref != nil {
			ref, size = it.Ref.Path, it.Ref.Size
		}
		f.Add(it.ID, string(it.Type), it.Status, it.Text, it.CallID, it.Name, it.Arguments, ref, size, k, v, it.Ref != nil, len(it.Data))
	}
	f.Fuzz(func(t *testing.T, id, typ, status, text, callID, name, args, ref string, size int64, k, v string, hasRef bool, data int) {
		it := Item{ID: id, Type: ItemType(typ), Status: status, Text: text, CallID: callID, Name: name, Arguments: args}
		if hasRef {
			it.Ref = &ArtifactRef{Path: ref, Size: size, SHA256: k}
		}
		if data > 0 {
			it.Data = map[string]string{}
			for i := range min(data, 20) {
				it.Data[k+strings.Repeat("+", i)] = v
			}
		}
		encodeCompare(t, it)
	})
}
