package httpidem

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unsafe"

	"github.com/idemkit/idem/internal/lenprefix"
)

// storedResponse is what a completed record holds: the response the first
// request produced, or, when it could not be kept, a marker that says the
// operation completed with Status and must not run again.
type storedResponse struct {
	Status int
	Header http.Header
	Body   []byte
	// NotReplayable marks a response that was streamed or too large to
	// store: Status and Header are kept, Body is empty.
	NotReplayable bool
	// OutcomeUnknown marks the middleware's own outcome-unknown problem,
	// stored in hold mode: the operation may or may not have run. It is
	// replayed like any response; tools (idem keys) list such keys for an
	// operator to resolve.
	OutcomeUnknown bool

	// inW: Header is the ResponseWriter's own map (recorder.shared), so
	// sending it copies nothing. Never stored.
	inW bool
}

// The stored-response encoding, version 1:
//
//	magic       "ih"
//	version     0x01
//	flags       1 byte; bit 0: not replayable; bit 1: outcome unknown (the
//	            body is the middleware's outcome-unknown problem); other
//	            bits zero
//	status      uvarint, 100..999
//	headers     uvarint count, then per header, in ascending name order:
//	              name   uvarint length + bytes (an RFC 9110 token)
//	              values uvarint count, then per value uvarint length + bytes
//	                     (no CR, LF or NUL)
//	body        uvarint length + bytes
//
// and nothing after. A later release that changes the layout writes another
// version byte and keeps decoding this one. The decoder accepts exactly what
// the encoder writes (encode(decode(b)) == b), which is what the fuzz test
// checks.
const (
	encMagic0  = 'i'
	encMagic1  = 'h'
	encVersion = 1

	flagNotReplayable  = 1 << 0
	flagOutcomeUnknown = 1 << 1
)

var errDecode = errors.New("httpidem: stored response")

// encodeResponse returns the version-1 encoding of r.
func encodeResponse(r *storedResponse) []byte {
	var small [16]string // most responses: the names stay on the stack
	names := small[:0]
	size := 16 + len(r.Body)
	for k, vs := range r.Header {
		names = append(names, k)
		size += len(k) + 2*binary.MaxVarintLen16
		for _, v := range vs {
			size += len(v) + binary.MaxVarintLen16
		}
	}
	slices.Sort(names)
	b := make([]byte, 0, size)
	var flags byte
	if r.NotReplayable {
		flags |= flagNotReplayable
	}
	if r.OutcomeUnknown {
		flags |= flagOutcomeUnknown
	}
	b = append(b, encMagic0, encMagic1, encVersion, flags)
	b = binary.AppendUvarint(b, uint64(r.Status))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, k := range names {
		b = lenprefix.AppendBytes(b, k)
		vs := r.Header[k]
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = lenprefix.AppendBytes(b, v)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(r.Body)))
	return append(b, r.Body...)
}

