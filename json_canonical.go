package idem

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The canonical JSON form, in one pass over the input.
//
// canonicalize validates a document strictly and writes its canonical form
// at the same time: the output is never longer than the input, arrays and
// scalars are copied as they are read, and an object's members are written
// in the order they arrive and reordered in place when the object closes
// (only if they were not already sorted). The bookkeeping is one member
// record (16 bytes) per member of the objects being read and their decoded
// keys, so the whole costs a small constant factor of the body, with no
// value tree.
//
// The output is byte for byte what encoding/json writes (Encoder with
// SetEscapeHTML(false)) for the value that Decoder.UseNumber decodes, for
// every input this accepts: earlier releases computed it that way, and
// stored fingerprints must keep matching.
//
// Refused, with an error wrapping ErrInvalidJSON:
//   - anything but exactly one value, with optional white space around it
//     (trailing bytes: {"a":1}} or {"a":1},{"b":2});
//   - invalid UTF-8 anywhere, and \u escapes that are lone surrogates
//     ("\ud800", "\udc00", "\ud800\u0041"): encoding/json turns both into
//     U+FFFD, so "Ren\xe9", "Ren\xe8" and "Ren\ufffd" would be one request;
//   - duplicate object keys, compared after decoding ("a" and "\u0061");
//   - nesting deeper than maxJSONDepth;
//   - everything RFC 8259 does not allow (control characters in strings,
//     leading zeros, a trailing comma, ...).

// canonicalizer holds the state of one canonicalize call.
type canonicalizer struct {
	in      []byte
	pos     int
	out     []byte
	keys    []byte   // decoded keys of the members in mem
	mem     []member // members of the objects being read, innermost last
	scratch []byte   // the members of an object being reordered
}

// member is one object member: its decoded key in keys[key:keyEnd] and
// its canonical text ("key":value) in out[start:end].
type member struct{ key, keyEnd, start, end uint32 }

// canonicalize returns the canonical form of data, or an error wrapping
// ErrInvalidJSON.
func canonicalize(data []byte) ([]byte, error) {
	if len(data) > math.MaxUint32 {
		return nil, fmt.Errorf("%w: larger than 4 GiB", ErrInvalidJSON)
	}
	c := canonicalizer{in: data, out: make([]byte, 0, len(data))}
	c.skipSpace()
	if err := c.value(0); err != nil {
		return nil, err
	}
	c.skipSpace()
	if c.pos != len(c.in) {
		return nil, c.fail("bytes after the value")
	}
	return c.out, nil
}

func (c *canonicalizer) fail(what string) error {
	return fmt.Errorf("%w: %s at offset %d", ErrInvalidJSON, what, c.pos)
}

func (c *canonicalizer) skipSpace() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

// value reads one value at c.pos (white space skipped) whose container is
// nested depth deep.
func (c *canonicalizer) value(depth int) error {
	if c.pos == len(c.in) {
		return c.fail("unexpected end")
	}
	switch b := c.in[c.pos]; {
	case b == '{':
		if depth >= maxJSONDepth {
			return c.fail(fmt.Sprintf("nesting deeper than %d", maxJSONDepth))
		}
		return c.object(depth)
	case b == '[':
		if depth >= maxJSONDepth {
			return c.fail(fmt.Sprintf("nesting deeper than %d", maxJSONDepth))
		}
		return c.array(depth)
	case b == '"':
		return c.str(false)
	case b == 't':
		return c.literal("true")
	case b == 'f':
		return c.literal("false")
	case b == 'n':
		return c.literal("null")
	case b == '-' || ('0' <= b && b <= '9'):
		return c.number()
	}
	return c.fail("unexpected byte")
}

func (c *canonicalizer) literal(lit string) error {
	if !bytes.HasPrefix(c.in[c.pos:], []byte(lit)) {
		return c.fail("invalid literal")
	}
	c.pos += len(lit)
	c.out = append(c.out, lit...)
	return nil
}

