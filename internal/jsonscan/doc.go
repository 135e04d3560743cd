// Package jsonscan reads JSON documents for idem without decoding them
// into values: the one place that knows JSON's syntax, its strings and
// their escapes.
//
// Canonicalize validates a document strictly and writes its canonical
// form in one pass (the root's CanonicalJSON, RequestFingerprintJSON,
// KeyFromJSON and FingerprintJSONPointers). Find locates the value at an
// RFC 6901 pointer: exactly in a canonical document, and leniently in one
// that Canonicalize refused (httpidem uses that to tell a body that names
// an idempotency key, and so must not run unprotected, from one that does
// not). Both read strings and escapes with the same code.
//
// It needs only the standard library, as the root package does.
package jsonscan
