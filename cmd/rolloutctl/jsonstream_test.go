package main

import (
	"bytes"
	"testing"
)

// A streamed document is byte for byte what printJSON prints for the same
// fields (scripts and people see no difference), empty arrays included.
func TestJSONStreamPrintsWhatPrintJSONPrints(t *testing.T) {
	items := []any{map[string]any{"id": "a", "text": "<b>&</b>"}, []int{1, 2}, "x", nil}
	var want bytes.Buffer
	if err := printJSON(&globals{stdout: &want}, map[string]any{"a_first": 1, "b_items": items, "c_empty": []int{}, "d_last": map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	js := newJSONStream(&got)
	js.field("a_first", 1)
	js.array("b_items", len(items), func(i int) any { return items[i] })
	js.array("c_empty", 0, nil)
	js.field("d_last", map[string]string{"k": "v"})
	if err := js.close(); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Fatalf("streamed:\n%s\nprintJSON:\n%s", got.String(), want.String())
	}
}
