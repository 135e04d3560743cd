package httpidem

import "github.com/idemkit/idem/internal/keyheader"

// ParseKey returns the key an Idempotency-Key header value names.
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
func ParseKey(value string) (string, error) { return keyheader.Parse(value) }

// FormatKey returns the canonical header value of the key id: the RFC 8941
// sf-string ("…", with \ and " escaped). ParseKey(FormatKey(id)) == id, and
// every spelling ParseKey accepts for id formats to this one value, so a
// service behind idem proxy sees one spelling per key.
func FormatKey(id string) string { return keyheader.Format(id) }
