package httpidem

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// bodyNamesKey reports whether a body that idem.KeyFromJSON refused as not
// JSON still has a value at the pointer when read leniently: duplicate
// members (the first of them, and any later one, count), invalid UTF-8 and
// lone surrogates in strings, nesting deeper than the strict limit, and
// anything after the first value or after the key are all tolerated. The
// middleware refuses such a body with 400 body-not-json whatever
// RequireKey says: its client sent a key, and the request must never run
// unprotected because the body is odd. A body that breaks off before the
// key is found (a form body, "{"request_id" without a value, a syntax
// error earlier in the document) carries no key.
//
// It reads the body once, without recursion beyond the pointer's depth
// and without allocating for the values it skips.
func bodyNamesKey(body []byte, pointer string) bool {
	if pointer == "" || pointer[0] != '/' {
		return false
	}
	toks := strings.Split(pointer[1:], "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	found, _ := lenientFind(body, skipWS(body, 0), toks)
	return found
}

// lenientFind reports whether the value at body[i] has a value at the
// path toks, and returns the end of the value at body[i] (-1 when the
// body breaks off or is malformed there).
func lenientFind(body []byte, i int, toks []string) (bool, int) {
	if i >= len(body) {
		return false, -1
	}
	if len(toks) == 0 {
		end := lenientSkip(body, i)
		return end >= 0, end
	}
	switch body[i] {
	case '{':
		i = skipWS(body, i+1)
		var key []byte
		for i < len(body) && body[i] != '}' {
			if body[i] != '"' {
				return false, -1
			}
			var end int
			key, end = lenientString(key[:0], body, i)
			if end < 0 {
				return false, -1
			}
			i = skipWS(body, end)
			if i >= len(body) || body[i] != ':' {
				return false, -1
			}
			i = skipWS(body, i+1)
			var found bool
			if string(key) == toks[0] {
				found, end = lenientFind(body, i, toks[1:])
				if found {
					return true, end
				}
			} else {
				end = lenientSkip(body, i)
			}
			if end < 0 {
				return false, -1
			}
			next := skipWS(body, end)
			if next < len(body) && body[next] == ',' {
				next = skipWS(body, next+1)
			}
			if next == i {
				return false, -1 // no progress: malformed
			}
			i = next
		}
		if i >= len(body) {
			return false, -1
		}
		return false, i + 1
	case '[':
		want, err := strconv.Atoi(toks[0])
		if err != nil || want < 0 || (len(toks[0]) > 1 && toks[0][0] == '0') {
			want = -1
		}
		i = skipWS(body, i+1)
		for k := 0; i < len(body) && body[i] != ']'; k++ {
			var found bool
			var end int
			if k == want {
				found, end = lenientFind(body, i, toks[1:])
				if found {
					return true, end
				}
			} else {
				end = lenientSkip(body, i)
			}
			if end < 0 {
				return false, -1
			}
			next := skipWS(body, end)
			if next < len(body) && body[next] == ',' {
				next = skipWS(body, next+1)
			}
			if next == i {
				return false, -1 // no progress: malformed
			}
			i = next
		}
		if i >= len(body) {
			return false, -1
		}
		return false, i + 1
	}
	return false, lenientSkip(body, i)
}

// lenientSkip returns the end of the value at body[i], or -1 when the body
// breaks off inside it. Nesting is counted, not recursed into.
func lenientSkip(body []byte, i int) int {
	depth := 0
	for i < len(body) {
		switch body[i] {
		case '"':
			_, end := lenientString(nil, body, i)
			if end < 0 {
				return -1
			}
			i = end
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
		if depth == 0 && (i >= len(body) || isDelim(body[i])) {
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

// lenientString appends the string at body[i] (an opening quote), escapes
// decoded, invalid bytes and lone surrogates kept as U+FFFD, and returns
// the offset after its closing quote, or -1 when it is unterminated.
func lenientString(dst, body []byte, i int) ([]byte, int) {
	for i++; i < len(body); i++ {
		switch c := body[i]; c {
		case '"':
			return dst, i + 1
		case '\\':
			if i+1 >= len(body) {
				return dst, -1
			}
			i++
			switch e := body[i]; e {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r, ok := lenientHex4(body[i+1:])
				if !ok {
					dst = append(dst, '\\', 'u')
					continue
				}
				i += 4
				if 0xd800 <= r && r < 0xdc00 && i+6 < len(body) && body[i+1] == '\\' && body[i+2] == 'u' {
					if lo, ok := lenientHex4(body[i+3:]); ok && 0xdc00 <= lo && lo <= 0xdfff {
						r = 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00)
						i += 6
					}
				}
				dst = utf8.AppendRune(dst, r) // a lone surrogate becomes U+FFFD
			default:
				dst = append(dst, e)
			}
		default:
			dst = append(dst, c)
		}
	}
	return dst, -1
}

func lenientHex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 32)
	return rune(n), err == nil
}

// skipWS returns the offset of the first byte at or after i that is not
// JSON white space.
func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
