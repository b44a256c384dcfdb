package pgindex

import (
	"context"
	"io/fs"
	"slices"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/projection"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// literalQuery is a literal query's tsquery: every word must occur, a
// word of several tokens as a phrase; "" if it has no word.
func literalQuery(q string) string {
	var parts []string
	for _, w := range projection.LiteralWords(q) {
		toks := make([]string, len(w))
		for i, t := range w {
			toks[i] = queryLexeme(t)
		}
		parts = append(parts, strings.Join(toks, " <-> "))
	}
	return strings.Join(parts, " & ")
}

// Search finds items of this workspace's visible turns whose text (or
// tool name and arguments) matches query, best first among the most
// recent matches (SearchOptions.Window), as projection.Store.Search does:
// literal words by default (every word must occur, as words, in any case
// and with or without diacritics; a word of several tokens as those
// tokens side by side), or with Raw, FTS5's query syntax as state.db
// takes it (AND, OR, NOT, prefix*, parentheses; phrases and NEAR refused
// with projection.ErrBadQuery). Threads whose identity is in doubt are
// not searched; a thread is searched as far as its row is projected.
//
// Relevance is PostgreSQL's ts_rank over the window's matches, divided by
// the item's length in words (Hit.Rank is minus it: lower is better, as
// bm25's), not state.db's BM25: both favour more of the words in fewer
// words, and order ties newest first, but a query whose words occur
// several times may rank two hits the other way round. The window is the
// same.
func (s *Store) Search(ctx context.Context, query string, o projection.SearchOptions) ([]projection.Hit, error) {
	var tsq string
	if o.Raw {
		var err error
		if tsq, err = rawQuery(query); err != nil {
			return nil, errors.WithHint(errors.Wrapf(projection.ErrBadQuery, "%q: %v", query, err),
				"see the FTS5 query syntax; phrases and NEAR are not available: search without raw mode for words in order")
		}
	} else {
		tsq = literalQuery(query)
	}
	if tsq == "" {
		return nil, errors.Wrap(projection.ErrBadQuery, "empty query")
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
	if err := s.Settle(ctx); err != nil {
		return nil, err
	}
	if err := s.reconcile(ctx, false); err != nil {
		return nil, err
	}
	// The newest window matches of the workspace, newest first (a match
	// out of scope counts toward the window, as in state.db), then the
	// best limit of those in scope.
	rows, err := s.pool.Query(ctx, `WITH q AS (SELECT $2::text::tsquery AS q), w AS (
			SELECT i.tid, i.seq, i.last_seq, i.frame, i.words FROM rolloutdb.index_items i
			JOIN rolloutdb.index_threads t ON t.tid = i.tid
			WHERE t.ws = $1 AND i.words @@ (SELECT q FROM q)
			ORDER BY i.tid DESC, i.seq DESC LIMIT $3)
		SELECT w.tid, t.id, w.seq, w.last_seq, w.frame, ts_rank(w.words, (SELECT q FROM q), 2) AS r
		FROM w JOIN rolloutdb.index_threads t ON t.tid = w.tid
		WHERE t.identity_error = '' AND ($4 = '' OR t.workspace_id = $4) AND ($5 OR t.location = 'active')
		ORDER BY r DESC, w.tid DESC, w.seq DESC LIMIT $6`,
		s.ws, tsq, window, s.opts.WorkspaceID, o.IncludeArchived, limit)
	if err != nil {
		return nil, errors.Wrap(err, "pgindex: search")
	}
	type cand struct {
		tid  int64
		id   string
		at   itemAt
		rank float32
	}
	var cands []cand
	for rows.Next() {
		var c cand
		var seq, last int64
		if err := rows.Scan(&c.tid, &c.id, &seq, &last, &c.at.frame, &c.rank); err != nil {
			rows.Close()
			return nil, errors.Wrap(err, "pgindex: search")
		}
		c.at.seq, c.at.lastSeq = uint64(seq), uint64(last)
		cands = append(cands, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, errors.Wrap(err, "pgindex: search")
	}
	// Each hit's item read from the log, for its turn and snippet.
	frames := map[string]*frameSource{} // nil: unreadable
	defer func() {
		for _, f := range frames {
			if f != nil {
				f.close()
			}
		}
	}()
	var stale []string
	hits := []projection.Hit{}
	var tids []int64
	var turns []string
	for _, c := range cands {
		src, ok := frames[c.id]
		if !ok {
			src, err = s.openFrames(ctx, c.id)
			if err != nil && !errors.Is(err, errFrameGone) && !isNotExist(err) {
				return nil, err
			}
			if err != nil {
				stale = append(stale, c.id)
				src = nil
			}
			frames[c.id] = src
		}
		if src == nil {
			continue
		}
		rec, err := src.record(c.at.frame, c.at.lastSeq)
		if err != nil || rec.Kind != rollout.KindItemAppended {
			if err != nil && !errors.Is(err, errFrameGone) {
				return nil, err
			}
			stale = append(stale, c.id)
			frames[c.id] = nil
			src.close()
			continue
		}
		it, err := rec.DecodeItem()
		if err != nil {
			continue
		}
		hits = append(hits, projection.Hit{Thread: c.id, Turn: rec.Turn, Item: it.ID, Type: it.Type,
			Snippet: projection.Snippet(projection.ItemText(&it), query, o.Raw), Rank: -float64(c.rank)})
		tids, turns = append(tids, c.tid), append(turns, rec.Turn)
	}
	if len(hits) > 0 {
		type turnKey struct {
			tid  int64
			turn string
		}
		ords := map[turnKey]int64{}
		rows, err := s.pool.Query(ctx, `SELECT t.tid, t.turn_id, t.ordinal FROM rolloutdb.index_turns t
			JOIN unnest($1::bigint[], $2::text[]) AS u(tid, turn) ON t.tid = u.tid AND t.turn_id = u.turn
			WHERE t.ordinal IS NOT NULL`, tids, turns)
		if err != nil {
			return nil, errors.Wrap(err, "pgindex: search")
		}
		for rows.Next() {
			var k turnKey
			var ord int64
			if err := rows.Scan(&k.tid, &k.turn, &ord); err != nil {
				rows.Close()
				return nil, errors.Wrap(err, "pgindex: search")
			}
			ords[k] = ord
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, errors.Wrap(err, "pgindex: search")
		}
		for i := range hits {
			hits[i].Ordinal = ords[turnKey{tids[i], turns[i]}]
		}
	}
	// Rows that named a frame the log no longer holds: projected again
	// now, so that the next search is right.
	slices.Sort(stale)
	for _, id := range slices.Compact(stale) {
		if err := s.reproject(ctx, id); err != nil {
			return nil, err
		}
	}
	return hits, nil
}

// isNotExist reports whether err says the log has no such thread.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
