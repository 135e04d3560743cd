// Package lenprefix is the one length-prefixed binary format of the
// records idem writes for HTTP responses (httpidem) and RPC answers
// (internal/rpcidem): uvarint lengths and counts, each followed by its
// bytes. The encoders append with AppendBytes; Decoder reads them back
// strictly, accepting only what the encoders write (minimal varints, no
// length or count past the end), so that a damaged or foreign record is an
// error and never a panic or a huge allocation.
package lenprefix

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// ErrMalformed is wrapped by every error of a Decoder.
var ErrMalformed = errors.New("malformed record")

// AppendBytes appends the uvarint length of s, then s.
func AppendBytes[S ~string | ~[]byte](b []byte, s S) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Decoder reads a record. B is what is left of it; the first failure is
// kept in Err, and every later read returns zero values.
type Decoder struct {
	B   []byte
	Err error
}

// Uvarint reads a minimally encoded uvarint.
func (d *Decoder) Uvarint() uint64 {
	if d.Err == nil && len(d.B) > 0 && d.B[0] < 0x80 { // one byte: inlined
		v := d.B[0]
		d.B = d.B[1:]
		return uint64(v)
	}
	return d.uvarint()
}

func (d *Decoder) uvarint() uint64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.B)
	if n <= 0 {
		d.Err = fmt.Errorf("%w: truncated or overlong varint", ErrMalformed)
		return 0
	}
	if n != uvarintLen(v) {
		d.Err = fmt.Errorf("%w: non-minimal varint", ErrMalformed)
		return 0
	}
	d.B = d.B[n:]
	return v
}

// uvarintLen is the length of v's minimal uvarint encoding.
func uvarintLen(v uint64) int {
	if v == 0 {
		return 1
	}
	return (bits.Len64(v) + 6) / 7
}

// Count reads a count of items that take at least one byte each, so it
// can never exceed what is left.
func (d *Decoder) Count() int {
	v := d.Uvarint()
	if d.Err == nil && v > uint64(len(d.B)) {
		d.Err = fmt.Errorf("%w: count %d exceeds the remaining %d bytes", ErrMalformed, v, len(d.B))
		return 0
	}
	return int(v)
}

// Bytes reads a length-prefixed byte string. The result aliases the record
// and has no spare capacity.
func (d *Decoder) Bytes() []byte {
	n := d.Uvarint()
	if d.Err != nil {
		return nil
	}
	if n > uint64(len(d.B)) {
		d.Err = fmt.Errorf("%w: length %d exceeds the remaining %d bytes", ErrMalformed, n, len(d.B))
		return nil
	}
	v := d.B[:n:n]
	d.B = d.B[n:]
	return v
}
