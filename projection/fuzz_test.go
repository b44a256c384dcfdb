package projection

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzQueryText: whatever a user types as a query, and whatever an item
// holds, turning the query into FTS5 syntax and cutting a snippet never
// panics, never splits a character, and marks only words of the text.
func FuzzQueryText(f *testing.F) {
	f.Add("nil map panic", "panic: assignment to entry in nil map", false)
	f.Add(`zebra* AND "giraffe neck" NOT okapi`, "zebras and giraffes", true)
	f.Add(`"unbalanced`, "ünïcödé wörds — and 日本語のテキスト", false)
	f.Add("", "", true)
	f.Fuzz(func(t *testing.T, query, text string, raw bool) {
		lq, phrases := literalQuery(query)
		if strings.Count(lq, `"`)%2 != 0 {
			t.Fatalf("literal query %q has unbalanced quotes", lq)
		}
		_ = hasPhrases(text, phrases)
		terms := queryTerms(query, raw)
		s := snippet(text, terms, snippetTokens)
		if utf8.ValidString(text) && !utf8.ValidString(s) {
			t.Fatalf("snippet %q of valid text is not valid UTF-8", s)
		}
		plain := strings.NewReplacer("[", "", "]", "", "…", "").Replace(s)
		for _, w := range strings.Fields(plain) {
			if !strings.Contains(text, w) && utf8.ValidString(text) && !strings.ContainsAny(text, "[]…") {
				t.Fatalf("snippet word %q is not in the text %q", w, text)
			}
		}
	})
}

// FuzzCursor: a cursor from a client is checked, never trusted: it decodes
// to an error or to a key and a valid thread id, and never panics.
func FuzzCursor(f *testing.F) {
	f.Add(encodeCursor(SortUpdated, &threadRow{ID: "t1", UpdatedAt: 42}))
	f.Add(encodeCursor(SortCreated, &threadRow{ID: "0190-abc", CreatedAt: -1}))
	f.Add("bm9wZQ")
	f.Add("")
	f.Fuzz(func(t *testing.T, c string) {
		for _, s := range []Sort{SortUpdated, SortCreated} {
			key, id, err := decodeCursor(c, s)
			if err != nil {
				continue
			}
			if again := encodeCursor(s, &threadRow{ID: id, UpdatedAt: key, CreatedAt: key}); again == "" {
				t.Fatal("empty cursor")
			}
			if id == "" || strings.ContainsAny(id, "/\\.") {
				t.Fatalf("cursor %q decoded to thread id %q", c, id)
			}
		}
	})
}
