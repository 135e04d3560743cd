package idem

import (
	"errors"
	"fmt"

	"github.com/idemkit/idem/internal/jsonscan"
)

// ErrKeyNotFound is returned (wrapped) by KeyFromJSON when the pointer
// names nothing in the payload.
var ErrKeyNotFound = errors.New("idem: no key at the JSON pointer")

// KeyFromJSON returns the key in scope whose id is the value that the RFC
// 6901 pointer names in the JSON payload: a string as it is, or a number
// by its literal text (12 and 12.0 are two ids). This is for requests that
// carry their own idempotency key, as AIP-155's request_id does:
//
//	key, err := idem.KeyFromJSON(tenant, body, "/request_id")
//
// The id is validated as NewKey does. Pair it with FingerprintJSONPointers
// over the fields that define the operation (and not the key's own field,
// which is the same on every retry anyway), so that a retry with the same
// request_id and another amount is refused with ErrMismatch:
//
//	fp, err := idem.FingerprintJSONPointers(body, "transfer", "/amount", "/to")
//	res, err := idem.Do(ctx, store, key, &idem.Options{Fingerprint: fp}, fn)
//
// Errors: a payload that CanonicalJSON refuses (not exactly one JSON value
// in valid UTF-8, a duplicate key, ...) wraps ErrInvalidJSON; a pointer that names nothing wraps ErrKeyNotFound; a
// value that is neither a string nor a number, or that is not a valid id,
// is a *KeyError (errors.Is ErrInvalidKey). No error repeats the value.
func KeyFromJSON(scope string, payload []byte, pointer string) (Key, error) {
	canon, err := canonicalize(payload)
	if err != nil {
		return Key{}, err
	}
	start, end, found, err := canonicalPointer(canon, pointer)
	if err != nil {
		return Key{}, err
	}
	if !found {
		return Key{}, fmt.Errorf("%w %q", ErrKeyNotFound, pointer)
	}
	var id string
	switch v := canon[start:end]; v[0] {
	case '"':
		id = string(jsonscan.DecodeString(nil, v))
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		id = string(v)
	default:
		return Key{}, &KeyError{Reason: fmt.Sprintf("the value at JSON pointer %q is %s; want a string or a number", pointer, jsonKind(v[0]))}
	}
	if err := ValidateID(id); err != nil {
		var ke *KeyError
		if errors.As(err, &ke) {
			err = &KeyError{Reason: fmt.Sprintf("the value at JSON pointer %q: %s", pointer, ke.Reason)}
		}
		return Key{}, err
	}
	return NewKey(scope, id)
}

// jsonKind names the kind of the canonical JSON value that starts with b.
func jsonKind(b byte) string {
	switch b {
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	case '{':
		return "an object"
	}
	return "an array"
}
