package httpidem

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/http"
	"net/textproto"
)

// ErrScopeRequired is what a ScopeFunc returns (or wraps) for a request
// that carries no caller identity. The middleware answers 400
// scope-required and nothing reaches the handler. An empty scope from a
// ScopeFunc means the same unless Config.SharedAnonymousScope is set.
var ErrScopeRequired = errors.New("httpidem: the request carries no caller identity")

// ScopeFunc returns the scope of a request: what the server knows about the
// caller (tenant, principal, API-key hash), so that one caller's key never
// replays another caller's response. The empty scope means "anonymous":
// such a request is refused with 400 scope-required unless
// Config.SharedAnonymousScope puts every anonymous caller in one shared
// keyspace. An error wrapping ErrScopeRequired answers 400 scope-required;
// any other error answers 400 scope-rejected and is logged, not sent. The
// scope may be at most idem.MaxScopeLen bytes; it is hashed with the key and
// never stored in the clear.
//
// A replay never reaches the service's own authentication: the scope must
// identify the caller as surely as that authentication would. A refreshed
// token is a new scope; to scope by principal, let a gateway set a header
// (and strip clients' copies of it) or compute the principal in a ScopeFunc.
type ScopeFunc func(r *http.Request) (string, error)

// HeaderScope returns a ScopeFunc that hashes the values of the named
// request headers, all together (every line of each, in order). A request
// that carries none of them is anonymous (the empty scope).
//
// Values are compared after normalisation: leading and trailing white space
// is ignored, and for Authorization and Proxy-Authorization the auth scheme
// is compared case-insensitively and runs of spaces and tabs count as one
// space (RFC 9110 §11.1), so "Bearer t" and "bearer  t" are one caller. The
// credentials themselves stay case-sensitive.
func HeaderScope(names ...string) ScopeFunc {
	canon := make([]string, len(names))
	auth := make([]bool, len(names))
	for i, n := range names {
		canon[i] = textproto.CanonicalMIMEHeaderKey(n)
		auth[i] = canon[i] == "Authorization" || canon[i] == "Proxy-Authorization"
	}
	return func(r *http.Request) (string, error) {
		// Length-prefixed values, hashed in one call: a stack buffer
		// serves the common single short header.
		var stack [256]byte
		buf := stack[:0]
		present := false
		for i, name := range canon {
			vs := r.Header[name]
			present = present || len(vs) > 0
			buf = binary.AppendUvarint(buf, uint64(len(vs)))
			for _, v := range vs {
				if auth[i] {
					buf = appendCredentials(buf, v)
				} else {
					v = trimOWS(v)
					buf = binary.AppendUvarint(buf, uint64(len(v)))
					buf = append(buf, v...)
				}
			}
		}
		if !present {
			return "", nil
		}
		sum := sha256.Sum256(buf)
		var out [3 + 2*sha256.Size]byte
		copy(out[:], "h1:")
		hex.Encode(out[3:], sum[:])
		return string(out[:]), nil
	}
}

// appendCredentials appends the normalised form of an Authorization value,
// length-prefixed: the scheme in lower case, then the rest with every run
// of spaces and tabs as one space, without leading or trailing white space.
func appendCredentials(buf []byte, v string) []byte {
	v = trimOWS(v)
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

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
