package idem

import (
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"hash"
	"strings"
	"sync"
)

// The key digest is the SHA-256 of
//
//	"idem/key/v2\x00" ‖ uvarint(len(scope)) ‖ scope ‖ zero bytes up to a multiple of 64 ‖ id
//
// The input is unambiguous: the tag is fixed, the length says where the
// scope ends and so where the zero bytes end, and the id is the rest. Two
// different keys, in one scope or in two, therefore share a digest only
// if two different inputs collide under SHA-256 (docs/stability.md).
//
// The zero bytes make the scope's part fill whole SHA-256 blocks, so the
// hash's state after it is the same for every key of the scope:
// scopeStates keeps it for recent scopes, and a key then costs the blocks
// of its id alone (one for an id of up to 55 bytes) instead of the
// scope's and the id's. The digest is the same either way.
const keyTag = "idem/key/v2\x00"

// blockSize is SHA-256's block size.
const blockSize = 64

// maxScopePart is the longest scope part: the tag, the two-byte length of
// a MaxScopeLen scope and the scope, rounded up to a whole block.
const maxScopePart = (len(keyTag) + 2 + MaxScopeLen + blockSize - 1) / blockSize * blockSize

// appendScopePart appends the scope's part of a key digest's input.
func appendScopePart(b []byte, scope string) []byte {
	start := len(b)
	b = append(b, keyTag...)
	b = binary.AppendUvarint(b, uint64(len(scope)))
	b = append(b, scope...)
	for (len(b)-start)%blockSize != 0 {
		b = append(b, 0)
	}
	return b
}

// digestOf returns the key digest of scope and id: from the scope's
// cached state when it has one, else over the whole input, assembled in a
// stack buffer (allocating nothing).
func digestOf(scope, id string) Digest {
	if d, ok := scopeStates.digest(scope, id); ok {
		return d
	}
	return digestWhole(scope, id)
}

// digestWhole hashes the whole input of scope and id in one call.
func digestWhole(scope, id string) Digest {
	var buf [maxScopePart + MaxKeyLen]byte
	b := appendScopePart(buf[:0], scope)
	b = append(b, id...)
	return sha256.Sum256(b)
}

// scopeStates keeps the SHA-256 state after the scope part of recent
// scopes, since a service sees the same few scopes again and again. It is
// bounded (scopeCacheEntries scopes of at most scopeCacheMax bytes;
// longer ones are hashed whole every time) and forgets everything when
// full, so a flood of new scopes costs what it did without it, plus a
// saved state each. The scopes it holds are what the process holds while
// it serves their requests anyway (hashed credentials, tenant ids); they
// never leave it.
var scopeStates scopeCache

const (
	scopeCacheEntries = 4096
	scopeCacheMax     = 256
)

type scopeCache struct {
	mu sync.RWMutex
	m  map[string]*scopeState
}

// scopeState is a SHA-256 state as the hash saves it (AppendBinary).
type scopeState struct {
	n int
	b [maxState]byte
}

// maxState bounds a saved SHA-256 state (crypto/sha256 saves 108 bytes); a
// hash whose state is larger is not cached.
const maxState = 128

// keyHasher is a SHA-256 hash with the scratch space of one digest; the
// pool keeps them, so a digest allocates nothing.
type keyHasher struct {
	h   hash.Hash
	u   encoding.BinaryUnmarshaler // h's, nil if it cannot restore a state
	a   encoding.BinaryAppender    // h's, nil if it cannot save one
	buf []byte
	sum [sha256.Size]byte
}

var keyHashers = sync.Pool{New: func() any {
	h := sha256.New()
	u, _ := h.(encoding.BinaryUnmarshaler)
	a, _ := h.(encoding.BinaryAppender)
	return &keyHasher{h: h, u: u, a: a}
}}

// digest returns the digest of scope and id from the scope's saved
// state, saving it first when the scope has none. It reports false when
// the scope is too long to be cached or the hash cannot save its state:
// the caller then hashes the whole input.
func (c *scopeCache) digest(scope, id string) (Digest, bool) {
	if len(scope) > scopeCacheMax {
		return Digest{}, false
	}
	c.mu.RLock()
	st := c.m[scope]
	c.mu.RUnlock()
	kh := keyHashers.Get().(*keyHasher)
	defer keyHashers.Put(kh)
	if kh.u == nil || kh.a == nil {
		return Digest{}, false
	}
	if st != nil {
		if kh.u.UnmarshalBinary(st.b[:st.n]) != nil {
			return Digest{}, false
		}
	} else {
		kh.h.Reset()
		kh.buf = appendScopePart(kh.buf[:0], scope)
		kh.h.Write(kh.buf)
		st = new(scopeState)
		b, err := kh.a.AppendBinary(st.b[:0])
		if err != nil || len(b) > maxState {
			return Digest{}, false
		}
		st.n = len(b)
		c.mu.Lock()
		if c.m == nil {
			c.m = make(map[string]*scopeState)
		} else if len(c.m) >= scopeCacheEntries {
			clear(c.m)
		}
		c.m[strings.Clone(scope)] = st
		c.mu.Unlock()
	}
	kh.buf = append(kh.buf[:0], id...)
	kh.h.Write(kh.buf)
	return Digest(kh.h.Sum(kh.sum[:0])), true
}
