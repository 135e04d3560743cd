package adaptertest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/idemkit/idem/internal/testenv"
)

// JetStream is a memory stream with a durable pull consumer on the shared
// NATS server, under fresh names.
type JetStream struct {
	NC     *nats.Conn
	JS     jetstream.JetStream
	Stream string // its subjects are Stream + ".>"
	Cons   jetstream.Consumer
}

// NewJetStream creates the stream and its consumer "worker" (explicit
// acks, MaxDeliver -1, the given AckWait), deleted when the test ends.
func NewJetStream(t testing.TB, ackWait time.Duration) *JetStream {
	t.Helper()
	url := testenv.NATS.Need(t)
	nc, err := nats.Connect(url)
	if err != nil {
		testenv.Unavailable(t, "NATS", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := testenv.Name("IDEMT")
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage,
	})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, name)
		nc.Close()
	})
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: ackWait, MaxDeliver: -1, MaxAckPending: 10000,
	})
	if err != nil {
		t.Fatalf("create consumer: %v", err)
	}
	return &JetStream{NC: nc, JS: js, Stream: name, Cons: cons}
}

// Settled reports whether every message of the stream has been acked or
// terminated and none is waiting or in flight.
func (j *JetStream) Settled(t testing.TB) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := j.Cons.Info(ctx)
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	return info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0 &&
		info.AckFloor.Stream == info.Delivered.Stream
}

// DeadLetterStream creates the memory stream Stream + "_DLQ", deleted when
// the test ends, and returns the subject it captures.
func (j *JetStream) DeadLetterStream(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := j.Stream + "_DLQ"
	if _, err := j.JS.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{name + ".dead"}, Storage: jetstream.MemoryStorage,
	}); err != nil {
		t.Fatalf("create dead-letter stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = j.JS.DeleteStream(ctx, name)
	})
	return name + ".dead"
}

// DeadLettered returns the messages stored in the DeadLetterStream.
func (j *JetStream) DeadLettered(t testing.TB) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := j.JS.Stream(ctx, j.Stream+"_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get dead letter %d: %v", seq, err)
		}
		out = append(out, m)
	}
	return out
}

// AMQPQueue is a durable queue on the shared RabbitMQ, under a fresh
// name, with a publishing channel in confirm mode.
type AMQPQueue struct {
	Conn  *amqp.Connection
	Ch    *amqp.Channel
	Queue string
}

// NewAMQPQueue declares the queue (with args); it and the queues an
// amqpinbox subscriber declares beside it (".retry", ".dead-letter") are
// deleted when the test ends.
func NewAMQPQueue(t testing.TB, args amqp.Table) *AMQPQueue {
	t.Helper()
	url := testenv.AMQP.Need(t)
	conn, err := amqp.Dial(url)
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	q := &AMQPQueue{Conn: conn, Ch: ch, Queue: testenv.Name("idemt")}
	if _, err := ch.QueueDeclare(q.Queue, true, false, false, false, args); err != nil {
		t.Fatalf("declare queue: %v", err)
	}
	t.Cleanup(func() {
		if c, err := conn.Channel(); err == nil {
			for _, name := range []string{q.Queue, q.Queue + ".retry", q.Queue + ".dead-letter"} {
				_, _ = c.QueueDelete(name, false, false, false)
			}
			_ = c.Close()
		}
		_ = conn.Close()
	})
	return q
}

// Publish publishes a persistent message with MessageId id to the queue
// and waits for the broker's confirm.
func (q *AMQPQueue) Publish(t testing.TB, id, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conf, err := q.Ch.PublishWithDeferredConfirmWithContext(ctx, "", q.Queue, true, false, amqp.Publishing{
		MessageId: id, Body: []byte(body), DeliveryMode: amqp.Persistent,
	})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if ok, err := conf.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish not confirmed: %v", err)
	}
}

// NewKafka starts an in-process Kafka (kfake) with the given topics and
// returns its seed brokers.
func NewKafka(t testing.TB, partitions int32, topics ...string) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}
