package projection

import "strings"

// A raw query's NOT is the one operator the index's garbage (index.go)
// can turn against a live item: a word an item's older version held is
// still listed under its rowid, so "alpha NOT beta" would leave out an
// item whose text now has alpha and no beta. Search therefore takes its
// candidates with every "X NOT Y" read as X (withoutNot), and has FTS5
// check each against the query as written (recheck).

// withoutNot returns the FTS5 query q with the right side of each NOT
// dropped, and whether it had any. A query it cannot read is returned as
// it is (FTS5 then reports what is wrong with it).
func withoutNot(q string) (string, bool) {
	toks, ok := queryTokens(q)
	if !ok {
		return q, false
	}
	p := &notParser{toks: toks}
	out, ok := p.or()
	if !ok || p.i != len(toks) || !p.found {
		return q, false
	}
	return out, true
}

// queryTokens splits an FTS5 query into strings ("..." with "" inside),
// parentheses, and runs of anything else between spaces.
func queryTokens(q string) ([]string, bool) {
	var toks []string
	for i := 0; i < len(q); {
		switch c := q[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(' || c == ')':
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
			// A string may run on into * or + (a prefix, a phrase).
			for j < len(q) && q[j] != ' ' && q[j] != '(' && q[j] != ')' && q[j] != '"' {
				j++
			}
			toks = append(toks, q[i:j])
			i = j
		default:
			j := i
			for j < len(q) && q[j] != ' ' && q[j] != '\t' && q[j] != '\n' && q[j] != '\r' && q[j] != '(' && q[j] != ')' && q[j] != '"' {
				j++
			}
			toks = append(toks, q[i:j])
			i = j
		}
	}
	return toks, true
}

// notParser reads FTS5's precedence: NOT binds tighter than AND (or two
// terms side by side), AND tighter than OR.
type notParser struct {
	toks  []string
	i     int
	found bool
}

func (p *notParser) peek() string {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return ""
}

func (p *notParser) or() (string, bool) {
	left, ok := p.and()
	for ok && p.peek() == "OR" {
		p.i++
		var right string
		if right, ok = p.and(); ok {
			left += " OR " + right
		}
	}
	return left, ok
}

func (p *notParser) and() (string, bool) {
	left, ok := p.not()
	for ok {
		switch t := p.peek(); t {
		case "", ")", "OR":
			return left, true
		case "AND":
			p.i++
		}
		var right string
		if right, ok = p.not(); ok {
			left += " AND " + right
		}
	}
	return left, ok
}

func (p *notParser) not() (string, bool) {
	left, ok := p.primary()
	for ok && p.peek() == "NOT" {
		p.i++
		p.found = true
		_, ok = p.primary() // what it excludes: dropped
	}
	return left, ok
}

// primary is a parenthesized query, NEAR(...), or a phrase: tokens up to
// the next operator or parenthesis (a column filter, ^, + and * ride
// along with their words).
func (p *notParser) primary() (string, bool) {
	switch t := p.peek(); {
	case t == "(":
		p.i++
		inner, ok := p.or()
		if !ok || p.peek() != ")" {
			return "", false
		}
		p.i++
		return "(" + inner + ")", true
	case t == "", t == ")", t == "AND", t == "OR", t == "NOT":
		return "", false
	case strings.HasSuffix(t, "NEAR") && p.i+1 < len(p.toks) && p.toks[p.i+1] == "(":
		// Copied as it is, to its closing parenthesis.
		start, depth := p.i, 0
		for ; p.i < len(p.toks); p.i++ {
			switch p.toks[p.i] {
			case "(":
				depth++
			case ")":
				depth--
			}
			if depth == 0 && p.toks[p.i] == ")" {
				p.i++
				return strings.Join(p.toks[start:p.i], " "), true
			}
		}
		return "", false
	}
	start := p.i
	for p.i < len(p.toks) {
		t := p.toks[p.i]
		if t == "(" && p.i > start && strings.HasSuffix(p.toks[p.i-1], ":") {
			// A column filter's list: {a b}: is one token run; "(" after
			// "col:" opens the filtered query.
			open := p.i
			p.i++
			inner, ok := p.or()
			if !ok || p.peek() != ")" {
				return "", false
			}
			p.i++
			return strings.Join(p.toks[start:open], " ") + " (" + inner + ")", true
		}
		if t == "(" || t == ")" || t == "AND" || t == "OR" || t == "NOT" {
			break
		}
		p.i++
		// Side by side without +: two phrases (an AND), read by and().
		if !strings.HasSuffix(t, "+") && !strings.HasSuffix(t, ":") && t != "^" &&
			(p.i >= len(p.toks) || !strings.HasPrefix(p.toks[p.i], "+") && !strings.HasPrefix(p.toks[p.i], ":")) {
			break
		}
	}
	return strings.Join(p.toks[start:p.i], " "), true
}
