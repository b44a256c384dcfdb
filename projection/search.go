package projection

import (
	"context"
	"strings"
	"unicode"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// ErrBadQuery: a raw full-text query that FTS5 cannot parse.
var ErrBadQuery = errors.New("projection: invalid search query")

// SearchOptions qualify Search.
type SearchOptions struct {
	// IncludeArchived searches archived threads too. Default: active only.
	IncludeArchived bool
	// Limit is the number of hits. Default 20, at most 500.
	Limit int
	// Raw passes the query to FTS5 as it is (AND, OR, NOT, "phrases",
	// prefix*, NEAR). Default: every word must occur, taken literally.
	Raw bool
	// Window is how many of the most recent matches are ranked by
	// relevance (bm25). Default: 1000. A query matching more returns the
	// best of its most recent Window matches, so that a common word costs
	// what a rare one does.
	Window int
}

// Hit is one matching item.
type Hit struct {
	Thread  string           `json:"thread"`
	Turn    string           `json:"turn"`
	Ordinal int64            `json:"turn_ordinal"`
	Item    string           `json:"item"`
	Type    rollout.ItemType `json:"type"`
	// Snippet is the matching text around the hit, terms in [brackets].
	Snippet string  `json:"snippet"`
	Rank    float64 `json:"rank"` // bm25: lower is better
}

// Search finds items of this workspace's visible turns whose text (or tool
// name and arguments) matches query, best first among the most recent
// matches (see SearchOptions.Window). Rows are made to agree
// with every rollout first (Refresh). Threads whose identity is in doubt
// are not searched.
func (s *Store) Search(ctx context.Context, query string, o SearchOptions) ([]Hit, error) {
	match := query
	if !o.Raw {
		match = literalQuery(query)
	}
	if strings.TrimSpace(match) == "" {
		return nil, errors.Wrap(ErrBadQuery, "empty query")
	}
	limit := o.Limit
	if limit <= 0 {
		limit = 20
	}
	limit = min(limit, 500)
	if err := s.Refresh(ctx); err != nil {
		return nil, err
	}
	window := o.Window
	if window <= 0 {
		window = 1000
	}
	window = max(window, limit)
	// The index is walked newest first and stops after window matches;
	// only those are ranked. Ranking every match of a common word would
	// score millions of rows for twenty.
	q := `WITH recent AS (
		SELECT items_fts.rowid AS id, bm25(items_fts) AS score
		FROM items_fts
		JOIN items i ON i.id = items_fts.rowid
		JOIN turns t ON t.thread_id = i.thread_id AND t.turn_id = i.turn_id
		JOIN threads th ON th.id = i.thread_id
		WHERE items_fts MATCH ? AND t.ordinal IS NOT NULL AND th.identity_error = ''`
	args := []any{match}
	if s.opts.WorkspaceID != "" {
		q += ` AND th.workspace_id = ?`
		args = append(args, s.opts.WorkspaceID)
	}
	if !o.IncludeArchived {
		q += ` AND th.location = 'active'`
	}
	q += ` ORDER BY items_fts.rowid DESC LIMIT ?)
		SELECT i.thread_id, i.turn_id, t.ordinal, i.item_id, i.type, i.body, r.score
		FROM recent r
		JOIN items i ON i.id = r.id
		JOIN turns t ON t.thread_id = i.thread_id AND t.turn_id = i.turn_id
		ORDER BY r.score, r.id DESC LIMIT ?`
	args = append(args, window, limit)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		if o.Raw && strings.Contains(err.Error(), "fts5") {
			return nil, errors.WithHint(errors.Wrapf(ErrBadQuery, "%q: %v", query, err), "see the FTS5 query syntax, or search without raw mode")
		}
		return nil, errors.Wrap(err, "search")
	}
	defer rows.Close()
	hits := []Hit{}
	terms := queryTerms(query, o.Raw)
	for rows.Next() {
		var h Hit
		var typ string
		var body []byte
		if err := rows.Scan(&h.Thread, &h.Turn, &h.Ordinal, &h.Item, &typ, &body, &h.Rank); err != nil {
			return nil, errors.Wrap(err, "search")
		}
		h.Type = rollout.ItemType(typ)
		if it, err := decodeItem(body); err == nil {
			h.Snippet = snippet(ftsText(&it), terms, snippetTokens)
		}
		hits = append(hits, h)
	}
	if err := rows.Err(); err != nil {
		if o.Raw && strings.Contains(err.Error(), "fts5") {
			return nil, errors.Wrapf(ErrBadQuery, "%q: %v", query, err)
		}
		return nil, errors.Wrap(err, "search")
	}
	return hits, nil
}

// snippetTokens is how many words a snippet shows.
const snippetTokens = 12

// term is a word of a query; prefix for a raw "word*".
type term struct {
	word   string
	prefix bool
}

// queryTerms finds the words a query looks for, to mark them in snippets.
func queryTerms(q string, raw bool) []term {
	var out []term
	for _, tok := range tokens(q) {
		w := strings.ToLower(q[tok[0]:tok[1]])
		if raw && (w == "and" || w == "or" || w == "not" || w == "near") && q[tok[0]:tok[1]] == strings.ToUpper(w) {
			continue
		}
		out = append(out, term{word: w, prefix: raw && tok[1] < len(q) && q[tok[1]] == '*'})
	}
	return out
}

// tokens splits text into runs of letters and digits, as the index's
// tokenizer does (closely enough to mark the words that matched).
func tokens(s string) [][2]int {
	var out [][2]int
	start := -1
	for i, r := range s {
		word := unicode.IsLetter(r) || unicode.IsDigit(r)
		switch {
		case word && start < 0:
			start = i
		case !word && start >= 0:
			out = append(out, [2]int{start, i})
			start = -1
		}
	}
	if start >= 0 {
		out = append(out, [2]int{start, len(s)})
	}
	return out
}

// snippet cuts about n words of text around the first word that matches a
// term, the matches in [brackets], "…" where text was left out. (The index
// keeps no copy of the text, so FTS5's snippet() cannot do it.)
func snippet(text string, terms []term, n int) string {
	toks := tokens(text)
	match := func(t [2]int) bool {
		w := strings.ToLower(text[t[0]:t[1]])
		for _, q := range terms {
			if w == q.word || (q.prefix && strings.HasPrefix(w, q.word)) {
				return true
			}
		}
		return false
	}
	first := 0
	for i, t := range toks {
		if match(t) {
			first = i
			break
		}
	}
	lo := max(0, first-n/3)
	hi := min(len(toks), lo+n)
	if len(toks) == 0 {
		return truncate(text, 80)
	}
	var b strings.Builder
	if lo > 0 {
		b.WriteString("…")
	}
	pos := toks[lo][0]
	for _, t := range toks[lo:hi] {
		b.WriteString(text[pos:t[0]])
		if match(t) {
			b.WriteString("[" + text[t[0]:t[1]] + "]")
		} else {
			b.WriteString(text[t[0]:t[1]])
		}
		pos = t[1]
	}
	if hi < len(toks) {
		b.WriteString("…")
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// literalQuery turns words into an FTS5 query in which each word is a
// quoted string: nothing the user types is taken as syntax.
func literalQuery(q string) string {
	var terms []string
	for _, w := range strings.Fields(q) {
		terms = append(terms, `"`+strings.ReplaceAll(w, `"`, `""`)+`"`)
	}
	return strings.Join(terms, " ")
}
