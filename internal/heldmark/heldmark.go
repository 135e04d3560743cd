// Package heldmark recognises the held records of earlier releases. Until
// held became a state the stores keep (idem.StateHeld, set by Store.Hold),
// a held key was a completed record whose result carried a marker, and
// stores told held keys apart by those bytes. Records written that way may
// still be stored (until they expire), so the stores that cannot convert
// them once (redisstore has no migrations; sqlstore's migration 0003 does
// convert them) still read them as held through Legacy. No new code
// decides anything else by these bytes.
package heldmark

// The markers. A result is a legacy held mark when it is
//
//   - Exact: Do's outcome-unknown result (Options.AtMostOnce), which Do
//     still stores and recognises in a replay (idem.OutcomeUnknownResult;
//     the root package keeps its own copy, as it imports nothing), or
//   - begins with HTTPPrefix: httpidem's stored-response encoding,
//     version 1, with the flags byte set to "outcome unknown" and nothing
//     else (httpidem's tests check that its encoder writes it for exactly
//     those responses).
const (
	Exact      = "\x00idem/1 outcome-unknown"
	HTTPPrefix = "ih\x01\x02"
)

// Legacy reports whether result is a held mark as earlier releases wrote
// it (see the package documentation).
func Legacy(result []byte) bool {
	return string(result) == Exact || (len(result) >= len(HTTPPrefix) && string(result[:len(HTTPPrefix)]) == HTTPPrefix)
}
