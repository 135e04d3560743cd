package adapter

import (
	"strconv"
	"sync"
	"testing"
	"time"
)

// A reversed run (v5 … v2 parked, then v1 applied) drains in one pass,
// newest first; a full lot refuses; Close hands everything back and parks
// nothing more.
func TestParkingOnePass(t *testing.T) {
	p := NewParking[int](4)
	for v := 5; v >= 2; v-- {
		if !p.Park(strconv.Itoa(v), v) {
			t.Fatalf("park v%d refused", v)
		}
	}
	if p.Park("6", 6) {
		t.Fatal("a full lot parked a fifth message")
	}
	applied := 1
	var tries []int
	p.Applied(func(it Parked[int]) bool {
		tries = append(tries, it.Msg)
		if it.Msg == applied+1 {
			applied++
			p.Forget(it.Key)
			return true
		}
		p.Park(it.Key, it.Msg)
		return false
	})
	if applied != 5 || len(tries) != 4 || p.Len() != 0 {
		t.Fatalf("applied up to v%d with tries %v, %d left parked", applied, tries, p.Len())
	}
	p.Park("9", 9)
	if got := p.Close(); len(got) != 1 || got[0].Msg != 9 || p.Park("10", 10) {
		t.Fatalf("Close returned %v, or parked after Close", got)
	}
}

func TestParkingSweepKeepsFirstParkTime(t *testing.T) {
	p := NewParking[string](10)
	p.Park("a", "a")
	first := p.items[0].Since
	p.take()
	p.Park("a", "a") // parked again: still as old
	p.Park("b", "b")
	if p.items[0].Since != first {
		t.Fatal("a message parked again got a new park time")
	}
	var kept []string
	old := p.Sweep(first.Add(time.Nanosecond), func(m string) { kept = append(kept, m) })
	if len(old) != 1 || old[0].Msg != "a" || len(kept) != 1 || kept[0] != "b" {
		t.Fatalf("sweep: old %v kept %v", old, kept)
	}
}

// Many workers parking and applying at once: every parked message is
// tried, none lost, under -race.
func TestParkingConcurrent(t *testing.T) {
	p := NewParking[int](1000)
	var mu sync.Mutex
	done := map[int]bool{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 50 {
				k := w*100 + i
				p.Park(strconv.Itoa(k), k)
				p.Applied(func(it Parked[int]) bool {
					mu.Lock()
					done[it.Msg] = true
					mu.Unlock()
					return false
				})
			}
		})
	}
	wg.Wait()
	p.Applied(func(it Parked[int]) bool {
		mu.Lock()
		done[it.Msg] = true
		mu.Unlock()
		return false
	})
	if len(done) != 400 {
		t.Fatalf("%d of 400 parked messages tried", len(done))
	}
	if NewParking[int](0).Park("x", 1) {
		t.Fatal("a lot of size 0 parked")
	}
}
