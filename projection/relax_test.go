package projection

import (
	"database/sql"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestWithoutNotKeepsWhatANotExcludesFrom(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`alpha NOT beta`, `alpha`},
		{`alpha NOT beta NOT gamma`, `alpha`},
		{`alpha AND beta NOT gamma`, `alpha AND beta`},
		{`alpha beta NOT gamma`, `alpha beta`},
		{`alpha NOT beta gamma`, `alpha`}, // phrases side by side are one unit
		{`(alpha OR beta) NOT (gamma delta)`, `( alpha OR beta )`},
		{`alpha OR beta NOT gamma`, `alpha OR beta`},
		{`"al pha" NOT "be""ta"`, `"al pha"`},
		{`alp* NOT beta`, `alp*`},
		{`alp * NOT beta`, `alp*`},
		{"\"answer\"NOT thinking", `"answer"`}, // operators glued to a string or a *, or after a tab
		{"alpha NOT zzz*OR gamma", `alpha OR gamma`},
		{"alpha\tNOT\nbeta\r\nOR gamma", `alpha OR gamma`},
		{`NEAR(alpha beta) NOT gamma`, `NEAR ( alpha beta )`},
		{`héllo_wörld NOT x`, `héllo_wörld`},
	} {
		got, found := withoutNot(c.in)
		if !found || got != c.want {
			t.Errorf("withoutNot(%q) = %q, %v; want %q", c.in, got, found, c.want)
		}
	}
	for _, q := range []string{`alpha beta`, `alpha OR beta`, `"alpha NOT beta"`, `alpha NOT`, `NOT alpha`, `(alpha NOT beta`, `"open`,
		`(alpha NOT beta) gamma`, `(alpha NOT beta) zeta`, `text:alpha NOT beta`, `alpha + beta NOT gamma`, `^alpha NOT b`, `go-test NOT b`,
		`NEAR(alpha beta, 3) NOT gamma`} {
		if got, found := withoutNot(q); found || got != q {
			t.Errorf("withoutNot(%q) = %q, %v; want it unchanged", q, got, found)
		}
	}
}

// Deep nesting is refused before it costs: FTS5 refuses it anyway.
func TestWithoutNotRefusesDeepNesting(t *testing.T) {
	q := strings.Repeat("(", 1<<20) + "a NOT b" + strings.Repeat(")", 1<<20)
	start := time.Now()
	if got, found := withoutNot(q); found || got != q {
		t.Fatalf("a query nested 1M deep was relaxed")
	}
	long := strings.Repeat("a OR ", 1<<17) + "a NOT b"
	if got, found := withoutNot(long); !found || got != strings.Repeat("a OR ", 1<<17)+"a" {
		t.Fatalf("a long flat query: found %v", found)
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("took %v", d) // a guard against a quadratic parser, not a timing
	}
}

// Every row a query matches, its relaxed form matches (FTS5 decides, on
// every combination of four words). (A query FTS5 refuses may relax into
// one it takes, its fault in the part dropped: Search asks FTS5 about
// the query as written first.)
func TestWithoutNotMatchesASuperset(t *testing.T) {
	db, err := sql.Open("sqlite", "file::memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE VIRTUAL TABLE f USING fts5(text, detail = none, tokenize = 'unicode61 remove_diacritics 2')`); err != nil {
		t.Fatal(err)
	}
	words := []string{"a", "b", "c", "d"}
	for mask := 1; mask < 16; mask++ {
		var doc []string
		for i, w := range words {
			if mask&(1<<i) != 0 {
				doc = append(doc, w)
			}
		}
		if _, err := db.Exec(`INSERT INTO f (rowid, text) VALUES (?, ?)`, mask, strings.Join(doc, " ")); err != nil {
			t.Fatal(err)
		}
	}
	rowsOf := func(q string) (map[int]bool, error) {
		rows, err := db.Query(`SELECT rowid FROM f WHERE f MATCH ?`, q)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := map[int]bool{}
		for rows.Next() {
			var r int
			if err := rows.Scan(&r); err != nil {
				return nil, err
			}
			out[r] = true
		}
		return out, rows.Err()
	}
	r := rand.New(rand.NewPCG(1, 2))
	// Mostly well-formed queries (a grammar's random walk), with a token
	// of noise now and then.
	// (detail=none refuses column filters, ^ and phrases of several
	// words: they are in the table test above, not here.)
	phrases := []string{"a", "b", "c", "d", "a*", `"c"`, `"d"*`}
	var gen func(depth int) string
	gen = func(depth int) string {
		switch k := r.IntN(10); {
		case depth > 3 || k < 4:
			unit := phrases[r.IntN(len(phrases))]
			for r.IntN(3) == 0 {
				unit += " " + phrases[r.IntN(len(phrases))]
			}
			return unit
		case k < 6:
			return "(" + gen(depth+1) + ")"
		default:
			return gen(depth+1) + " " + []string{"AND", "OR", "NOT", "NOT"}[r.IntN(4)] + " " + gen(depth+1)
		}
	}
	valid, relaxed := 0, 0
	for range 8000 {
		query := gen(0)
		// FTS5 needs no space around ( ) " * and takes tabs and
		// newlines for spaces: so must the parser.
		switch r.IntN(4) {
		case 0:
			query = strings.ReplaceAll(query, " ", []string{"\t", "\n", "\r\n"}[r.IntN(3)])
		case 1:
			for _, g := range []string{") ", " (", `" `, "* "} {
				query = strings.ReplaceAll(query, g, strings.TrimSpace(g))
			}
		}
		if r.IntN(10) == 0 {
			toks := strings.Fields(query)
			toks[r.IntN(len(toks))] = []string{"(", ")", "NOT", "OR", "+"}[r.IntN(5)]
			query = strings.Join(toks, " ")
		}
		want, err := rowsOf(query)
		if err != nil {
			continue // Search refuses it before relaxing (recheck of no text)
		}
		valid++
		rq, found := withoutNot(query)
		if !found {
			// Every NOT here is an operator, in syntax the parser reads.
			if strings.Contains(query, "NOT") {
				t.Errorf("%q: a NOT not found", query)
			}
			continue
		}
		relaxed++
		got, err := rowsOf(rq)
		if err != nil {
			t.Errorf("%q relaxed into %q, which FTS5 refuses: %v", query, rq, err)
			continue
		}
		for row := range want {
			if !got[row] {
				t.Errorf("%q matches row %d, its relaxed %q does not", query, row, rq)
				break
			}
		}
	}
	if relaxed < 1000 {
		t.Fatalf("only %d of %d valid queries had a NOT to relax", relaxed, valid)
	}
	t.Logf("%d valid queries, %d relaxed", valid, relaxed)
}
