package inboxengine_test

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/amqpinbox"
	"github.com/idemkit/idem/inbox/kafkainbox"
	"github.com/idemkit/idem/inbox/natsinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
)

// policy is the part of a subscriber's Config every adapter has, under
// the same names.
type policy struct {
	MaxFailures          int
	BackoffFunc          func(failures int) time.Duration
	TransientBackoffFunc func(attempt int) time.Duration
	DeadLetter           bool
}

// handler is the business work of a case: id is the message ID.
type handler func(ctx context.Context, tx *sql.Tx, id string) error

// subscriber is what the test needs of a running natsinbox, amqpinbox or
// kafkainbox Subscriber.
type subscriber interface {
	Stats() inbox.DeliveryStats
	Stop(ctx context.Context) error
}

// deadLetter is a dead-lettered copy, read back from the broker.
type deadLetter struct {
	ID       string // the original's message ID
	Failures int    // its FailuresHeader
	Reason   string // its ErrorHeader
}

// rig is one broker: fresh names per test, the adapter started on them.
type rig interface {
	publish(t *testing.T, id string)
	start(t *testing.T, p inbox.Processor, h handler, pol policy) subscriber
	// deadLetters reads the n dead-lettered copies (n > 0).
	deadLetters(t *testing.T, n int) []deadLetter
}

var rigs = []struct {
	name string
	new  func(t *testing.T) rig
}{
	{"nats", newNATSRig},
	{"amqp", newAMQPRig},
	{"kafka", newKafkaRig},
}

