package projection

import (
	"cmp"
	"context"
	"database/sql"
	"math"
	"slices"
	"strings"
	"unicode"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
	"golang.org/x/text/unicode/norm"
)

// ErrBadQuery is returned for a raw full-text query that FTS5 cannot parse.
var ErrBadQuery = errors.New("projection: invalid search query")

// SearchOptions qualify Search.
type SearchOptions struct {
	// IncludeArchived searches archived threads too. Default: active only.
	IncludeArchived bool
	// Limit is the number of hits. Default 20, at most 500.
	Limit int
	// Raw passes the query to FTS5 as it is: AND, OR, NOT, prefix* and
	// parentheses. Phrases and NEAR are refused with ErrBadQuery: the
	// index keeps no word positions (a literal query finds words side by
	// side instead). Default: every word must occur, taken literally.
	Raw bool
	// Window is how many of the most recent matches are ranked by
	// relevance (a BM25 score, see Search). Default: 500. A query matching
	// more returns the best of its most recent Window matches, so that a
	// common word costs what a rare one does.
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
// matches (see SearchOptions.Window). Rows are made to agree with the
// thread directories first (as List does: rollouts with no row, moved or
// gone), and the index with the rows; a thread is searched as far as its
// row is projected. Every writer projects what it appends; what a process
// that died acknowledged without projecting is caught up by the sweep the
// replay of its journal asks for (journal.StaleMark), and Refresh checks
// every rollout on demand. Threads whose identity is in doubt are not
// searched.
//
// The index (search.db) holds which items contain each word; each
// candidate is then checked against state.db (its item still there, in a
// visible turn) and read from its rollout, for the snippet and, for a
// literal word of several tokens ("go-test"), that they are adjacent.
func (s *Store) Search(ctx context.Context, query string, o SearchOptions) (_ []Hit, err error) {
	defer s.guard(&err)
	match, phrases := query, [][]string(nil)
	if !o.Raw {
		match, phrases = literalQuery(query)
	}
	if strings.TrimSpace(match) == "" {
		return nil, errors.Wrap(ErrBadQuery, "empty query")
	}
	limit := o.Limit
	if limit <= 0 {
		limit = 20
	}
	limit = min(limit, 500)
	window := o.Window
	if window <= 0 {
		window = 500
	}
	window = max(window, limit)
	if err := s.Flush(ctx); err != nil {
		return nil, err
	}
	if err := s.reconcile(ctx, false); err != nil {
		return nil, err
	}
	if err := s.idx.flush(ctx); err != nil {
		return nil, errors.Wrap(err, "search index")
	}
	badRaw := func(err error) error {
		return errors.WithHint(errors.Wrapf(ErrBadQuery, "%q: %v", query, err),
			"see the FTS5 query syntax; phrases and NEAR are not available (the index keeps no positions): search without raw mode for words in order")
	}
	v := &hitVerifier{s: s, ctx: ctx, o: o, threads: map[int64]*hitThread{}}
	defer v.close()
	terms := queryTerms(query, o.Raw)
	weights, err := s.idx.termWeights(ctx, terms)
	if err != nil {
		return nil, errors.Wrap(err, "search")
	}
	type scored struct {
		h     Hit
		score float64
		rowid int64
		text  string
	}
	// The newest window matches, newest first. A match out of scope (an
	// archived thread, another workspace's) or whose words are not side by
	// side counts toward the window too: a common word costs what a rare
	// one does.
	cands, err := queryInts(ctx, s.idx.r, `SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rowid DESC LIMIT ?`, match, window)
	if err != nil {
		if o.Raw && isQuerySyntaxError(err) {
			return nil, badRaw(err)
		}
		return nil, errors.Wrap(err, "search")
	}
	var found []scored
	for _, c := range cands {
		h, it, ok, err := v.check(c)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if text := ftsText(&it); hasPhrases(text, phrases) {
			found = append(found, scored{h: h, rowid: c, text: text})
		}
	}
	var lengths float64
	for i := range found {
		f := &found[i]
		f.h.Snippet = snippet(f.text, terms, snippetTokens)
		tf, dl := termFrequencies(f.text, terms)
		lengths += float64(dl)
		f.score = float64(dl) // kept until the mean length is known
		v.tfs = append(v.tfs, tf)
	}
	if len(found) > 0 {
		avg := lengths / float64(len(found))
		for i := range found {
			found[i].score = bm25(v.tfs[i], weights, found[i].score, avg)
			found[i].h.Rank = -found[i].score
		}
	}
	slices.SortStableFunc(found, func(a, b scored) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(b.rowid, a.rowid) // newer first
	})
	hits := []Hit{}
	for _, f := range found[:min(limit, len(found))] {
		hits = append(hits, f.h)
	}
	// Rows that named a frame the rollout no longer holds: projected
	// again now, so that the next search is right.
	for _, f := range v.stale {
		if err := s.reproject(ctx, f); err != nil {
			return nil, err
		}
	}
	return hits, nil
}

