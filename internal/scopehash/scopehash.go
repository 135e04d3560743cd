package scopehash

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
)

// IsCredentials reports whether values of the header or metadata entry
// name are credentials (Authorization or Proxy-Authorization, in any case).
func IsCredentials(name string) bool {
	return strings.EqualFold(name, "Authorization") || strings.EqualFold(name, "Proxy-Authorization")
}

// AppendValues appends the count of the values in vs that are not empty
// (after white space is trimmed), then each of them, normalised and
// length-prefixed; credentials says whether they are credentials. It
// reports whether there was any: an empty or white-space-only value is no
// identity, so it counts as absent (a request whose values are all empty
// is anonymous), and the digest of values without an empty one is what it
// always was.
func AppendValues(buf []byte, vs []string, credentials bool) ([]byte, bool) {
	n := 0
	for _, v := range vs {
		if trimOWS(v) != "" {
			n++
		}
	}
	buf = binary.AppendUvarint(buf, uint64(n))
	for _, v := range vs {
		v = trimOWS(v)
		switch {
		case v == "":
		case credentials:
			buf = appendCredentials(buf, v)
		default:
			buf = binary.AppendUvarint(buf, uint64(len(v)))
			buf = append(buf, v...)
		}
	}
	return buf, n > 0
}

// MaxPrefix is the longest prefix Sum takes.
const MaxPrefix = 8

// Sum returns prefix (a version tag such as "h1:", at most MaxPrefix
// bytes) followed by the hex SHA-256 of buf.
func Sum(prefix string, buf []byte) string {
	sum := sha256.Sum256(buf)
	var out [MaxPrefix + 2*sha256.Size]byte
	n := copy(out[:MaxPrefix], prefix)
	hex.Encode(out[n:], sum[:])
	return string(out[:n+2*sha256.Size])
}

// appendCredentials appends the normalised form of an Authorization value
// v (trimmed, not empty), length-prefixed: the scheme in lower case, then
// the rest with every run of spaces and tabs as one space. A value without
// a space or tab has no scheme to fold (RFC 9110 §11.1: auth-scheme
// [ 1*SP credentials ]); it is a bare credential, kept byte for byte.
func appendCredentials(buf []byte, v string) []byte {
	if !strings.ContainsAny(v, " \t") {
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		return append(buf, v...)
	}
	// The normalised form is never longer than v: reserve its length
	// prefix, fill, then fix the prefix.
	start := len(buf)
	buf = binary.AppendUvarint(buf, uint64(len(v)))
	body := len(buf)
	scheme := true
	space := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == ' ' || c == '\t' {
			space = true
			scheme = false
			continue
		}
		if space {
			buf = append(buf, ' ')
			space = false
		}
		if scheme && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf = append(buf, c)
	}
	n := len(buf) - body
	if n == len(v) {
		return buf
	}
	// Shorter: rewrite the prefix (it may be shorter too) and move the
	// bytes down.
	var pre [binary.MaxVarintLen64]byte
	pl := binary.PutUvarint(pre[:], uint64(n))
	copy(buf[start:], pre[:pl])
	copy(buf[start+pl:], buf[body:])
	return buf[:start+pl+n]
}

// trimOWS removes leading and trailing spaces and tabs.
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
