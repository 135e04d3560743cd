package jsonscan

import "unicode/utf8"

// This file holds what the strict reader (Canonicalize) and the lenient
// one (Find) share: white space, string ends and escape sequences.

// skipSpace returns the offset of the first byte at or after i that is
// not JSON white space.
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

// plainByte reports whether b is ASCII that encoding/json writes as it
// is and that needs no escape in JSON: not a control character, '"' or
// '\'.
func plainByte(b byte) bool {
	return b >= 0x20 && b < utf8.RuneSelf && b != '"' && b != '\\'
}

// escapeProblem is what is wrong with an escape sequence.
type escapeProblem uint8

const (
	escOK           escapeProblem = iota
	escUnterminated               // the input ends after the backslash
	escInvalid                    // \x: not one of JSON's escapes
	escInvalidU                   // \u not followed by four hex digits
	escLoneLow                    // \udc00: the low half of a surrogate pair alone
	escLoneHigh                   // \ud800 not followed by the escape of a low half
)

var escapeProblems = [...]string{
	escOK:           "",
	escUnterminated: "unterminated string",
	escInvalid:      "invalid escape",
	escInvalidU:     "invalid \\u escape",
	escLoneLow:      "lone low surrogate",
	escLoneHigh:     "lone high surrogate",
}

func (p escapeProblem) String() string { return escapeProblems[p] }

// escape decodes the escape sequence at in[i] (its backslash): the
// character it stands for and the offset after the sequence. A \u escape
// of the high half of a surrogate pair takes the escape of the low half
// with it. When the sequence is not valid JSON, escape says why, and next
// is the offset the strict reader reports it at: the backslash for
// escUnterminated and escInvalid, after "\u" for escInvalidU, after the
// first \u escape for a lone surrogate.
func escape(in []byte, i int) (r rune, next int, p escapeProblem) {
	if i+1 >= len(in) {
		return 0, i, escUnterminated
	}
	switch e := in[i+1]; e {
	case '"', '\\', '/':
		return rune(e), i + 2, escOK
	case 'b':
		return '\b', i + 2, escOK
	case 'f':
		return '\f', i + 2, escOK
	case 'n':
		return '\n', i + 2, escOK
	case 'r':
		return '\r', i + 2, escOK
	case 't':
		return '\t', i + 2, escOK
	case 'u':
	default:
		return 0, i, escInvalid
	}
	i += 2
	r, ok := hex4(in[i:])
	if !ok {
		return 0, i, escInvalidU
	}
	i += 4
	switch {
	case r < 0xd800 || r > 0xdfff:
		return r, i, escOK
	case r >= 0xdc00:
		return 0, i, escLoneLow
	}
	if i+1 >= len(in) || in[i] != '\\' || in[i+1] != 'u' {
		return 0, i, escLoneHigh
	}
	lo, ok := hex4(in[i+2:])
	if !ok || lo < 0xdc00 || lo > 0xdfff {
		return 0, i, escLoneHigh
	}
	return 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00), i + 6, escOK
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, h := range b[:4] {
		switch {
		case '0' <= h && h <= '9':
			h -= '0'
		case 'a' <= h && h <= 'f':
			h -= 'a' - 10
		case 'A' <= h && h <= 'F':
			h -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(h)
	}
	return r, true
}

// stringEnd returns the offset after the closing quote of the string at
// in[i] (its opening quote), or -1 when the input ends inside it.
func stringEnd(in []byte, i int) int {
	for i++; i < len(in); i++ {
		switch in[i] {
		case '"':
			return i + 1
		case '\\':
			i++ // the escaped byte is never the closing quote
		}
	}
	return -1
}

// appendString appends the string at in[i] (its opening quote) with its
// escapes decoded, and returns the offset after its closing quote, or -1
// when the input ends inside it. It reads leniently: bytes that are not
// valid in a JSON string are kept as they are, an invalid escape is kept
// without its backslash (\u without hex digits with it), and a lone
// surrogate becomes U+FFFD. A string that Canonicalize accepted or wrote
// decodes as encoding/json decodes it.
func appendString(dst, in []byte, i int) ([]byte, int) {
	for i++; i < len(in); {
		switch c := in[i]; c {
		case '"':
			return dst, i + 1
		case '\\':
			r, next, p := escape(in, i)
			switch p {
			case escOK:
				dst = utf8.AppendRune(dst, r)
			case escUnterminated:
				return dst, -1
			case escInvalid:
				dst = append(dst, in[i+1])
				next = i + 2
			case escInvalidU:
				dst = append(dst, '\\', 'u')
			default: // a lone surrogate
				dst = utf8.AppendRune(dst, utf8.RuneError)
			}
			i = next
		default:
			dst = append(dst, c)
			i++
		}
	}
	return dst, -1
}

// DecodeString appends the string that s, a string as Canonicalize writes
// it (quotes included), stands for.
func DecodeString(dst, s []byte) []byte {
	dst, _ = appendString(dst, s, 0)
	return dst
}
