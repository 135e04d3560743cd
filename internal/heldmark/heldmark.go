// Package heldmark says which stored results mark a key as held: its
// operation may have had its effects, but its result is unknown, and the
// key waits for a person or the service to resolve it.
//
// Two writers hold keys, and records they wrote in earlier releases stay
// readable, so a result is held when it is either
//
//   - Exact: idem.Do's outcome-unknown marker (Options.AtMostOnce), or
//   - begins with HTTPPrefix: httpidem's stored-response encoding, version
//     1, with the flags byte set to "outcome unknown" and nothing else.
//
// The stores (memstore, sqlstore, redisstore) compare results with these
// bytes in the same atomic step as a resolve, and report such records as
// idem.StateHeld. httpidem's tests check that its encoder still writes
// HTTPPrefix for exactly its outcome-unknown responses.
package heldmark

// Exact is idem.Do's outcome-unknown result.
const Exact = "\x00idem/1 outcome-unknown"

// HTTPPrefix is how httpidem's encoding of an outcome-unknown response
// begins: magic "ih", version 1, flags 0x02.
const HTTPPrefix = "ih\x01\x02"

// Is reports whether result marks a held key.
func Is(result []byte) bool {
	return string(result) == Exact || (len(result) >= len(HTTPPrefix) && string(result[:len(HTTPPrefix)]) == HTTPPrefix)
}
