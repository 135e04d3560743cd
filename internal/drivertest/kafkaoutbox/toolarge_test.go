package kafkaoutbox_test

import (
	"context"
	"crypto/rand"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/kafkaoutbox"
)

// TestTooLargeParksOnlyItself: a broker with message.max.bytes 5,000 and
// one partition, and one Publish of 30 small records of 30 keys and one
// of 8,000 bytes. The broker refuses the whole produce batch as too
// large; the publisher once parked all 31 (30 valid heads of other keys
// waiting for an operator). Now only the record that is refused on its
// own is parked, and the other 30 are acknowledged.
func TestTooLargeParksOnlyItself(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	pub := fakePublisher(t, []kfake.Opt{kfake.BrokerConfigs(map[string]string{"message.max.bytes": "5000"})}, kgo.ProducerLinger(50*time.Millisecond))
	var batch []outbox.Message
	for i := range 30 {
		batch = append(batch, outbox.Message{ID: "m-" + strconv.Itoa(i), Destination: topic, OrderingKey: "k" + strconv.Itoa(i), Payload: make([]byte, 100)})
	}
	huge := make([]byte, 8000)
	_, _ = rand.Read(huge) // incompressible: the client compresses batches
	batch = append(batch, outbox.Message{ID: "huge", Destination: topic, OrderingKey: "h", Payload: huge})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := pub.Publish(ctx, batch)
	for i, err := range errs[:30] {
		if err != nil {
			t.Errorf("record %d: %v; want acknowledged", i, err)
		}
	}
	if !outbox.IsPermanent(errs[30]) {
		t.Fatalf("the too-large record: %v; want permanent", errs[30])
	}
	if c := outbox.ReasonClass(errs[30].Error()); c != outbox.ReasonTooLarge {
		t.Fatalf("the too-large record's class %q, want too_large", c)
	}
	t.Logf("the too-large record: %v", errs[30])
}

// TestMissingTopicIsTransient: a record for a topic that does not exist
// (the broker does not create topics) is retried, not parked: a topic
// created later receives it. The attempt ends with the Publish's context.
func TestMissingTopicIsTransient(t *testing.T) {
	t.Parallel()
	pub := fakePublisher(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	errs := pub.Publish(ctx, []outbox.Message{
		{ID: "ok", Destination: "orders", Payload: []byte("x")},
		{ID: "lost", Destination: "no-such-topic", Payload: []byte("x")},
	})
	if errs[0] != nil {
		t.Fatalf("the record for an existing topic: %v", errs[0])
	}
	if errs[1] == nil || outbox.IsPermanent(errs[1]) {
		t.Fatalf("the record for a missing topic: %v; want a transient error", errs[1])
	}
	t.Logf("missing topic: %v", errs[1])
}

// fakePublisher is a publisher on a one-broker kfake cluster with the
// topic "orders" (one partition), both closed when t ends.
func fakePublisher(t *testing.T, cluster []kfake.Opt, client ...kgo.Opt) *kafkaoutbox.Publisher {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, "orders")}, cluster...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, client...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	pub, err := kafkaoutbox.New(cl)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}
