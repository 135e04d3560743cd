package memstore

import "github.com/idemkit/idem"

// arena holds a shard's results, so that its records hold no pointer and
// the garbage collector never walks them: small results are appended to
// one byte slice (which the collector does not scan either), and a
// record refers to its bytes by offset and length. Results larger than
// bigResult get an allocation of their own, in big; they are few, and
// they would make the shared slice grow in large steps.
//
// Freed bytes stay in buf until compact finds them to be more than half
// of it; then the live results are copied to a new slice, which costs one
// pass over the shard's records for at least as many bytes freed. The
// shard's lock guards the arena.
type arena struct {
	buf  []byte
	dead int // bytes of buf no record refers to
	big  map[uint64][]byte
	next uint64 // the last id given to a big result
}

// resultRef is where a record's result is: n bytes at off in buf, or,
// with big set, the big result with id off. The zero resultRef is no
// result.
type resultRef struct {
	off uint64
	n   uint32
	big bool
}

const (
	bigResult  = 4 << 10
	minCompact = 64 << 10
)

// add stores a copy of b and returns its place.
func (a *arena) add(b []byte) resultRef {
	switch {
	case len(b) == 0:
		return resultRef{}
	case len(b) > bigResult:
		if a.big == nil {
			a.big = make(map[uint64][]byte)
		}
		a.next++
		a.big[a.next] = append([]byte(nil), b...)
		return resultRef{off: a.next, n: uint32(min(len(b), 1<<32-1)), big: true}
	}
	off := len(a.buf)
	a.buf = append(a.buf, b...)
	return resultRef{off: uint64(off), n: uint32(len(b))}
}

// bytes returns the stored result of r (nil for none), which the arena
// keeps and never changes: buf is only ever appended to, and compact
// copies into a new slice, so the bytes stay as they are for as long as
// anyone holds them. Its capacity ends with it, so that an append by the
// holder copies instead of writing over the next result.
func (a *arena) bytes(r resultRef) []byte {
	switch {
	case r.big:
		b := a.big[r.off]
		return b[:len(b):len(b)]
	case r.n == 0:
		return nil
	}
	end := r.off + uint64(r.n)
	return a.buf[r.off:end:end]
}

// copy returns a copy of the result of r (nil for none), the caller's to
// keep.
func (a *arena) copy(r resultRef) []byte {
	b := a.bytes(r)
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// free gives the result of r up; the record that held it no longer does.
func (a *arena) free(r resultRef) {
	switch {
	case r.big:
		delete(a.big, r.off)
	case r.n > 0:
		a.dead += int(r.n)
	}
}

// compact copies the live results of records to a new buffer when more
// than half of buf is freed bytes, and updates the records' offsets.
func (a *arena) compact(records map[idem.Digest]entry) {
	if a.dead < minCompact || a.dead <= len(a.buf)/2 {
		return
	}
	live := len(a.buf) - a.dead
	nb := make([]byte, 0, live+live/4)
	for d, e := range records {
		if e.result.big || e.result.n == 0 {
			continue
		}
		old := e.result
		e.result.off = uint64(len(nb))
		nb = append(nb, a.buf[old.off:old.off+uint64(old.n)]...)
		records[d] = e
	}
	a.buf, a.dead = nb, 0
}