// Ranking. FTS5's bm25() needs the positions the index does not keep
// (detail=none), so Search scores the candidates itself, on the text it
// reads for each anyway: Okapi BM25 with the term frequencies and length
// of that text, each term weighted by its rarity in the index (its
// document count, from FTS5's vocabulary table), lengths normalized by the
// candidates' mean.
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

func bm25(tf []int, weights []float64, dl, avgdl float64) float64 {
	score := 0.0
	for i, f := range tf {
		if f == 0 {
			continue
		}
		ff := float64(f)
		score += weights[i] * ff * (bm25K1 + 1) / (ff + bm25K1*(1-bm25B+bm25B*dl/max(avgdl, 1)))
	}
	return score
}

// termFrequencies counts each term's occurrences in text, and its words.
func termFrequencies(text string, terms []term) ([]int, int) {
	tf := make([]int, len(terms))
	toks := tokens(text)
	for _, t := range toks {
		w := fold(text[t[0]:t[1]])
		for i, q := range terms {
			if w == q.word || (q.prefix && strings.HasPrefix(w, q.word)) {
				tf[i]++
			}
		}
	}
	return tf, len(toks)
}

// termWeights are the terms' inverse document frequencies in the index.
func (x *searchIndex) termWeights(ctx context.Context, terms []term) ([]float64, error) {
	var total float64
	if err := x.r.QueryRowContext(ctx, `SELECT coalesce((SELECT CAST(value AS REAL) FROM meta WHERE key = 'docs'), 0)`).Scan(&total); err != nil {
		return nil, err
	}
	w := make([]float64, len(terms))
	for i, t := range terms {
		var n float64
		q := `SELECT coalesce(sum(doc), 0) FROM fts_terms WHERE term = ?`
		arg := t.word
		if t.prefix {
			q, arg = `SELECT coalesce(max(doc), 0) FROM fts_terms WHERE term >= ? AND term < ?`, t.word
			if err := x.r.QueryRowContext(ctx, q, arg, arg+"\U0010FFFF").Scan(&n); err != nil {
				return nil, err
			}
		} else if err := x.r.QueryRowContext(ctx, q, arg).Scan(&n); err != nil {
			return nil, err
		}
		// A term in every document still counts a little (as FTS5's does).
		w[i] = max(math.Log((max(total, n)-n+0.5)/(n+0.5)), 1e-6)
	}
	return w, nil
}

