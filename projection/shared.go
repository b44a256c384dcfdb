package projection

import (
	"strings"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// What another engine's index shares with state.db, so that both list,
// preview and search a thread the same way (the fleet's index,
// fleet/pgindex, keeps the same rows in PostgreSQL). None of it touches a
// database.

// ItemText returns what the full-text index holds of an item: its text,
// or a tool call's name and arguments (and text, if it has any).
func ItemText(it *rollout.Item) string { return ftsText(it) }

// ItemRole returns the role a thread's LastRole names for an item of
// type t: "user", "tool" or "agent".
func ItemRole(t rollout.ItemType) string { return role(t) }

// Preview returns a thread's preview made from a user message's text:
// trimmed, and cut at PreviewBytes (on a rune boundary, with "…").
func Preview(text string) string { return truncate(text, PreviewBytes) }

// EncodeCursor returns the cursor that continues a list sorted by s after
// the thread id whose sort key (UpdatedAt or CreatedAt, in unix ns) is
// key.
func EncodeCursor(s Sort, key int64, id string) string {
	return encodeCursor(s, &threadRow{ID: id, UpdatedAt: key, CreatedAt: key})
}

// DecodeCursor checks a cursor of a list sorted by s and returns its sort
// key and thread id: ErrBadCursor for one that no list sorted so handed
// out.
func DecodeCursor(c string, s Sort) (key int64, id string, err error) { return decodeCursor(c, s) }

// Words returns the words of text as the index compares them: runs of
// letters and digits, lower case, diacritics removed, in order.
func Words(text string) []string {
	toks := tokens(text)
	out := make([]string, 0, len(toks))
	for _, t := range toks {
		out = append(out, fold(text[t[0]:t[1]]))
	}
	return out
}

// LiteralWords returns what a literal (not raw) query looks for: each of
// its whitespace-separated words as its index words, all of which must
// occur, side by side and in order (a word of one index word is just
// that word). A query with no index word at all returns none.
func LiteralWords(q string) [][]string {
	var out [][]string
	for _, w := range strings.Fields(q) {
		if ws := Words(w); len(ws) > 0 {
			out = append(out, ws)
		}
	}
	return out
}

// Snippet returns about a dozen words of text around the first word that
// query (literal, or raw) looks for, the words it matches in [brackets]
// and "…" where text was left out: a search hit's Snippet.
func Snippet(text, query string, raw bool) string {
	return snippet(text, queryTerms(query, raw), snippetTokens)
}
