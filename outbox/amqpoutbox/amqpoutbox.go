package amqpoutbox

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outbox"
)

// OrderingKeyHeader carries a message's ordering key (when it has one).
const OrderingKeyHeader = "idem-ordering-key"

// chunk is the most messages published before waiting for their
// confirms; it is also the capacity of the returns buffer, so a return is
// always buffered before its message's ack is processed.
const chunk = 1024

// Config configures a Publisher. The zero value (or nil) works.
type Config struct {
	// RouteFunc maps a message to its exchange and routing key. Default:
	// Destination "exchange/routing-key", or, without a "/", the default
	// exchange with Destination as the routing key (the queue's name).
	RouteFunc func(m outbox.Message) (exchange, routingKey string)
	// DialFunc opens the connection (again after it broke). Default:
	// amqp.Dial of the URL given to New.
	DialFunc func() (*amqp.Connection, error)
}

// Route is the default RouteFunc.
func Route(m outbox.Message) (exchange, routingKey string) {
	if ex, key, ok := strings.Cut(m.Destination, "/"); ok {
		return ex, key
	}
	return "", m.Destination
}

// Publisher publishes outbox messages to RabbitMQ on a channel in confirm
// mode, mandatory, persistent, with the message-id property set to the
// message's ID (what amqpinbox reads by default). A message counts as
// confirmed on the broker's ack; an unroutable one (returned) is refused
// for good and parked; a nack or a broken connection is retried. It dials
// lazily and again after a failure, so a broker that is away is retried
// with the relay's backoff.
type Publisher struct {
	cfg Config

	mu      sync.Mutex // one batch at a time on the channel
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	closed  bool
}

var _ outbox.Publisher = (*Publisher)(nil)

// New returns a Publisher for the broker at url (ignored when
// cfg.DialFunc is set). It does not connect yet.
func New(url string, cfg *Config) (*Publisher, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.DialFunc == nil {
		if url == "" {
			return nil, configError("url", "empty: a URL or Config.DialFunc is required")
		}
		if _, err := amqp.ParseURI(url); err != nil {
			return nil, configError("url", badURL(url, err))
		}
		c.DialFunc = func() (*amqp.Connection, error) { return amqp.Dial(url) }
	}
	if c.RouteFunc == nil {
		c.RouteFunc = Route
	}
	return &Publisher{cfg: c}, nil
}

// Close closes the channel and the connection. Publish fails afterwards.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return p.resetLocked()
}

func (p *Publisher) resetLocked() error {
	var err error
	if p.ch != nil {
		err = p.ch.Close()
	}
	if p.conn != nil {
		err = errors.Join(err, p.conn.Close())
	}
	p.ch, p.conn, p.returns = nil, nil, nil
	if errors.Is(err, amqp.ErrClosed) {
		err = nil
	}
	return err
}

func (p *Publisher) channelLocked() error {
	if p.closed {
		return errors.New("amqpoutbox: publisher closed")
	}
	if p.ch != nil && !p.ch.IsClosed() {
		return nil
	}
	_ = p.resetLocked()
	conn, err := p.cfg.DialFunc()
	if err != nil {
		return fmt.Errorf("amqpoutbox: dial: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("amqpoutbox: channel: %w", err)
	}
	p.conn, p.ch = conn, ch
	p.returns = ch.NotifyReturn(make(chan amqp.Return, chunk))
	return nil
}

// Publish publishes the batch and waits for each confirm (or ctx).
func (p *Publisher) Publish(ctx context.Context, batch []outbox.Message) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := make([]error, len(batch))
	for lo := 0; lo < len(batch); lo += chunk {
		hi := min(lo+chunk, len(batch))
		p.publishChunk(ctx, batch[lo:hi], errs[lo:hi])
	}
	return errs
}

func (p *Publisher) publishChunk(ctx context.Context, batch []outbox.Message, errs []error) {
	if err := p.channelLocked(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return
	}
	confirms := make([]*amqp.DeferredConfirmation, len(batch))
	broken := false
	for i, m := range batch {
		ex, key := p.cfg.RouteFunc(m)
		msg := amqp.Publishing{MessageId: m.ID, Body: m.Payload, DeliveryMode: amqp.Persistent}
		if len(m.Headers) > 0 || m.OrderingKey != "" {
			msg.Headers = amqp.Table{}
			for k, v := range m.Headers {
				msg.Headers[k] = v
			}
			if m.OrderingKey != "" {
				msg.Headers[OrderingKeyHeader] = m.OrderingKey
			}
		}
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, ex, key, true, false, msg)
		if err != nil {
			errs[i] = fmt.Errorf("amqpoutbox: publish: %w", err)
			broken = true
			continue
		}
		confirms[i] = dc
	}
	for i, dc := range confirms {
		if dc == nil {
			continue
		}
		acked, err := dc.WaitContext(ctx)
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("amqpoutbox: waiting for the confirm: %w", err)
			broken = true
		case !acked:
			errs[i] = errors.New("amqpoutbox: the broker nacked the message")
		}
	}
	// Every return was buffered before its message's ack was processed.
	for {
		select {
		case r := <-p.returns:
			for i, m := range batch {
				if m.ID == r.MessageId && errs[i] == nil {
					errs[i] = outbox.Permanent(fmt.Errorf("amqpoutbox: returned by the broker: %d %s", r.ReplyCode, r.ReplyText))
				}
			}
			continue
		default:
		}
		break
	}
	if broken {
		_ = p.resetLocked()
	}
}

// configError is the *idem.ConfigError of package amqpoutbox.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "amqpoutbox", Field: field, Reason: reason}
}

// badURL says why amqp.ParseURI refused rawURL without repeating its
// password: the URL is shown redacted, and when net/url cannot parse it at
// all (whose error would quote it whole) it is not shown.
func badURL(rawURL string, err error) string {
	u, perr := neturl.Parse(rawURL)
	if perr != nil {
		return "not a URL (percent-encode reserved characters such as @ : / ? # in the user name or password)"
	}
	return strconv.Quote(u.Redacted()) + ": " + err.Error()
}
