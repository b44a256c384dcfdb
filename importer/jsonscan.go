package importer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// The scanner below reads the session lines of the formats that stream
// (Codex, Claude Code): a line is checked once (checkJSON, the syntax
// encoding/json accepts), then only the fields a reader needs are looked
// at, as spans of the line, and only the strings it keeps are decoded.
// encoding/json decodes every line in full, several times over (once per
// struct a line is tried as), and was half of an import's time
// (docs/BENCHMARKS.md, "Import"). FuzzJSONScan holds it to encoding/json's
// answers.

// maxDepth bounds nesting, as encoding/json does.
const maxDepth = 10000

// jsonError is a line that is not JSON: where, and why.
type jsonError struct {
	off int
	msg string
}

func (e *jsonError) Error() string { return fmt.Sprintf("%s at byte %d", e.msg, e.off) }

// checkJSON reports whether b is one JSON value, with white space around
// it allowed.
func checkJSON(b []byte) error {
	i := skipSpace(b, 0)
	end, err := checkValue(b, i, 0)
	if err != nil {
		return err
	}
	if end = skipSpace(b, end); end != len(b) {
		return &jsonError{end, fmt.Sprintf("invalid character %s after the value", quoteByte(b[end]))}
	}
	return nil
}

func quoteByte(c byte) string {
	if c < utf8.RuneSelf && strconv.IsPrint(rune(c)) {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("0x%02x", c)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func unexpected(b []byte, i int, what string) error {
	if i >= len(b) {
		return &jsonError{i, "unexpected end of the line in " + what}
	}
	return &jsonError{i, fmt.Sprintf("invalid character %s in %s", quoteByte(b[i]), what)}
}

// checkValue checks the value at b[i:] and returns where it ends.
func checkValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return i, unexpected(b, i, "a value")
	}
	switch c := b[i]; {
	case c == '{':
		return checkObject(b, i, depth+1)
	case c == '[':
		return checkArray(b, i, depth+1)
	case c == '"':
		return checkString(b, i)
	case c == '-' || c >= '0' && c <= '9':
		return checkNumber(b, i)
	case c == 't':
		return checkLiteral(b, i, "true")
	case c == 'f':
		return checkLiteral(b, i, "false")
	case c == 'n':
		return checkLiteral(b, i, "null")
	}
	return i, unexpected(b, i, "a value")
}

func checkLiteral(b []byte, i int, lit string) (int, error) {
	for k := 0; k < len(lit); k++ {
		if i+k >= len(b) || b[i+k] != lit[k] {
			return i + k, unexpected(b, i+k, "literal "+lit)
		}
	}
	return i + len(lit), nil
}

func checkObject(b []byte, i, depth int) (int, error) {
	if depth > maxDepth {
		return i, &jsonError{i, "nested too deep"}
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return i, unexpected(b, i, "an object key")
		}
		var err error
		if i, err = checkString(b, i); err != nil {
			return i, err
		}
		if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
			return i, unexpected(b, i, "an object, after a key")
		}
		if i, err = checkValue(b, skipSpace(b, i+1), depth); err != nil {
			return i, err
		}
		i = skipSpace(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			return i + 1, nil
		}
		return i, unexpected(b, i, "an object, after a value")
	}
}

func checkArray(b []byte, i, depth int) (int, error) {
	if depth > maxDepth {
		return i, &jsonError{i, "nested too deep"}
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		var err error
		if i, err = checkValue(b, i, depth); err != nil {
			return i, err
		}
		i = skipSpace(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
			continue
		}
		if i < len(b) && b[i] == ']' {
			return i + 1, nil
		}
		return i, unexpected(b, i, "an array, after a value")
	}
}

func checkNumber(b []byte, i int) (int, error) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return i, unexpected(b, i, "a number")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, unexpected(b, i, "a number's fraction")
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, unexpected(b, i, "a number's exponent")
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	return i, nil
}

// Eight bytes at a time: a word has a byte that ends a plain run of a
// string (a quote, a backslash, a control character) if special is not
// zero.
const (
	lo7    = 0x0101010101010101
	hi7    = 0x8080808080808080
	quote  = 0x2222222222222222
	bslash = 0x5c5c5c5c5c5c5c5c
)

func special(w uint64) uint64 {
	hasZero := func(x uint64) uint64 { return (x - lo7) &^ x & hi7 }
	return ((w - 0x2020202020202020) &^ w & hi7) | hasZero(w^quote) | hasZero(w^bslash)
}