// number copies a number literal (RFC 8259 §6) as it is.
func (c *canonicalizer) number() error {
	start := c.pos
	in := c.in
	i := c.pos
	if in[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(in) && '0' <= in[i] && in[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(in) && in[i] == '0':
		i++
	case i < len(in) && '1' <= in[i] && in[i] <= '9':
		digits()
	default:
		c.pos = i
		return c.fail("invalid number")
	}
	if i < len(in) && in[i] == '.' {
		i++
		if digits() == 0 {
			c.pos = i
			return c.fail("invalid number")
		}
	}
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		i++
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		if digits() == 0 {
			c.pos = i
			return c.fail("invalid number")
		}
	}
	c.pos = i
	c.out = append(c.out, in[start:i]...)
	return nil
}

func (c *canonicalizer) array(depth int) error {
	c.pos++ // [
	c.out = append(c.out, '[')
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == ']' {
		c.pos++
		c.out = append(c.out, ']')
		return nil
	}
	for {
		c.skipSpace()
		if err := c.value(depth + 1); err != nil {
			return err
		}
		c.skipSpace()
		if c.pos == len(c.in) {
			return c.fail("unexpected end")
		}
		switch c.in[c.pos] {
		case ',':
			c.pos++
			c.out = append(c.out, ',')
		case ']':
			c.pos++
			c.out = append(c.out, ']')
			return nil
		default:
			return c.fail("expected , or ]")
		}
	}
}

func (c *canonicalizer) object(depth int) error {
	c.pos++ // {
	c.out = append(c.out, '{')
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == '}' {
		c.pos++
		c.out = append(c.out, '}')
		return nil
	}
	base, keysBase, seg := len(c.mem), len(c.keys), len(c.out)
	for {
		c.skipSpace()
		if c.pos == len(c.in) || c.in[c.pos] != '"' {
			return c.fail("expected a member name")
		}
		m := member{key: uint32(len(c.keys)), start: uint32(len(c.out))}
		if err := c.str(true); err != nil {
			return err
		}
		m.keyEnd = uint32(len(c.keys))
		c.skipSpace()
		if c.pos == len(c.in) || c.in[c.pos] != ':' {
			return c.fail("expected :")
		}
		c.pos++
		c.out = append(c.out, ':')
		c.skipSpace()
		if err := c.value(depth + 1); err != nil {
			return err
		}
		m.end = uint32(len(c.out))
		c.mem = append(c.mem, m)
		c.skipSpace()
		if c.pos == len(c.in) {
			return c.fail("unexpected end")
		}
		if c.in[c.pos] == ',' {
			c.pos++
			c.out = append(c.out, ',')
			continue
		}
		if c.in[c.pos] != '}' {
			return c.fail("expected , or }")
		}
		c.pos++
		break
	}
	if err := c.order(base, seg); err != nil {
		return err
	}
	c.mem, c.keys = c.mem[:base], c.keys[:keysBase]
	c.out = append(c.out, '}')
	return nil
}

// order sorts the members c.mem[base:], written to c.out[seg:] with commas
// between them, by their decoded keys (as encoding/json sorts a map's
// keys), and refuses a duplicate key.
func (c *canonicalizer) order(base, seg int) error {
	ms := c.mem[base:]
	key := func(m member) []byte { return c.keys[m.key:m.keyEnd] }
	sorted := true
	for i := 1; i < len(ms); i++ {
		switch bytes.Compare(key(ms[i-1]), key(ms[i])) {
		case 0:
			return c.fail("duplicate object key")
		case 1:
			sorted = false
		}
	}
	if sorted {
		return nil
	}
	slices.SortFunc(ms, func(a, b member) int { return bytes.Compare(key(a), key(b)) })
	for i := 1; i < len(ms); i++ {
		if bytes.Equal(key(ms[i-1]), key(ms[i])) {
			return c.fail("duplicate object key")
		}
	}
	c.scratch = append(c.scratch[:0], c.out[seg:]...)
	c.out = c.out[:seg]
	for i, m := range ms {
		if i > 0 {
			c.out = append(c.out, ',')
		}
		c.out = append(c.out, c.scratch[int(m.start)-seg:int(m.end)-seg]...)
	}
	return nil
}

