package jsonscan

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of arrays and objects that Canonicalize
// accepts (as encoding/json's Unmarshal): a deeper document is refused
// rather than decoded by a recursion that a 10 MiB body of '[' would take
// past the goroutine stack limit, which kills the process.
const MaxDepth = 10000

// SyntaxError is why Canonicalize refused its input: what is wrong, and
// the offset in the input where it was found (-1: the input as a whole).
type SyntaxError struct {
	What   string
	Offset int
}

func (e *SyntaxError) Error() string {
	if e.Offset < 0 {
		return e.What
	}
	return fmt.Sprintf("%s at offset %d", e.What, e.Offset)
}

// The canonical JSON form, in one pass over the input.
//
// Canonicalize validates a document strictly and writes its canonical form
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
// Refused, with a *SyntaxError:
//   - anything but exactly one value, with optional white space around it
//     (trailing bytes: {"a":1}} or {"a":1},{"b":2});
//   - invalid UTF-8 anywhere, and \u escapes that are lone surrogates
//     ("\ud800", "\udc00", "\ud800\u0041"): encoding/json turns both into
//     U+FFFD, so "Ren\xe9", "Ren\xe8" and "Ren\ufffd" would be one request;
//   - duplicate object keys, compared after decoding ("a" and "\u0061");
//   - nesting deeper than MaxDepth;
//   - everything RFC 8259 does not allow (control characters in strings,
//     leading zeros, a trailing comma, ...).

// canonicalizer holds the state of one Canonicalize call.
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

// Canonicalize returns the canonical form of data (see the package
// documentation), or a *SyntaxError.
func Canonicalize(data []byte) ([]byte, error) {
	if len(data) > math.MaxUint32 {
		return nil, &SyntaxError{What: "larger than 4 GiB", Offset: -1}
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
	return &SyntaxError{What: what, Offset: c.pos}
}

func (c *canonicalizer) skipSpace() { c.pos = skipSpace(c.in, c.pos) }

// value reads one value at c.pos (white space skipped) whose container is
// nested depth deep.
func (c *canonicalizer) value(depth int) error {
	if c.pos == len(c.in) {
		return c.fail("unexpected end")
	}
	switch b := c.in[c.pos]; {
	case b == '{':
		if depth >= MaxDepth {
			return c.fail(fmt.Sprintf("nesting deeper than %d", MaxDepth))
		}
		return c.object(depth)
	case b == '[':
		if depth >= MaxDepth {
			return c.fail(fmt.Sprintf("nesting deeper than %d", MaxDepth))
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
			r, next, p := escape(in, c.pos)
			c.pos = next
			if p != escOK {
				return c.fail(p.String())
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
