package natsoutbox_test

import (
	"context"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/natsoutbox"
)

// TestPublishHonoursTimeoutPastPendingLimit: the link to NATS is
// black-holed and a batch holds more messages than the client's limit of
// pending acks (100 here, 4,000 by default). Past the limit each async
// publish stalls; the publisher once stalled on every one in turn (a
// Publish with a 1 s context took 500 × 200 ms). It must return soon
// after its context ends, every message failed (transient: retried).
func TestPublishHonoursTimeoutPastPendingLimit(t *testing.T) {
	t.Parallel()
	rawURL := testenv.NATS.Need(t)
	ctx := ctxT(t)
	djs := jetStream(t, rawURL)
	stream := testenv.Name("OBSTALL")
	if _, err := djs.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	defer djs.DeleteStream(context.Background(), stream)

	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewFaultProxy(t, u.Host)
	nc, err := nats.Connect(testenv.Redirect(rawURL, proxy.Addr()), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(100))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := natsoutbox.New(js, nil)
	if err != nil {
		t.Fatal(err)
	}
	batch := make([]outbox.Message, 600)
	for i := range batch {
		batch[i] = outbox.Message{ID: "m-" + strconv.Itoa(i), Destination: stream + ".orders", Payload: []byte("x")}
	}
	proxy.Set(testenv.BlackHole)
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	done := make(chan []error, 1)
	start := time.Now()
	go func() { done <- pub.Publish(pctx, batch) }()
	var errs []error
	select {
	case errs = <-done:
	case <-time.After(30 * time.Second): // the stalls of the old loop took 100 s
		t.Fatalf("Publish with a 1 s context has not returned after %v", time.Since(start).Round(time.Second))
	}
	t.Logf("Publish returned after %v", time.Since(start).Round(time.Millisecond))
	for i, err := range errs {
		if err == nil || outbox.IsPermanent(err) {
			t.Fatalf("message %d: %v; want a transient failure", i, err)
		}
	}
	proxy.Set(testenv.Pass)
}
