package projection

import (
	"fmt"
	"testing"
)

// What another engine's index shares is what state.db itself uses: the
// literal query's words are literalQuery's (its phrases the words of
// several index words), and a cursor made from a key and an id is the
// one List hands out.
func TestSharedHelpersAgreeWithTheStore(t *testing.T) {
	for _, q := range []string{"go-test Zébra", `zebras" OR "giraffes`, "nil_map  x", "!!", ""} {
		words := LiteralWords(q)
		_, phrases := literalQuery(q)
		var multi [][]string
		for _, w := range words {
			if len(w) > 1 {
				multi = append(multi, w)
			}
		}
		if fmt.Sprint(multi) != fmt.Sprint(phrases) {
			t.Errorf("%q: LiteralWords %v, literalQuery's phrases %v", q, words, phrases)
		}
	}
	if got := fmt.Sprint(LiteralWords("go-test Zébra")); got != "[[go test] [zebra]]" {
		t.Errorf("LiteralWords: %s", got)
	}
	c := EncodeCursor(SortCreated, 42, "t1")
	if c != encodeCursor(SortCreated, &threadRow{ID: "t1", CreatedAt: 42}) {
		t.Errorf("EncodeCursor %q is not List's", c)
	}
	if key, id, err := DecodeCursor(c, SortCreated); err != nil || key != 42 || id != "t1" {
		t.Errorf("DecodeCursor: %d %q %v", key, id, err)
	}
}