// started starts s, the subscriber New returned with err.
func started[S interface {
	subscriber
	Start(context.Context) error
}](t *testing.T, s S, err error) subscriber {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// --- NATS JetStream (the shared server) ---

const idHeader = "Idem-Message-Id"

type natsRig struct {
	*adaptertest.JetStream
	dlq string // the dead-letter subject
}

func newNATSRig(t *testing.T) rig {
	r := &natsRig{JetStream: adaptertest.NewJetStream(t, 30*time.Second)}
	r.dlq = r.DeadLetterStream(t)
	return r
}

func (r *natsRig) publish(t *testing.T, id string) {
	t.Helper()
	m := nats.NewMsg(r.Stream + ".orders")
	m.Header.Set(idHeader, id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.JS.PublishMsg(ctx, m); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

func (r *natsRig) start(t *testing.T, p inbox.Processor, h handler, pol policy) subscriber {
	t.Helper()
	cfg := &natsinbox.Config{
		MessageIDFunc: natsinbox.HeaderID(idHeader), Logger: adaptertest.QuietLogger(),
		MaxFailures: pol.MaxFailures, BackoffFunc: pol.BackoffFunc, TransientBackoffFunc: pol.TransientBackoffFunc,
	}
	if pol.DeadLetter {
		cfg.DeadLetterSubject, cfg.JetStream = r.dlq, r.JS
	}
	s, err := natsinbox.New(p, r.Cons, func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		return h(ctx, tx, msg.Headers().Get(idHeader))
	}, cfg)
	return started(t, s, err)
}

func (r *natsRig) deadLetters(t *testing.T, _ int) []deadLetter {
	var out []deadLetter
	for _, m := range r.DeadLettered(t) {
		n, _ := strconv.Atoi(m.Header.Get(natsinbox.FailuresHeader))
		out = append(out, deadLetter{ID: m.Header.Get(idHeader), Failures: n, Reason: m.Header.Get(natsinbox.ErrorHeader)})
	}
	return out
}

// --- RabbitMQ (the shared broker) ---

type amqpRig struct{ *adaptertest.AMQPQueue }

func newAMQPRig(t *testing.T) rig { return &amqpRig{adaptertest.NewAMQPQueue(t, nil)} }

func (r *amqpRig) publish(t *testing.T, id string) { r.Publish(t, id, "") }

func (r *amqpRig) start(t *testing.T, p inbox.Processor, h handler, pol policy) subscriber {
	t.Helper()
	// amqpinbox always has a dead-letter destination (Queue + ".dead-letter"
	// by default); "no destination" is a NATS and Kafka setting.
	s, err := amqpinbox.New(p, r.Conn, func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
		return h(ctx, tx, d.MessageId)
	}, &amqpinbox.Config{
		Queue: r.Queue, Logger: adaptertest.QuietLogger(),
		MaxFailures: pol.MaxFailures, BackoffFunc: pol.BackoffFunc, TransientBackoffFunc: pol.TransientBackoffFunc,
	})
	return started(t, s, err)
}

func (r *amqpRig) deadLetters(t *testing.T, _ int) []deadLetter {
	t.Helper()
	var out []deadLetter
	for {
		d, ok, err := r.Ch.Get(r.Queue+".dead-letter", true)
		if err != nil {
			t.Fatalf("get dead letter: %v", err)
		}
		if !ok {
			return out
		}
		n, _ := d.Headers[amqpinbox.FailuresHeader].(int32)
		reason, _ := d.Headers[amqpinbox.ErrorHeader].(string)
		out = append(out, deadLetter{ID: d.MessageId, Failures: int(n), Reason: reason})
	}
}

// --- Kafka (in-process kfake, as the kafkainbox driver tests use) ---

type kafkaRig struct {
	brokers []string
	topic   string
}

func newKafkaRig(t *testing.T) rig {
	topic := testenv.Name("idemeng")
	return &kafkaRig{brokers: adaptertest.NewKafka(t, 1, topic, topic+"-dlq"), topic: topic}
}

func (r *kafkaRig) client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(r.brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func (r *kafkaRig) publish(t *testing.T, id string) {
	t.Helper()
	cl := r.client(t)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec := &kgo.Record{Topic: r.topic, Headers: []kgo.RecordHeader{{Key: kafkainbox.DefaultMessageIDHeader, Value: []byte(id)}}}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

func (r *kafkaRig) start(t *testing.T, p inbox.Processor, h handler, pol policy) subscriber {
	t.Helper()
	cfg := &kafkainbox.Config{
		Brokers: r.brokers, Group: r.topic, Topics: []string{r.topic}, Logger: adaptertest.QuietLogger(),
		MaxFailures: pol.MaxFailures, BackoffFunc: pol.BackoffFunc, TransientBackoffFunc: pol.TransientBackoffFunc,
		ClientOpts: []kgo.Opt{
			kgo.HeartbeatInterval(100 * time.Millisecond), kgo.SessionTimeout(5 * time.Second),
			kgo.RebalanceTimeout(2 * time.Second), kgo.FetchMaxWait(100 * time.Millisecond),
		},
	}
	if pol.DeadLetter {
		cfg.DeadLetterTopic = r.topic + "-dlq"
	}
	s, err := kafkainbox.New(p, func(ctx context.Context, tx *sql.Tx, rec *kgo.Record) error {
		for _, hd := range rec.Headers {
			if hd.Key == kafkainbox.DefaultMessageIDHeader {
				return h(ctx, tx, string(hd.Value))
			}
		}
		return h(ctx, tx, "")
	}, cfg)
	return started(t, s, err)
}

// deadLetters reads the topic until it has n records: a produce the
// subscriber counted is stored, but a fetch may take a while to see it.
func (r *kafkaRig) deadLetters(t *testing.T, n int) []deadLetter {
	t.Helper()
	cl := r.client(t, kgo.ConsumeTopics(r.topic+"-dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	var out []deadLetter
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(out) < n && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(rec *kgo.Record) {
			var d deadLetter
			for _, hd := range rec.Headers {
				switch hd.Key {
				case kafkainbox.DefaultMessageIDHeader:
					d.ID = string(hd.Value)
				case kafkainbox.FailuresHeader:
					d.Failures, _ = strconv.Atoi(string(hd.Value))
				case kafkainbox.ErrorHeader:
					d.Reason = string(hd.Value)
				}
			}
			out = append(out, d)
		})
	}
	return out
}
