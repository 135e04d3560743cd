package httpidem

import "github.com/idemkit/idem/internal/jsonscan"

// bodyNamesKey reports whether a body that idem.KeyFromJSON refused as not
// JSON still has a value at the pointer when read leniently
// (jsonscan.Find): duplicate members (the first of them, and any later
// one, count), invalid UTF-8 and lone surrogates in strings, nesting
// deeper than the strict limit, and anything after the first value or
// after the key are all tolerated. The middleware refuses such a body
// with 400 body-not-json whatever RequireKey says: its client sent a key,
// and the request must never run unprotected because the body is odd. A
// body that breaks off before the key is found (a form body,
// "{"request_id" without a value, a syntax error earlier in the document)
// carries no key.
func bodyNamesKey(body []byte, pointer string) bool {
	if pointer == "" || pointer[0] != '/' {
		return false
	}
	_, _, found := jsonscan.Find(body, pointer)
	return found
}