// decodeResponse parses an encoding written by encodeResponse (any version
// this release knows). It never panics and rejects anything the encoder
// would not have written, including header names and values that could
// split a response.
func decodeResponse(data []byte) (*storedResponse, error) {
	r, err := decodeResponseTo(data, nil)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// decodeResponseTo is decodeResponse that, when dst is not nil and the
// record is replayable, puts the headers into dst (the response about to
// be replayed) instead of a new map; the result's Header is then dst. The
// whole record is validated before dst is touched, so a record that fails
// to decode leaves dst as it was.
//
// The header names and values are substrings of one string and their
// value lists share one array: a replay costs a few allocations, not
// three per header.
func decodeResponseTo(data []byte, dst http.Header) (storedResponse, error) {
	return decodeResponseInto(data, dst, false)
}

// decodeResponseAlias is decodeResponseTo whose header names and values
// alias data (no copy): only for data that nothing changes afterwards.
func decodeResponseAlias(data []byte, dst http.Header) (storedResponse, error) {
	return decodeResponseInto(data, dst, true)
}

func decodeResponseInto(data []byte, dst http.Header, alias bool) (storedResponse, error) {
	var r storedResponse
	if len(data) < 4 || data[0] != encMagic0 || data[1] != encMagic1 {
		return r, fmt.Errorf("%w: not an httpidem response record", errDecode)
	}
	if data[2] != encVersion {
		return r, fmt.Errorf("%w: unknown encoding version %d (written by a newer release?)", errDecode, data[2])
	}
	flags := data[3]
	if flags&^(flagNotReplayable|flagOutcomeUnknown) != 0 || flags == flagNotReplayable|flagOutcomeUnknown {
		return r, fmt.Errorf("%w: unknown flags 0x%02x", errDecode, flags)
	}
	if !alias {
		// The strings alias a copy of their own; the caller's data may
		// change afterwards.
		data = bytes.Clone(data)
	}
	d := lenprefix.Decoder{B: data[4:]}
	r.NotReplayable = flags&flagNotReplayable != 0
	r.OutcomeUnknown = flags&flagOutcomeUnknown != 0
	status := d.Uvarint()
	if d.Err == nil && (status < 100 || status > 999) {
		return r, fmt.Errorf("%w: status %d out of range", errDecode, status)
	}
	r.Status = int(status)
	n := d.Count()
	// One pass: every name and value is checked as it is read, and noted
	// (as substrings of data, their value lists in one array); dst is
	// touched only once the whole record was found valid.
	hs := unsafe.String(unsafe.SliceData(data), len(data))
	str := func(b []byte) string {
		off := len(data) - len(d.B) - len(b)
		return hs[off : off+len(b)]
	}
	type field struct {
		name      string
		first, nv int
	}
	var small [16]field
	fields := small[:0]
	var vals []string
	var prev []byte
	for i := 0; i < n && d.Err == nil; i++ {
		name := d.Bytes()
		if d.Err != nil {
			break
		}
		if !validHeaderName(name) {
			return r, fmt.Errorf("%w: invalid header name", errDecode)
		}
		if i > 0 && string(name) <= string(prev) {
			return r, fmt.Errorf("%w: header names out of order", errDecode)
		}
		prev = name
		f := field{name: str(name), first: len(vals)}
		f.nv = d.Count()
		if vals == nil && f.nv > 0 {
			vals = make([]string, 0, max(n, f.nv)) // most headers have one value
		}
		for j := 0; j < f.nv && d.Err == nil; j++ {
			v := d.Bytes()
			if d.Err != nil {
				break
			}
			if !validHeaderValue(v) {
				return r, fmt.Errorf("%w: invalid value of header %q", errDecode, prev)
			}
			vals = append(vals, str(v))
		}
		fields = append(fields, f)
	}
	body := d.Bytes()
	if d.Err != nil {
		return r, fmt.Errorf("%w: %w", errDecode, d.Err)
	}
	if len(d.B) != 0 {
		return r, fmt.Errorf("%w: %d trailing bytes", errDecode, len(d.B))
	}
	if len(body) > 0 {
		r.Body = body
	}
	if n == 0 {
		return r, nil
	}
	h := dst
	if h == nil || r.NotReplayable {
		h = make(http.Header, n)
	}
	for _, f := range fields {
		var vs []string
		if f.nv > 0 {
			vs = vals[f.first : f.first+f.nv : f.first+f.nv]
		}
		h[f.name] = vs
	}
	r.Header = h
	return r, nil
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s []byte) bool {
	if len(s) == 0 {
		return false
	}
	for _, c := range s {
		if c >= 0x80 || !isTokenChar[c] {
			return false
		}
	}
	return true
}

// validHeaderValue rejects the bytes that would end or split a header line.
func validHeaderValue(s []byte) bool {
	for _, c := range s {
		if c == '\r' || c == '\n' || c == 0 {
			return false
		}
	}
	return true
}

var isTokenChar = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// cleanHeader removes from h, in place, the hop-by-hop headers (RFC 9110
// §7.6.1: isHopByHop, and the headers named in Connection), trailer
// declarations and Idempotent-Replayed (first responses never carry it).
func cleanHeader(h http.Header) {
	for _, f := range h["Connection"] {
		for name := range strings.SplitSeq(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	// One pass over the (few) names instead of a lookup per hop-by-hop
	// name; deleting while ranging is allowed.
	for k := range h {
		if isHopByHop(k) || k == ReplayedHeader || strings.HasPrefix(k, http.TrailerPrefix) {
			delete(h, k)
		}
	}
}

func isHopByHop(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// bodyAllowed reports whether a response with status may have a body.
func bodyAllowed(status int) bool {
	return (status < 100 || status > 199) && status != http.StatusNoContent && status != http.StatusNotModified
}
