package idem

import (
	"fmt"

	"github.com/idemkit/idem/internal/jsonscan"
)

// The JSON readers behind CanonicalJSON, RequestFingerprintJSON,
// KeyFromJSON and FingerprintJSONPointers live in internal/jsonscan, which
// httpidem's lenient key lookup shares; this file turns its answers into
// the root's errors.

// canonicalize returns the canonical form of data (see CanonicalJSON), or
// an error wrapping ErrInvalidJSON.
func canonicalize(data []byte) ([]byte, error) {
	canon, err := jsonscan.Canonicalize(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	return canon, nil
}

// canonicalPointer returns the span of the value that the RFC 6901
// pointer names in the canonical document doc, and false when it names
// nothing; a pointer that is neither "" nor starts with '/' is a
// *ConfigError.
func canonicalPointer(doc []byte, pointer string) (start, end int, found bool, err error) {
	if pointer != "" && pointer[0] != '/' {
		return 0, 0, false, &ConfigError{Field: "pointer", Reason: fmt.Sprintf("%q does not start with / (RFC 6901)", pointer)}
	}
	start, end, found = jsonscan.Find(doc, pointer)
	return start, end, found, nil
}