// str reads a string at c.pos and writes it as encoding/json writes the
// decoded string; key says to append the decoded string to c.keys too.
func (c *canonicalizer) str(key bool) error {
	c.pos++ // "
	c.out = append(c.out, '"')
	in := c.in
	for {
		// A run of bytes that stand for themselves in both forms.
		start := c.pos
		for c.pos < len(in) && plainByte(in[c.pos]) {
			c.pos++
		}
		c.out = append(c.out, in[start:c.pos]...)
		if key {
			c.keys = append(c.keys, in[start:c.pos]...)
		}
		if c.pos == len(in) {
			return c.fail("unterminated string")
		}
		switch b := in[c.pos]; {
		case b == '"':
			c.pos++
			c.out = append(c.out, '"')
			return nil
		case b == '\\':
			r, err := c.escape()
			if err != nil {
				return err
			}
			c.out = appendJSONRune(c.out, r)
			if key {
				c.keys = utf8.AppendRune(c.keys, r)
			}
		case b < 0x20:
			return c.fail("control character in a string")
		default: // b >= 0x80
			r, size := utf8.DecodeRune(in[c.pos:])
			if r == utf8.RuneError && size == 1 {
				return c.fail("invalid UTF-8")
			}
			if r == '\u2028' || r == '\u2029' {
				c.out = appendJSONRune(c.out, r)
			} else {
				c.out = append(c.out, in[c.pos:c.pos+size]...)
			}
			if key {
				c.keys = append(c.keys, in[c.pos:c.pos+size]...)
			}
			c.pos += size
		}
	}
}

// plainByte reports whether b is ASCII that encoding/json writes as it
// is and that needs no escape in JSON: not a control character, '"' or
// '\'.
func plainByte(b byte) bool {
	return b >= 0x20 && b < utf8.RuneSelf && b != '"' && b != '\\'
}

// escape reads the escape sequence at c.pos (the backslash) and returns
// the character it stands for; a \u escape that is half a surrogate pair
// must be followed by the other half.
func (c *canonicalizer) escape() (rune, error) {
	in := c.in
	if c.pos+1 >= len(in) {
		return 0, c.fail("unterminated string")
	}
	e := in[c.pos+1]
	c.pos += 2
	switch e {
	case '"', '\\', '/':
		return rune(e), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
	default:
		c.pos -= 2
		return 0, c.fail("invalid escape")
	}
	r, ok := hex4(in[c.pos:])
	if !ok {
		return 0, c.fail("invalid \\u escape")
	}
	c.pos += 4
	switch {
	case r < 0xd800 || r > 0xdfff:
		return r, nil
	case r >= 0xdc00:
		return 0, c.fail("lone low surrogate")
	}
	if c.pos+1 >= len(in) || in[c.pos] != '\\' || in[c.pos+1] != 'u' {
		return 0, c.fail("lone high surrogate")
	}
	lo, ok := hex4(in[c.pos+2:])
	if !ok || lo < 0xdc00 || lo > 0xdfff {
		return 0, c.fail("lone high surrogate")
	}
	c.pos += 6
	return 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00), nil
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

// appendJSONRune appends r as encoding/json writes it in a string.
func appendJSONRune(b []byte, r rune) []byte {
	const hex = "0123456789abcdef"
	switch {
	case r == '"' || r == '\\':
		return append(b, '\\', byte(r))
	case r == '\b':
		return append(b, '\\', 'b')
	case r == '\f':
		return append(b, '\\', 'f')
	case r == '\n':
		return append(b, '\\', 'n')
	case r == '\r':
		return append(b, '\\', 'r')
	case r == '\t':
		return append(b, '\\', 't')
	case r < 0x20:
		return append(b, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xf])
	case r == '\u2028' || r == '\u2029':
		return append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
	}
	return utf8.AppendRune(b, r)
}

