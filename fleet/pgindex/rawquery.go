package pgindex

import (
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/projection"
)

// A raw query is what state.db's FTS5 index (detail=none) takes, made
// into a tsquery. The grammar, from FTS5's parser (fts5parse.y), with
// what detail=none refuses refused here too:
//
//	query  := or
//	or     := and { "OR" and }
//	and    := not { "AND" not }
//	not    := unit { "NOT" unit }          a NOT b: a and not b
//	unit   := "(" query ")" | phrase { phrase }   adjacent phrases: and
//	phrase := (bareword | "string") [ "*" ]      a prefix with *
//
// Operators are upper case (and, or, not are words). A bareword is a run
// of ASCII letters, digits and "_" and of any non-ASCII character; a
// string is in double quotes ("" is a quote). A phrase whose text has no
// word matches nothing; one of several words ("foo_bar", "a b") is a
// phrase query, which detail=none refuses, as it refuses NEAR(...), column
// filters (col:, -col:, {cols}:), "^" and "+". Adjacent phrases bind
// tighter than NOT, NOT than AND, AND than OR; a parenthesised query
// cannot be adjacent to a phrase (FTS5's syntax error).

type tokKind int

const (
	tokEOF tokKind = iota
	tokPhrase
	tokStar
	tokLP
	tokRP
	tokAnd
	tokOr
	tokNot
)

type rawTok struct {
	kind tokKind
	text string // a phrase's text
}

// lexRaw splits a raw query into tokens.
func lexRaw(q string) ([]rawTok, error) {
	var out []rawTok
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(':
			out = append(out, rawTok{kind: tokLP})
			i++
		case c == ')':
			out = append(out, rawTok{kind: tokRP})
			i++
		case c == '*':
			out = append(out, rawTok{kind: tokStar})
			i++
		case c == '"':
			var b strings.Builder
			j := i + 1
			for {
				if j >= len(q) {
					return nil, errors.New("unterminated string")
				}
				if q[j] == '"' {
					if j+1 < len(q) && q[j+1] == '"' {
						b.WriteByte('"')
						j += 2
						continue
					}
					break
				}
				b.WriteByte(q[j])
				j++
			}
			out = append(out, rawTok{kind: tokPhrase, text: b.String()})
			i = j + 1
		case bareword(c):
			j := i
			for j < len(q) && bareword(q[j]) {
				j++
			}
			w := q[i:j]
			i = j
			switch w {
			case "AND":
				out = append(out, rawTok{kind: tokAnd})
			case "OR":
				out = append(out, rawTok{kind: tokOr})
			case "NOT":
				out = append(out, rawTok{kind: tokNot})
			default:
				if w == "NEAR" && strings.HasPrefix(strings.TrimLeft(q[i:], " \t\n\r"), "(") {
					return nil, errors.New("NEAR queries are not supported (the index keeps no word positions for them)")
				}
				out = append(out, rawTok{kind: tokPhrase, text: w})
			}
		case c == ':' || c == '-' || c == '{' || c == '}':
			return nil, errors.New("column queries are not supported")
		case c == '^' || c == '+':
			return nil, errors.New("phrase queries are not supported")
		default:
			return nil, errors.Newf("syntax error near %q", string(c))
		}
	}
	return append(out, rawTok{kind: tokEOF}), nil
}

// bareword reports whether c may be part of an FTS5 bareword.
func bareword(c byte) bool {
	return c >= 0x80 || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == 0x1a
}

type rawParser struct {
	toks []rawTok
	i    int
}

func (p *rawParser) peek() rawTok { return p.toks[p.i] }
func (p *rawParser) next() rawTok { t := p.toks[p.i]; p.i++; return t }

// rawQuery turns a raw query into a tsquery.
func rawQuery(q string) (string, error) {
	toks, err := lexRaw(q)
	if err != nil {
		return "", err
	}
	if len(toks) == 1 {
		return "", nil // empty
	}
	p := &rawParser{toks: toks}
	out, err := p.or()
	if err != nil {
		return "", err
	}
	if p.peek().kind != tokEOF {
		return "", errors.New("syntax error")
	}
	return out, nil
}

func (p *rawParser) or() (string, error) {
	left, err := p.and()
	for err == nil && p.peek().kind == tokOr {
		p.next()
		var right string
		if right, err = p.and(); err == nil {
			left = "(" + left + " | " + right + ")"
		}
	}
	return left, err
}

func (p *rawParser) and() (string, error) {
	left, err := p.not()
	for err == nil && p.peek().kind == tokAnd {
		p.next()
		var right string
		if right, err = p.not(); err == nil {
			left = "(" + left + " & " + right + ")"
		}
	}
	return left, err
}

func (p *rawParser) not() (string, error) {
	left, err := p.unit()
	for err == nil && p.peek().kind == tokNot {
		p.next()
		var right string
		if right, err = p.unit(); err == nil {
			left = "(" + left + " & !" + right + ")"
		}
	}
	return left, err
}

func (p *rawParser) unit() (string, error) {
	switch p.peek().kind {
	case tokLP:
		p.next()
		e, err := p.or()
		if err != nil {
			return "", err
		}
		if p.next().kind != tokRP {
			return "", errors.New("syntax error: ( without )")
		}
		return e, nil
	case tokPhrase:
		var parts []string
		for p.peek().kind == tokPhrase {
			ph, err := p.phrase()
			if err != nil {
				return "", err
			}
			parts = append(parts, ph)
		}
		if len(parts) == 1 {
			return parts[0], nil
		}
		return "(" + strings.Join(parts, " & ") + ")", nil
	}
	return "", errors.New("syntax error")
}

func (p *rawParser) phrase() (string, error) {
	t := p.next()
	prefix := p.peek().kind == tokStar
	if prefix {
		p.next()
	}
	words := projection.Words(t.text)
	switch len(words) {
	case 0:
		return noMatch, nil
	case 1:
		if prefix && len(words[0]) <= maxLexeme {
			return quoteLexeme(words[0]) + ":*", nil
		}
		return queryLexeme(words[0]), nil
	}
	return "", errors.New("phrase queries are not supported (the index keeps no word positions for them)")
}
