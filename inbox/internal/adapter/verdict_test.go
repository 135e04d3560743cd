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

	"github.com/prometheus/client_golang/prometheus"

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
		{expired, context.DeadlineExceeded, Transient}, // our own attempt timeout
		{callerGone, context.DeadlineExceeded, Retry},  // someone else's deadline: the adapter checks stopping first
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

func TestMetricsShareASeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := NewMetrics(reg, "nats", "billing")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewMetrics(reg, "nats", "billing") // a second subscriber of the same consumer
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewMetrics(reg, "nats", "ledger")
	if err != nil {
		t.Fatal(err)
	}
	a.Inc(OutProcessed)
	b.Inc(OutProcessed)
	c.Inc(OutDeadLettered)
	if a.Load(OutProcessed) != 1 || b.Load(OutProcessed) != 1 {
		t.Fatal("in-process counts are per subscriber")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			k := mf.GetName()
			for _, l := range m.GetLabel() {
				k += " " + l.GetName() + "=" + l.GetValue()
			}
			got[k] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{}
	for _, consumer := range []string{"billing", "ledger"} {
		for _, o := range outcomeNames {
			want["idem_inbox_messages_total adapter=nats consumer="+consumer+" outcome="+o] = 0
		}
	}
	want["idem_inbox_messages_total adapter=nats consumer=billing outcome=processed"] = 2
	want["idem_inbox_messages_total adapter=nats consumer=ledger outcome=dead_lettered"] = 1
	if len(got) != len(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if _, err := NewMetrics(nil, "nats", "x"); err != nil {
		t.Fatal(err)
	}
}
