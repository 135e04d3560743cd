package kafkaoutbox

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outbox"
)

// MessageIDHeader is the record header that carries the message ID. It is
// kafkainbox.DefaultMessageIDHeader, so a kafkainbox subscriber reads it
// with no configuration.
const MessageIDHeader = "idem-message-id"

// Publisher produces outbox messages to Kafka through a franz-go client:
// the topic is the message's Destination, the record key its OrderingKey
// (so one key stays on one partition, in order), and the ID travels in
// MessageIDHeader. A message counts as confirmed when its produce request
// was acknowledged. The client must keep franz-go's defaults of an
// idempotent producer and acks from all in-sync replicas
// (do not set kgo.DisableIdempotentWrite): the broker then drops the
// client's own internal retries, and the consumer's inbox drops the
// relay's.
type Publisher struct {
	cl        *kgo.Client
	isolating sync.Mutex // one batch at a time retries its too-large records alone
}

var _ outbox.Publisher = (*Publisher)(nil)

// New returns a Publisher on cl. The caller owns cl and closes it.
func New(cl *kgo.Client) (*Publisher, error) {
	if cl == nil {
		return nil, configError("cl", "nil *kgo.Client")
	}
	return &Publisher{cl: cl}, nil
}

// Publish produces the batch and waits for every acknowledgement, or for
// ctx (the relay's PublishTimeout): a record not acknowledged by then is
// reported as a transient failure, although franz-go may still deliver it
// later. The relay then publishes it again after a backoff, the inbox
// drops the extra copy, and per-key order holds: the key's next message is
// produced only after a later copy was acknowledged, and franz-go keeps a
// partition's records in order. A record too large, an invalid record or
// topic, or a topic the client may not write is refused for good
// (outbox.Permanent: parked); anything else is retried by the relay. The
// broker refuses a whole produce batch over the topic's max.message.bytes,
// so records refused as too large together are produced again one at a
// time, and only a record refused on its own is parked.
func (p *Publisher) Publish(ctx context.Context, batch []outbox.Message) []error {
	var mu sync.Mutex
	errs := make([]error, len(batch))
	acked := make([]bool, len(batch))
	left := len(batch)
	done := make(chan struct{})
	if left == 0 {
		close(done)
	}
	for i, m := range batch {
		p.cl.Produce(ctx, record(m), func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[i] = classify(err)
			}
			acked[i] = true
			if left--; left == 0 {
				close(done)
			}
		})
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	mu.Lock()
	out := make([]error, len(batch))
	var tooLarge []int
	for i := range out {
		if out[i] = errs[i]; !acked[i] {
			out[i] = fmt.Errorf("kafkaoutbox: waiting for the acknowledgement: %w", ctx.Err())
		}
		if out[i] != nil && isTooLarge(out[i]) {
			tooLarge = append(tooLarge, i)
		}
	}
	mu.Unlock()
	if len(tooLarge) > 1 {
		p.isolate(ctx, batch, tooLarge, out)
	}
	return out
}

// isolate produces again, one at a time, the records that failed with
// MESSAGE_TOO_LARGE together. The broker refuses a partition's whole
// produce batch when it is over max.message.bytes, so the valid records
// that shared a batch with one too large failed with it: each is now
// acknowledged or refused on its own, and only a record refused alone is
// parked. A record not tried before ctx ends is retried later.
func (p *Publisher) isolate(ctx context.Context, batch []outbox.Message, idx []int, out []error) {
	p.isolating.Lock()
	defer p.isolating.Unlock()
	for _, i := range idx {
		if err := ctx.Err(); err != nil {
			out[i] = fmt.Errorf("kafkaoutbox: refused with a batch too large, not retried alone: %w", err)
			continue
		}
		err := p.cl.ProduceSync(ctx, record(batch[i])).FirstErr()
		switch {
		case err == nil:
			out[i] = nil
		default:
			out[i] = classify(err)
		}
	}
}

func isTooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// record is m as a Kafka record.
func record(m outbox.Message) *kgo.Record {
	r := &kgo.Record{Topic: m.Destination, Value: m.Payload}
	if m.OrderingKey != "" {
		r.Key = []byte(m.OrderingKey)
	}
	r.Headers = make([]kgo.RecordHeader, 0, len(m.Headers)+1)
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: MessageIDHeader, Value: []byte(m.ID)})
	for k, v := range m.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return r
}

func classify(err error) error {
	for _, p := range []struct {
		err   error
		class string
	}{
		{kerr.MessageTooLarge, outbox.ReasonTooLarge}, {kerr.RecordListTooLarge, outbox.ReasonTooLarge},
		{kerr.InvalidRecord, outbox.ReasonRejected}, {kerr.InvalidTopicException, outbox.ReasonInvalidDestination},
		{kerr.TopicAuthorizationFailed, outbox.ReasonNotAuthorized},
	} {
		if errors.Is(err, p.err) {
			return outbox.PermanentAs(p.class, fmt.Errorf("kafkaoutbox: %w", err))
		}
	}
	return fmt.Errorf("kafkaoutbox: %w", err)
}

// configError is the *idem.ConfigError of package kafkaoutbox.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "kafkaoutbox", Field: field, Reason: reason}
}
