package adapter

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
)

func TestClassify(t *testing.T) {
	live := context.Background()
	expired, cancel := AttemptContext(context.Background(), time.Nanosecond)
	defer cancel()
	<-expired.Done()
	callerGone, cancel2 := context.WithTimeout(context.Background(), time.Nanosecond) // not ours
	defer cancel2()
	<-callerGone.Done()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want Verdict
	}{
		{live, errors.New("bad"), Retry},
		{live, refused, Transient},
		{live, inbox.Permanent(errors.New("bad")), Permanent},
		{live, inbox.Permanent(refused), Permanent},
		{live, &idem.InFlightError{RetryAfter: time.Second}, Transient}, // a dead consumer's claim: wait, never poison
		{expired, context.DeadlineExceeded, Transient},                  // our own attempt timeout
		{callerGone, context.DeadlineExceeded, Retry},                   // someone else's deadline: the adapter checks stopping first
	} {
		if got := Classify(c.ctx, c.err); got != c.want {
			t.Errorf("Classify(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestFailureCounts(t *testing.T) {
	f := NewFailureCounts()
	if f.Add("a") != 1 || f.Add("a") != 2 || f.Get("a") != 2 || f.Get("b") != 0 {
		t.Fatal("counting")
	}
	f.Forget("a")
	if f.Get("a") != 0 || f.Add("") != 1 || f.Add("") != 1 {
		t.Fatal("forget / empty key")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				f.Add("c")
			}
		})
	}
	wg.Wait()
	if f.Get("c") != 800 {
		t.Fatalf("concurrent count %d", f.Get("c"))
	}
	for i := range maxTracked + 10 {
		f.Add(strconv.Itoa(i))
	}
	if len(f.n) > maxTracked {
		t.Fatalf("%d counts kept, bound %d", len(f.n), maxTracked)
	}
}

func TestMetricsReportToTheObserver(t *testing.T) {
	var mu sync.Mutex
	seen := map[inbox.Delivery]int{}
	obs := inbox.ObserverFunc(func(d inbox.Delivery) {
		mu.Lock()
		seen[d]++
		mu.Unlock()
	})
	a := NewMetrics(obs, "nats", "billing")
	b := NewMetrics(obs, "nats", "billing") // a second subscriber of the same consumer
	c := NewMetrics(obs, "nats", "ledger")
	quiet := NewMetrics(nil, "nats", "x")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			a.Inc(inbox.DeliveryProcessed)
			b.Inc(inbox.DeliveryProcessed)
			c.Inc(inbox.DeliveryDeadLettered)
			quiet.Inc(inbox.DeliveryRetried)
		})
	}
	wg.Wait()
	if a.Load(inbox.DeliveryProcessed) != 4 || b.Load(inbox.DeliveryProcessed) != 4 || quiet.Load(inbox.DeliveryRetried) != 4 {
		t.Fatal("in-process counts are per subscriber")
	}
	want := map[inbox.Delivery]int{
		{Adapter: "nats", Consumer: "billing", Outcome: inbox.DeliveryProcessed}:   8,
		{Adapter: "nats", Consumer: "ledger", Outcome: inbox.DeliveryDeadLettered}: 4,
	}
	if len(seen) != len(want) {
		t.Fatalf("observed %v, want %v", seen, want)
	}
	for k, v := range want {
		if seen[k] != v {
			t.Errorf("%+v observed %d times, want %d", k, seen[k], v)
		}
	}
}
