package pgindex

import (
	"strconv"
	"strings"

	"github.com/rolloutdb/rolloutdb/projection"
)

// Full text. An item's words are the tsvector of its items row, made
// here rather than by a text search configuration: the words are
// projection.Words of projection.ItemText (the tokens, case and
// diacritics search.db compares), each with its positions, and a query is
// a tsquery made of the same words. So no configuration stems, drops stop
// words or splits a token otherwise than state.db's index does: the two
// engines find the same items. Positions make a literal word of several
// tokens ("go-test") a phrase of adjacent tokens (<->), which search.db,
// keeping none, checks in the text instead.

// PostgreSQL's bounds on a tsvector: a lexeme's bytes, a position (later
// ones count as the last), positions kept per lexeme, and the lexemes'
// bytes in all.
const (
	maxLexeme     = 2046
	maxPosition   = 16383
	maxPositions  = 255
	maxVectorText = 512 << 10
)

// tsvector returns the text of text's tsvector (nil: no words).
func tsvector(text string) *string {
	words := projection.Words(text)
	if len(words) == 0 {
		return nil
	}
	pos := map[string][]int{}
	var order []string
	size := 0
	for i, w := range words {
		if len(w) > maxLexeme {
			continue
		}
		p, seen := pos[w]
		if !seen {
			if size+len(w) > maxVectorText {
				continue
			}
			size += len(w)
			order = append(order, w)
		}
		if len(p) < maxPositions {
			pos[w] = append(p, min(i+1, maxPosition))
		}
	}
	if len(order) == 0 {
		return nil
	}
	var b strings.Builder
	for i, w := range order {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(quoteLexeme(w))
		b.WriteByte(':')
		for j, p := range pos[w] {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(p))
		}
	}
	v := b.String()
	return &v
}

// quoteLexeme quotes a word for a tsvector or a tsquery.
func quoteLexeme(w string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(w) + "'"
}

// noMatch is a tsquery lexeme that no tsvector made here holds (words
// are letters and digits): an empty phrase, which matches nothing.
const noMatch = "'-'"

// queryLexeme is a query's word as a tsquery lexeme: one longer than any
// lexeme a tsvector holds here matches nothing.
func queryLexeme(w string) string {
	if len(w) > maxLexeme {
		return noMatch
	}
	return quoteLexeme(w)
}
