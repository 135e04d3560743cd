package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"io"
)

// Fingerprint identifies the content of a request, so that a key reused with
// a different request is answered with a mismatch instead of somebody else's
// result. The zero Fingerprint means "no fingerprint"; two zero fingerprints
// match.
type Fingerprint [32]byte

// String returns the fingerprint in lower-case hex.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// IsZero reports whether f is the zero Fingerprint.
func (f Fingerprint) IsZero() bool { return f == Fingerprint{} }

// FingerprintOf hashes parts with SHA-256, each part prefixed by its length,
// so that no two different part lists hash the same input.
func FingerprintOf(parts ...[]byte) Fingerprint {
	const tag = "idem/fp/v1\x00"
	size := len(tag)
	for _, p := range parts {
		size += binary.MaxVarintLen64 + len(p)
	}
	if size <= smallInput {
		var buf [smallInput]byte
		b := append(buf[:0], tag...)
		for _, p := range parts {
			b = appendPart(b, p)
		}
		return sha256.Sum256(b)
	}
	h := sha256.New()
	io.WriteString(h, tag)
	for _, p := range parts {
		writePart(h, p)
	}
	return sumOf(h)
}

// RequestFingerprint hashes the parts of an HTTP-like request that decide
// what it does: method, path, raw query and body.
func RequestFingerprint(method, path, rawQuery string, body []byte) Fingerprint {
	const tag = "idem/req/v1\x00"
	if len(tag)+len(method)+len(path)+len(rawQuery)+len(body)+4*binary.MaxVarintLen64 <= smallInput {
		var buf [smallInput]byte
		b := append(buf[:0], tag...)
		b = appendPart(b, method)
		b = appendPart(b, path)
		b = appendPart(b, rawQuery)
		b = appendPart(b, body)
		return sha256.Sum256(b)
	}
	h := sha256.New()
	io.WriteString(h, tag)
	writePart(h, method)
	writePart(h, path)
	writePart(h, rawQuery)
	writePart(h, body)
	return sumOf(h)
}

// RequestFingerprintJSON is RequestFingerprint over the canonical form of a
// JSON body (see CanonicalJSON), so that key order and insignificant white
// space do not count as a different request. An empty body is fingerprinted
// as empty; a body that is not valid JSON is an error.
func RequestFingerprintJSON(method, path, rawQuery string, body []byte) (Fingerprint, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return RequestFingerprint(method, path, rawQuery, nil), nil
	}
	canon, err := CanonicalJSON(body)
	if err != nil {
		return Fingerprint{}, err
	}
	return RequestFingerprint(method, path, rawQuery, canon), nil
}

// smallInput is the size up to which a fingerprint's input is assembled in
// a stack buffer and hashed without allocating; larger inputs stream.
const smallInput = 1024

func appendPart[T string | []byte](b []byte, p T) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func writePart[T string | []byte](h hash.Hash, p T) {
	h.Write(binary.AppendUvarint(nil, uint64(len(p))))
	switch v := any(p).(type) {
	case string:
		io.WriteString(h, v)
	case []byte:
		h.Write(v)
	}
}

func sumOf(h hash.Hash) Fingerprint {
	var f Fingerprint
	h.Sum(f[:0])
	return f
}

// ErrInvalidJSON is returned by CanonicalJSON for input that is not exactly
// one valid JSON value.
var ErrInvalidJSON = errors.New("idem: body is not valid JSON")

// CanonicalJSON re-encodes one JSON value with object keys sorted, no
// insignificant white space and no HTML escaping. Numbers keep their literal
// text (1 and 1.0 stay different: the client sent different bytes and a
// server may read them differently). The input must be exactly one JSON
// value (RFC 8259) in valid UTF-8: trailing bytes, invalid UTF-8, a \u
// escape that is a lone surrogate, a duplicate object key (parsers disagree
// on which one wins) and nesting deeper than 10000 arrays and objects are
// refused with ErrInvalidJSON, so that two bodies a server may read
// differently never share a canonical form.
//
// It reads the input once and needs about twice its size in memory (the
// output, never longer than the input, and the keys of the objects being
// read).
func CanonicalJSON(data []byte) ([]byte, error) {
	return canonicalize(data)
}
