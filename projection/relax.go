package projection

import "strings"

// A raw query's NOT is the one operator the index's garbage (index.go)
// can turn against a live item: a word an item's older version held is
// still listed under its rowid, so "alpha NOT beta" would leave out an
// item whose text now has alpha and no beta. Search therefore takes its
// candidates with every "X NOT Y" read as X (withoutNot), and has FTS5
// check each against the query as written (recheck).

// relaxMaxDepth bounds the parentheses withoutNot reads (FTS5's own
// parser refuses deeper ones).
const relaxMaxDepth = 256

// withoutNot returns the FTS5 query q with the right side of each NOT
// dropped, and whether it had any. Every row q matches, the result
// matches. A query it cannot read (or that FTS5 would refuse) is returned
// as it is, found false: FTS5 then reports what is wrong with it.
//
// It reads FTS5's grammar (fts5parse.y) as far as an index with
// detail=none takes it: phrases side by side are one unit (an implicit
// AND binding tighter than any operator: "a NOT b c" is a NOT (b c));
// then NOT, AND and OR, tightest first; parentheses; "*" after a word.
func withoutNot(q string) (string, bool) {
	toks, ok := queryTokens(q)
	if !ok {
		return q, false
	}
	p := &notParser{toks: toks}
	if !p.or() || p.i != len(toks) || !p.found {
		return q, false
	}
	return strings.Join(p.out, " "), true
}

// queryTokens splits an FTS5 query as FTS5's lexer does: barewords
// (letters, digits, _, and any byte of a non-ASCII character), strings
// ("..." with "" inside), and ( ) *, between spaces, tabs, newlines and
// carriage returns. Any other character (a column filter's : { } , -, ^,
// +: all refused by an index with detail=none) makes it give up: the
// query is then not relaxed, and FTS5 judges it.
func queryTokens(q string) ([]string, bool) {
	var toks []string
	for i := 0; i < len(q); {
		switch c := q[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(' || c == ')' || c == '*':
			toks = append(toks, q[i:i+1])
			i++
		case c == '"':
			j := i + 1
			for {
				k := strings.IndexByte(q[j:], '"')
				if k < 0 {
					return nil, false
				}
				j += k + 1
				if j < len(q) && q[j] == '"' {
					j++
					continue
				}
				break
			}
			toks = append(toks, q[i:j])
			i = j
		case isBareword(c):
			j := i
			for j < len(q) && isBareword(q[j]) {
				j++
			}
			toks = append(toks, q[i:j])
			i = j
		default:
			return nil, false
		}
	}
	return toks, true
}

func isBareword(c byte) bool {
	return c >= 0x80 || c == '_' || c == 0x1a || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// notParser writes the relaxed query's tokens to out as it reads (a NOT's
// right side is read, then cut off again): linear in the query.
type notParser struct {
	toks  []string
	i     int
	out   []string
	depth int
	found bool
}

func (p *notParser) peek() string {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return ""
}

func isOperator(t string) bool { return t == "AND" || t == "OR" || t == "NOT" }

func (p *notParser) or() bool {
	if !p.and() {
		return false
	}
	for p.peek() == "OR" {
		p.i++
		p.out = append(p.out, "OR")
		if !p.and() {
			return false
		}
	}
	return true
}

func (p *notParser) and() bool {
	if !p.not() {
		return false
	}
	for p.peek() == "AND" {
		p.i++
		p.out = append(p.out, "AND")
		if !p.not() {
			return false
		}
	}
	return true
}

func (p *notParser) not() bool {
	if !p.unit() {
		return false
	}
	for p.peek() == "NOT" {
		p.i++
		p.found = true
		keep := len(p.out)
		if !p.unit() {
			return false
		}
		p.out = p.out[:keep] // what it excludes: dropped
	}
	return true
}

// unit is a parenthesized query, or phrases side by side.
func (p *notParser) unit() bool {
	if p.peek() == "(" {
		return p.group()
	}
	n := 0
	for p.phrase() {
		n++
	}
	return n > 0
}

func (p *notParser) group() bool {
	if p.depth++; p.depth > relaxMaxDepth {
		return false
	}
	p.i++
	p.out = append(p.out, "(")
	if !p.or() || p.peek() != ")" {
		return false
	}
	p.i++
	p.out = append(p.out, ")")
	p.depth--
	return true
}

// phrase reads one word or string, with its prefix *, or NEAR(...);
// false (nothing read) at an operator, a parenthesis, a lone * or the
// end.
func (p *notParser) phrase() bool {
	t := p.peek()
	if t == "" || t == "(" || t == ")" || t == "*" || isOperator(t) {
		return false
	}
	if t == "NEAR" && p.i+1 < len(p.toks) && p.toks[p.i+1] == "(" {
		// Copied as it is, to its closing parenthesis (phrases only).
		start := p.i
		p.i += 2
		for p.i < len(p.toks) && p.toks[p.i] != ")" {
			if p.toks[p.i] == "(" {
				return false
			}
			p.i++
		}
		if p.i == len(p.toks) {
			return false
		}
		p.i++
		p.out = append(p.out, p.toks[start:p.i]...)
		return true
	}
	p.i++
	if p.peek() == "*" {
		p.i++
		p.out = append(p.out, t+"*")
	} else {
		p.out = append(p.out, t)
	}
	return true
}