// plainRun is how many bytes from b[i] are neither a quote, a backslash
// nor a control character.
func plainRun(b []byte, i int) int {
	start := i
	for i+8 <= len(b) {
		if s := special(binary.LittleEndian.Uint64(b[i:])); s != 0 {
			return i - start + bits.TrailingZeros64(s)/8
		}
		i += 8
	}
	for i < len(b) && b[i] >= 0x20 && b[i] != '"' && b[i] != '\\' {
		i++
	}
	return i - start
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func checkString(b []byte, i int) (int, error) {
	i++ // the opening quote
	for {
		i += plainRun(b, i)
		if i >= len(b) {
			return i, unexpected(b, i, "a string")
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, nil
		case c == '\\':
			if i+1 >= len(b) {
				return i + 1, unexpected(b, i+1, "a string escape")
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for k := 2; k < 6; k++ {
					if i+k >= len(b) || !isHex(b[i+k]) {
						return i + k, unexpected(b, i+k, "a \\u escape")
					}
				}
				i += 6
			default:
				return i + 1, unexpected(b, i+1, "a string escape")
			}
		default:
			return i, unexpected(b, i, "a string")
		}
	}
}

// The functions below read values already checked by checkJSON: they
// never fail on them, and never read past b on anything else.

// skipString returns the end of the string at b[i] (a quote): the next
// quote not escaped by an odd run of backslashes.
func skipString(b []byte, i int) int {
	i++
	for i < len(b) {
		k := bytes.IndexByte(b[i:], '"')
		if k < 0 {
			break
		}
		q := i + k
		n := 0
		for j := q - 1; j >= i && b[j] == '\\'; j-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		i = q + 1
	}
	return len(b)
}

// skipValue returns the end of the value at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// eachField calls fn with each key (its raw bytes, unquoted but not
// unescaped: the keys the readers ask for are plain) and value of the
// object b; b not an object, it calls fn never.
func eachField(b []byte, fn func(key, val []byte)) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return
	}
	i = skipSpace(b, i+1)
	for i < len(b) && b[i] == '"' {
		end := skipString(b, i)
		key := b[i+1 : max(end-1, i+1)]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return
		}
		i = skipSpace(b, i+1)
		end = skipValue(b, i)
		fn(key, b[i:end])
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ',' {
			return
		}
		i = skipSpace(b, i+1)
	}
}

// eachElem calls fn with each element of the array b; b not an array,
// it calls fn never.
func eachElem(b []byte, fn func(val []byte)) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return
	}
	i = skipSpace(b, i+1)
	for i < len(b) && b[i] != ']' {
		end := skipValue(b, i)
		if end == i {
			return
		}
		fn(b[i:end])
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ',' {
			return
		}
		i = skipSpace(b, i+1)
	}
}

// field returns the value of key in the object b (nil: not there).
func field(b []byte, key string) []byte {
	var v []byte
	eachField(b, func(k, val []byte) {
		if string(k) == key {
			v = val
		}
	})
	return v
}

// kind is the first byte of a value: '{', '[', '"', 't', 'f', 'n', or a
// number's first byte; 0 for nothing.
func kind(v []byte) byte {
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

// isNull reports whether v is absent or null.
func isNull(v []byte) bool { return len(v) == 0 || v[0] == 'n' }

// str is the string v decodes to, and whether v is a string.
func str(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	in := v[1 : len(v)-1]
	if plainRun(in, 0) == len(in) && utf8.Valid(in) {
		return string(in), true
	}
	return unescape(in), true
}

// text is the string v decodes to, or "" if v is not a string.
func text(v []byte) string {
	s, _ := str(v)
	return s
}

// unescape decodes a string's contents as encoding/json does: escapes
// resolved, bytes that are not UTF-8 and lone surrogates as U+FFFD.
func unescape(in []byte) string {
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); {
		c := in[i]
		switch {
		case c == '\\' && i+1 < len(in):
			switch in[i+1] {
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r := hex4(in[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					if i+6 <= len(in) && in[i] == '\\' && in[i+1] == 'u' {
						if d := utf16.DecodeRune(r, hex4(in[i+2:])); d != utf8.RuneError {
							out = utf8.AppendRune(out, d)
							i += 6
							continue
						}
					}
					r = utf8.RuneError
				}
				out = utf8.AppendRune(out, r)
				continue
			default: // '"', '\\', '/'
				out = append(out, in[i+1])
			}
			i += 2
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, n := utf8.DecodeRune(in[i:])
			if r == utf8.RuneError && n == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, in[i:i+n]...)
			}
			i += n
		}
	}
	return string(out)
}

// hex4 is the value of four hex digits (checked by checkString).
func hex4(b []byte) rune {
	if len(b) < 4 {
		return utf8.RuneError
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return utf8.RuneError
		}
		r = r<<4 | rune(c)
	}
	return r
}

// integer is the integer v holds (a JSON number; a fraction is cut, as a
// count that a source wrote as 12.0), and whether it is one.
func integer(v []byte) (int64, bool) {
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return 0, false
	}
	if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f > 9e18 || f < -9e18 {
		return 0, false
	}
	return int64(f), true
}

// boolean is true only for the literal true.
func boolean(v []byte) bool { return len(v) == 4 && v[0] == 't' }
