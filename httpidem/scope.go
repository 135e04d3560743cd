package httpidem

import (
	"errors"
	"net/http"
	"net/textproto"

	"github.com/idemkit/idem/internal/scopehash"
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
// that carries none of them, or only empty or white-space-only values
// ("Authorization:" with nothing after it), is anonymous (the empty
// scope): an empty value is no identity, and counts as absent.
//
// Values are compared after normalisation: leading and trailing white space
// is ignored, and for Authorization and Proxy-Authorization the auth scheme
// is compared case-insensitively and runs of spaces and tabs count as one
// space (RFC 9110 §11.1), so "Bearer t" and "bearer  t" are one caller. The
// credentials themselves stay case-sensitive, and a value with no space or
// tab (no scheme: "SK_live_AbC") is a credential compared byte for byte.
func HeaderScope(names ...string) ScopeFunc {
	canon := make([]string, len(names))
	auth := make([]bool, len(names))
	for i, n := range names {
		canon[i] = textproto.CanonicalMIMEHeaderKey(n)
		auth[i] = scopehash.IsCredentials(canon[i])
	}
	return func(r *http.Request) (string, error) {
		// Length-prefixed values, hashed in one call: a stack buffer
		// serves the common single short header.
		var stack [256]byte
		buf := stack[:0]
		present := false
		for i, name := range canon {
			vs := r.Header[name]
			var ok bool
			buf, ok = scopehash.AppendValues(buf, vs, auth[i])
			present = present || ok
		}
		if !present {
			return "", nil
		}
		return scopehash.Sum("h1:", buf), nil
	}
}