// queryInts runs a query of one integer column and returns its values.
func queryInts(ctx context.Context, db *sql.DB, q string, args ...any) ([]int64, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// hitThread is what a search knows of a candidate's thread.
type hitThread struct {
	ok     bool // searched: in scope, this workspace's, identity sound
	id     string
	file   rolloutFile
	frames *frameSource
	failed bool
}

// hitVerifier checks candidates against state.db and the rollouts.
type hitVerifier struct {
	s       *Store
	ctx     context.Context
	o       SearchOptions
	threads map[int64]*hitThread
	stale   []rolloutFile
	tfs     [][]int
}

func (v *hitVerifier) thread(tid int64) (*hitThread, error) {
	if t, ok := v.threads[tid]; ok {
		return t, nil
	}
	t := &hitThread{}
	v.threads[tid] = t
	var loc, rel, ws, idErr string
	err := v.s.r.QueryRowContext(v.ctx, `SELECT id, location, rollout_path, workspace_id, identity_error FROM threads WHERE tid = ?`, tid).
		Scan(&t.id, &loc, &rel, &ws, &idErr)
	if errors.Is(err, sql.ErrNoRows) {
		return t, nil
	}
	if err != nil {
		return nil, errors.Wrap(err, "search")
	}
	t.ok = idErr == "" && (v.s.opts.WorkspaceID == "" || ws == v.s.opts.WorkspaceID) && (v.o.IncludeArchived || loc == LocationActive)
	t.file = fileAt(t.id, rel)
	return t, nil
}

// check verifies one candidate: its thread is in scope, the item's row is
// there, its frame is in the rollout, and its turn is visible and the one
// the row names. A row gone since the index was flushed (a thread dropped,
// an item rolled back) is not ok.
func (v *hitVerifier) check(rowid int64) (_ Hit, _ rollout.Item, ok bool, _ error) {
	tid, seq := splitRowid(rowid)
	t, err := v.thread(tid)
	if err != nil {
		return Hit{}, rollout.Item{}, false, err
	}
	if t.id == "" {
		return Hit{}, rollout.Item{}, false, nil // a thread dropped
	}
	if !t.ok || t.failed {
		return Hit{}, rollout.Item{}, false, nil
	}
	var turn, last, frame, typ int64
	err = v.s.r.QueryRowContext(v.ctx, `SELECT seq - toff, seq + ver, frame, type FROM items WHERE tid = ? AND seq = ?`, tid, int64(seq)).
		Scan(&turn, &last, &frame, &typ)
	if errors.Is(err, sql.ErrNoRows) {
		return Hit{}, rollout.Item{}, false, nil // gone since it was indexed (rolled back)
	}
	if err != nil {
		return Hit{}, rollout.Item{}, false, errors.Wrap(err, "search")
	}
	if t.frames == nil {
		if t.frames, err = v.s.openFrames(t.file); err != nil {
			t.failed = true
			if !vfs.IsNotExist(err) {
				v.stale = append(v.stale, t.file)
			}
			return Hit{}, rollout.Item{}, false, nil
		}
	}
	recs, err := t.frames.records(frame)
	var rec rollout.Record
	if err == nil {
		if i := uint64(last) - recs[0].Seq; uint64(last) >= recs[0].Seq && i < uint64(len(recs)) {
			rec = recs[i]
		}
	}
	if err != nil || rec.Kind != rollout.KindItemAppended {
		t.failed = true
		v.stale = append(v.stale, t.file)
		return Hit{}, rollout.Item{}, false, nil
	}
	it, err := decodeItemRecord(rec)
	if err != nil {
		return Hit{}, rollout.Item{}, false, nil
	}
	var ord sql.NullInt64
	var inst int64
	err = v.s.r.QueryRowContext(v.ctx, `SELECT ordinal, instance FROM turns WHERE tid = ? AND turn_id = ?`, tid, rec.Turn).Scan(&ord, &inst)
	if errors.Is(err, sql.ErrNoRows) || err == nil && (!ord.Valid || inst != turn) {
		return Hit{}, rollout.Item{}, false, nil // its turn rolled back
	}
	if err != nil {
		return Hit{}, rollout.Item{}, false, errors.Wrap(err, "search")
	}
	return Hit{Thread: t.id, Turn: rec.Turn, Ordinal: ord.Int64, Item: it.ID, Type: it.Type}, it, true, nil
}

func (v *hitVerifier) close() {
	for _, t := range v.threads {
		if t.frames != nil {
			t.frames.close()
		}
	}
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

// literalQuery turns words into an FTS5 query in which nothing the user
// types is syntax: every token of every word must occur (each quoted). A
// word of several tokens ("go-test", "nil_map") is also returned, to be
// checked in the text: the index keeps no positions, so "in order, side
// by side" is Search's check (hasPhrases), not FTS5's.
func literalQuery(q string) (string, [][]string) {
	var terms []string
	var phrases [][]string
	for _, w := range strings.Fields(q) {
		var toks []string
		for _, t := range tokens(w) {
			tok := w[t[0]:t[1]]
			toks = append(toks, fold(tok))
			terms = append(terms, `"`+tok+`"`)
		}
		if len(toks) > 1 {
			phrases = append(phrases, toks)
		}
	}
	return strings.Join(terms, " "), phrases
}

// hasPhrases reports whether text holds each phrase's tokens side by side.
func hasPhrases(text string, phrases [][]string) bool {
	if len(phrases) == 0 {
		return true
	}
	var toks []string
	for _, t := range tokens(text) {
		toks = append(toks, fold(text[t[0]:t[1]]))
	}
	for _, p := range phrases {
		found := false
		for i := 0; i+len(p) <= len(toks) && !found; i++ {
			found = slices.Equal(toks[i:i+len(p)], p)
		}
		if !found {
			return false
		}
	}
	return true
}

// fold is a token as the index's tokenizer compares it: lower case,
// diacritics removed (unicode61 remove_diacritics 2).
func fold(s string) string {
	var b strings.Builder
	for _, r := range norm.NFD.String(s) {
		if !unicode.Is(unicode.Mn, r) {
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// isQuerySyntaxError reports whether SQLite refused a MATCH for its
// query's syntax (FTS5's own errors, and the tokenizer's: an unterminated
// string is "unterminated string", without "fts5").
func isQuerySyntaxError(err error) bool {
	msg := err.Error()
	for _, s := range []string{"fts5", "syntax error", "unterminated string", "malformed MATCH"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
