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
