package idem

// FingerprintJSONPointers fingerprints only the parts of a JSON body that
// the RFC 6901 pointers name ("/amount", "/items/0/sku"), so that fields a
// client may change between retries (a timestamp, a trace id) do not make a
// retry a different request. Each selected value counts in its canonical
// form (see CanonicalJSON, which also says which bodies are refused with
// ErrInvalidJSON), and a pointer that names nothing counts as
// absent, which differs from null. The pointers, in the order given, are
// part of the fingerprint too. prefix (for example the method and path)
// goes in first.
//
// Choose the pointers with care: a field left out is a field a retry may
// change without being refused, and the stored result of the first request
// is replayed for it.
func FingerprintJSONPointers(body []byte, prefix string, pointers ...string) (Fingerprint, error) {
	if len(pointers) == 0 {
		return Fingerprint{}, &ConfigError{Field: "pointers", Reason: "empty: FingerprintJSONPointers needs at least one pointer"}
	}
	canon, err := canonicalize(body)
	if err != nil {
		return Fingerprint{}, err
	}
	parts := make([][]byte, 0, 1+2*len(pointers))
	parts = append(parts, []byte(prefix))
	for _, p := range pointers {
		start, end, found, err := canonicalPointer(canon, p)
		if err != nil {
			return Fingerprint{}, err
		}
		parts = append(parts, []byte(p))
		if !found {
			parts = append(parts, nil) // absent: an empty part, which no JSON value encodes to
			continue
		}
		// The canonical form of a value inside a canonical document is
		// the value's own canonical form.
		parts = append(parts, canon[start:end])
	}
	return FingerprintOf(parts...), nil
}