// Reading the canonical form. Every function below takes a canonical
// document (no white space, no duplicate keys, strings as appendJSONRune
// writes them), so it trusts its syntax.

// canonicalPointer returns the span of the value that the RFC 6901
// pointer names in the canonical document doc, and false when it names
// nothing. Array indexes are read as earlier releases read them.
func canonicalPointer(doc []byte, pointer string) (start, end int, found bool, err error) {
	if pointer == "" {
		return 0, len(doc), true, nil
	}
	if pointer[0] != '/' {
		return 0, 0, false, &ConfigError{Field: "pointer", Reason: fmt.Sprintf("%q does not start with / (RFC 6901)", pointer)}
	}
	start, end = 0, len(doc)
	rest := pointer[1:]
	var tokBuf []byte
	for {
		tok := rest
		last := true
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			tok, rest, last = rest[:i], rest[i+1:], false
		}
		tokBuf = appendUnescapedToken(tokBuf[:0], tok)
		var ok bool
		switch doc[start] {
		case '{':
			start, end, ok = objectMember(doc, start, tokBuf)
		case '[':
			start, end, ok = arrayElement(doc, start, string(tokBuf))
		}
		if !ok {
			return 0, 0, false, nil
		}
		if last {
			return start, end, true, nil
		}
	}
}

// appendUnescapedToken appends a pointer token with ~1 as / and ~0 as ~.
func appendUnescapedToken(b []byte, tok string) []byte {
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

// objectMember finds the member named name in the object at doc[at].
func objectMember(doc []byte, at int, name []byte) (start, end int, ok bool) {
	i := at + 1
	var key []byte
	for doc[i] != '}' {
		kEnd := skipCanonical(doc, i)
		key = decodeCanonicalString(key[:0], doc[i:kEnd])
		vEnd := skipCanonical(doc, kEnd+1)
		if bytes.Equal(key, name) {
			return kEnd + 1, vEnd, true
		}
		i = vEnd
		if doc[i] == ',' {
			i++
		}
	}
	return 0, 0, false
}

// arrayElement finds element tok of the array at doc[at].
func arrayElement(doc []byte, at int, tok string) (start, end int, ok bool) {
	n, err := strconv.Atoi(tok)
	if err != nil || n < 0 || (len(tok) > 1 && tok[0] == '0') {
		return 0, 0, false
	}
	i := at + 1
	for k := 0; doc[i] != ']'; k++ {
		e := skipCanonical(doc, i)
		if k == n {
			return i, e, true
		}
		i = e
		if doc[i] == ',' {
			i++
		}
	}
	return 0, 0, false
}

// skipCanonical returns the end of the canonical value at doc[i].
func skipCanonical(doc []byte, i int) int {
	depth := 0
	for {
		switch doc[i] {
		case '"':
			i++
			for doc[i] != '"' {
				if doc[i] == '\\' {
					i++
				}
				i++
			}
			i++
		case '{', '[':
			depth++
			i++
		case '}', ']':
			depth--
			i++
		default:
			for i < len(doc) && doc[i] != ',' && doc[i] != ':' && doc[i] != ']' && doc[i] != '}' {
				i++
			}
		}
		if depth == 0 || i >= len(doc) {
			return i
		}
		if doc[i] == ',' || doc[i] == ':' {
			i++
		}
	}
}

// decodeCanonicalString appends the string that the canonical string s
// ("...", quotes included) stands for.
func decodeCanonicalString(b, s []byte) []byte {
	s = s[1 : len(s)-1]
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b = append(b, s[i])
			continue
		}
		i++
		switch s[i] {
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, _ := hex4(s[i+1:])
			b = utf8.AppendRune(b, r)
			i += 4
		default: // " and \
			b = append(b, s[i])
		}
	}
	return b
}
