package jsonscan

import (
	"strconv"
	"strings"
)

// Find returns the span doc[start:end] of the value that the RFC 6901
// pointer names in the JSON document doc, and whether it names one. The
// pointer is "" (the whole document) or starts with '/'; any other
// pointer names nothing.
//
// It reads leniently, so that it also answers for a document that
// Canonicalize refuses: duplicate members (the first one that has a value
// at the rest of the pointer counts), invalid UTF-8 and lone surrogates in
// strings, nesting deeper than MaxDepth, and anything after the first
// value or after the value found are all tolerated. A document that
// breaks off before the value is found (a form body, {"id" without a
// value, a syntax error earlier in the document) names nothing. On a
// document Canonicalize accepted, or wrote, it finds what a strict reader
// finds: the pointer's tokens are compared with the decoded member names,
// and an array index is a decimal number without leading zeros.
//
// It reads the document once, recursing only as deep as the pointer, and
// allocates nothing for the values it skips.
func Find(doc []byte, pointer string) (start, end int, found bool) {
	i := skipSpace(doc, 0)
	if pointer == "" {
		end := skipValue(doc, i)
		return i, end, end >= 0 && i < len(doc)
	}
	if pointer[0] != '/' {
		return 0, 0, false
	}
	return findIn(doc, i, pointer[1:])
}

// findIn returns the span of the value at the path rest below the value
// at doc[i], whether it found one, and, when it did not, end is the end
// of the value at doc[i] (-1 when the document breaks off or is malformed
// there).
func findIn(doc []byte, i int, rest string) (start, end int, found bool) {
	if i >= len(doc) {
		return 0, -1, false
	}
	tok, more := rest, ""
	last := true
	if k := strings.IndexByte(rest, '/'); k >= 0 {
		tok, more, last = rest[:k], rest[k+1:], false
	}
	var tokBuf [64]byte
	name := unescapeToken(tokBuf[:0], tok)
	at := func(v int) (int, int, bool) {
		if v >= len(doc) {
			return 0, -1, false // the document breaks off before the value
		}
		if last {
			e := skipValue(doc, v)
			return v, e, e >= 0
		}
		return findIn(doc, v, more)
	}
	// element reads the element of the container that starts at doc[i]:
	// it looks in it when the token names it (match), and skips it
	// otherwise. It returns the span found, or the offset of the next
	// element (past white space and a comma); next and end are -1 when
	// the document is malformed there.
	element := func(i int, match bool) (start, end int, found bool, next int) {
		var vEnd int
		if match {
			var ok bool
			if start, vEnd, ok = at(i); ok {
				return start, vEnd, true, 0
			}
		} else {
			vEnd = skipValue(doc, i)
		}
		if vEnd < 0 {
			return 0, -1, false, -1
		}
		next = skipSpace(doc, vEnd)
		if next < len(doc) && doc[next] == ',' {
			next = skipSpace(doc, next+1)
		}
		if next == i {
			return 0, -1, false, -1 // no progress: malformed
		}
		return 0, 0, false, next
	}
	switch doc[i] {
	case '{':
		i = skipSpace(doc, i+1)
		var keyBuf [64]byte
		key := keyBuf[:0]
		for i < len(doc) && doc[i] != '}' {
			if doc[i] != '"' {
				return 0, -1, false
			}
			var kEnd int
			key, kEnd = appendString(key[:0], doc, i)
			if kEnd < 0 {
				return 0, -1, false
			}
			i = skipSpace(doc, kEnd)
			if i >= len(doc) || doc[i] != ':' {
				return 0, -1, false
			}
			s, e, ok, next := element(skipSpace(doc, i+1), string(key) == string(name))
			if ok || next < 0 {
				return s, e, ok
			}
			i = next
		}
	case '[':
		want, err := strconv.Atoi(string(name))
		if err != nil || want < 0 || (len(name) > 1 && name[0] == '0') {
			want = -1
		}
		i = skipSpace(doc, i+1)
		for k := 0; i < len(doc) && doc[i] != ']'; k++ {
			s, e, ok, next := element(i, k == want)
			if ok || next < 0 {
				return s, e, ok
			}
			i = next
		}
	default:
		return 0, skipValue(doc, i), false
	}
	if i >= len(doc) {
		return 0, -1, false // the container breaks off
	}
	return 0, i + 1, false
}

// unescapeToken appends the pointer token tok with ~1 read as / and ~0 as
// ~ (RFC 6901).
func unescapeToken(b []byte, tok string) []byte {
	for i := 0; i < len(tok); i++ {
		if tok[i] == '~' && i+1 < len(tok) && (tok[i+1] == '1' || tok[i+1] == '0') {
			if tok[i+1] == '1' {
				b = append(b, '/')
			} else {
				b = append(b, '~')
			}
			i++
			continue
		}
		b = append(b, tok[i])
	}
	return b
}

// skipValue returns the end of the value at doc[i], or -1 when the
// document breaks off inside it. Nesting is counted, not recursed into.
func skipValue(doc []byte, i int) int {
	depth := 0
	for i < len(doc) {
		switch doc[i] {
		case '"':
			i = stringEnd(doc, i)
			if i < 0 {
				return -1
			}
		case '{', '[':
			depth++
			i++
		case '}', ']':
			if depth == 0 {
				return i // the end of the enclosing container
			}
			depth--
			i++
		case ',', ':', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
			i++
		default:
			i++
		}
		if depth == 0 && (i >= len(doc) || isDelim(doc[i])) {
			return i
		}
	}
	if depth > 0 {
		return -1
	}
	return i
}

func isDelim(b byte) bool {
	switch b {
	case ',', ':', '}', ']', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}
