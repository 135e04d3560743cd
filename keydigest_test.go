package idem

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// referenceDigest is the key digest as docs/stability.md states it,
// written out independently of keydigest.go.
func referenceDigest(scope, id string) Digest {
	in := []byte("idem/key/v2\x00")
	in = binary.AppendUvarint(in, uint64(len(scope)))
	in = append(in, scope...)
	in = append(in, make([]byte, (64-len(in)%64)%64)...)
	in = append(in, id...)
	return sha256.Sum256(in)
}

// TestKeyDigestFromSavedState: for scopes of every length up to past the
// cache's limit (every position of the padding, one to many blocks) and
// ids of 1 to 255 bytes, the digest from a saved scope state (after it
// was saved, and again) and the digest of the whole input are the
// documented one.
func TestKeyDigestFromSavedState(t *testing.T) {
	t.Parallel()
	var c scopeCache
	for n := 0; n <= scopeCacheMax+70; n++ {
		scope := strings.Repeat(string(rune('a'+n%26)), n)
		for _, id := range []string{"k", strings.Repeat("i", 55), strings.Repeat("j", 56), strings.Repeat("x", MaxKeyLen)} {
			want := referenceDigest(scope, id)
			if got := digestWhole(scope, id); got != want {
				t.Fatalf("scope of %d bytes, id of %d: whole input %x, want %x", n, len(id), got, want)
			}
			for range 2 { // saving the state, then from it
				got, ok := c.digest(scope, id)
				if ok != (n <= scopeCacheMax) {
					t.Fatalf("scope of %d bytes: cached = %v", n, ok)
				}
				if ok && got != want {
					t.Fatalf("scope of %d bytes, id of %d: from the saved state %x, want %x", n, len(id), got, want)
				}
			}
			if got := MustKey(scope, id).Digest(); got != want {
				t.Fatalf("scope of %d bytes, id of %d: Key.Digest %x, want %x", n, len(id), got, want)
			}
		}
	}
}

// TestKeyDigestCacheConcurrent: goroutines making keys of a few scopes
// while others flood the cache with new ones (it forgets everything when
// full) always get the documented digest, and the cache stays bounded.
func TestKeyDigestCacheConcurrent(t *testing.T) {
	t.Parallel()
	var c scopeCache
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 3000 {
				scope := "tenant-" + strconv.Itoa(i%5)
				if g%2 == 1 {
					scope = "flood-" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
				}
				id := "order-" + strconv.Itoa(i)
				got, ok := c.digest(scope, id)
				if !ok || got != referenceDigest(scope, id) {
					t.Errorf("digest(%q, %q) = %x, %v", scope, id, got, ok)
					return
				}
			}
		})
	}
	wg.Wait()
	c.mu.RLock()
	defer c.mu.RUnlock()
	if len(c.m) > scopeCacheEntries {
		t.Fatalf("the cache holds %d scopes, over its bound of %d", len(c.m), scopeCacheEntries)
	}
}

// TestKeyDigestAllocatesNothing: a key of a scope seen before is hashed
// without an allocation.
func TestKeyDigestAllocatesNothing(t *testing.T) {
	scope := "h1:" + strings.Repeat("0a", 32)
	MustKey(scope, "warm")
	// AllocsPerRun counts the whole process's allocations: a goroutine
	// another test left behind (a timer, a heartbeat ending) can add some
	// to one window (1 per digest was seen once in a full run). An
	// allocation of digestOf shows in every window, so the least of five
	// is the figure.
	least := math.Inf(1)
	for range 5 {
		least = min(least, testing.AllocsPerRun(100, func() { digestOf(scope, "k-0000000000000000000000000000000001") }))
	}
	if least != 0 {
		t.Fatalf("%v allocations per key digest", least)
	}
}
