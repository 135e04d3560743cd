package idem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// FingerprintJSONPointers fingerprints only the parts of a JSON body that
// the RFC 6901 pointers name ("/amount", "/items/0/sku"), so that fields a
// client may change between retries (a timestamp, a trace id) do not make a
// retry a different request. Each selected value counts in its canonical
// form (see CanonicalJSON), and a pointer that names nothing counts as
// absent, which differs from null. The pointers, in the order given, are
// part of the fingerprint too. prefix (for example the method and path)
// goes in first.
//
// Choose the pointers with care: a field left out is a field a retry may
// change without being refused, and the stored result of the first request
// is replayed for it.
func FingerprintJSONPointers(body []byte, prefix string, pointers ...string) (Fingerprint, error) {
	if len(pointers) == 0 {
		return Fingerprint{}, fmt.Errorf("idem: FingerprintJSONPointers needs at least one pointer")
	}
	doc, err := decodeDocument(body)
	if err != nil {
		return Fingerprint{}, err
	}
	parts := make([][]byte, 0, 1+2*len(pointers))
	parts = append(parts, []byte(prefix))
	for _, p := range pointers {
		v, found, err := lookupPointer(doc, p)
		if err != nil {
			return Fingerprint{}, err
		}
		parts = append(parts, []byte(p))
		if !found {
			parts = append(parts, nil) // absent: an empty part, which no JSON value encodes to
			continue
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return Fingerprint{}, fmt.Errorf("%w: %w", ErrInvalidJSON, err)
		}
		parts = append(parts, bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	}
	return FingerprintOf(parts...), nil
}

// decodeDocument decodes exactly one JSON value, numbers as json.Number,
// refusing duplicate object keys. Its errors wrap ErrInvalidJSON.
func decodeDocument(body []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	doc, err := decodeStrict(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidJSON, err)
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("%w: more than one value", ErrInvalidJSON)
	}
	return doc, nil
}

// lookupPointer resolves an RFC 6901 pointer in a decoded document.
func lookupPointer(doc any, pointer string) (any, bool, error) {
	if pointer == "" {
		return doc, true, nil
	}
	if !strings.HasPrefix(pointer, "/") {
		return nil, false, fmt.Errorf("idem: JSON pointer %q must start with /", pointer)
	}
	cur := doc
	for _, tok := range strings.Split(pointer[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false, nil
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) || (len(tok) > 1 && tok[0] == '0') {
				return nil, false, nil
			}
			cur = c[i]
		default:
			return nil, false, nil
		}
	}
	return cur, true, nil
}
