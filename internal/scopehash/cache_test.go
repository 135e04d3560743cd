package scopehash

import (
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestCacheAnswersAsSum: from many goroutines, over more inputs than the
// cache holds (so it forgets while in use) and inputs too long to cache,
// Cache.Sum always answers exactly Sum, and two inputs never share an
// answer.
func TestCacheAnswersAsSum(t *testing.T) {
	t.Parallel()
	var c Cache
	input := func(i int) []byte {
		b := []byte("Bearer tok-" + strconv.Itoa(i))
		if i%97 == 0 {
			b = append(b, strings.Repeat("x", cacheMaxInput)...)
		}
		return b
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2 * cacheEntries {
				n := (i*7 + g) % (cacheEntries + 500)
				if got, want := c.Sum("h1:", input(n)), Sum("h1:", input(n)); got != want {
					t.Errorf("Cache.Sum(%d) = %s, want %s", n, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	if c.Sum("h1:", input(1)) == c.Sum("h1:", input(2)) {
		t.Fatal("two inputs share a cached scope")
	}
}
