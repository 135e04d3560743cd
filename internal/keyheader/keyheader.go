// Package keyheader parses and formats the value of an Idempotency-Key
// header (an RFC 8941 sf-string, or a bare token): the one parser httpidem,
// idem proxy and connectidem share.
package keyheader

import (
	"fmt"
	"strings"

	"github.com/idemkit/idem"
)

// Parse returns the key an Idempotency-Key header value names.
//
// The value is an RFC 8941 sf-string ("…", where \" and \\ are the only
// escapes); a bare value (no quotes) is accepted too and names the same key:
// "abc" and abc are one key. Either way the key must be 1 to 255 visible
// ASCII characters (0x21–0x7E). A bare value must not contain '"', ',', ';'
// or '\', which would make it look like a list, parameters or a broken
// string; parameters after a quoted string ("abc";x=1) are rejected rather
// than ignored, so that two headers that differ never name the same key by
// accident. Leading and trailing spaces and tabs are ignored.
//
// Errors are *idem.KeyError values (errors.Is idem.ErrInvalidKey); their text
// never repeats the key.
func Parse(value string) (string, error) {
	v := strings.Trim(value, " \t")
	if v == "" {
		return "", &idem.KeyError{Reason: "key is empty"}
	}
	if v[0] != '"' {
		if idem.ValidateID(v) == nil && strings.IndexByte(v, ',') < 0 && strings.IndexByte(v, ';') < 0 &&
			strings.IndexByte(v, '\\') < 0 && strings.IndexByte(v, '"') < 0 {
			return v, nil // the common key: valid, and nothing to report
		}
		for i := 0; i < len(v); i++ {
			switch c := v[i]; {
			case c < 0x21 || c > 0x7e:
				return "", &idem.KeyError{Reason: fmt.Sprintf("key has a byte 0x%02x at offset %d; only visible ASCII (0x21-0x7e) is allowed", c, i)}
			case c == '"' || c == ',' || c == ';' || c == '\\':
				return "", &idem.KeyError{Reason: fmt.Sprintf("an unquoted key must not contain %q (offset %d); send it as an sf-string: \"...\"", c, i)}
			}
		}
		if err := idem.ValidateID(v); err != nil {
			return "", err
		}
		return v, nil
	}
	// sf-string: DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE
	var b []byte // nil until the first escape: most keys have none
	start := 1
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			if i+1 == len(v) {
				return "", &idem.KeyError{Reason: "unterminated sf-string"}
			}
			if n := v[i+1]; n != '"' && n != '\\' {
				return "", &idem.KeyError{Reason: fmt.Sprintf("invalid escape \\%c at offset %d (only \\\" and \\\\ are allowed)", n, i)}
			}
			if b == nil {
				b = make([]byte, 0, len(v))
			}
			b = append(b, v[start:i]...)
			start = i + 1 // keep the escaped byte
			i++
		case c == '"':
			if i != len(v)-1 {
				return "", &idem.KeyError{Reason: fmt.Sprintf("unexpected %q after the sf-string at offset %d (parameters and lists are not accepted)", v[i+1], i+1)}
			}
			id := v[start:i]
			if b != nil {
				id = string(append(b, id...))
			}
			if err := idem.ValidateID(id); err != nil {
				return "", err
			}
			return id, nil
		case c < 0x20 || c > 0x7e:
			return "", &idem.KeyError{Reason: fmt.Sprintf("byte 0x%02x at offset %d is not allowed in an sf-string", c, i)}
		}
	}
	return "", &idem.KeyError{Reason: "unterminated sf-string"}
}

// Format returns the canonical header value of the key id: the RFC 8941
// sf-string ("…", with \ and " escaped). Parse(Format(id)) == id, and
// every spelling Parse accepts for id formats to this one value, so a
// service behind idem proxy sees one spelling per key.
func Format(id string) string {
	n := 2 + len(id)
	for i := 0; i < len(id); i++ {
		if id[i] == '"' || id[i] == '\\' {
			n++
		}
	}
	b := make([]byte, 0, n)
	b = append(b, '"')
	for i := 0; i < len(id); i++ {
		if c := id[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, id[i])
	}
	return string(append(b, '"'))
}
