package amqpoutbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outbox"
)

// OrderingKeyHeader carries a message's ordering key (when it has one).
const OrderingKeyHeader = "idem-ordering-key"

// chunk is the most messages one Publish has in flight before waiting
// for their confirms. The returns buffer holds returnsBuffer of them: a
// return is buffered before its message's ack is processed, and a full
// buffer only stalls the channel until a waiting batch gives up (its
// context) and drains it.
const (
	chunk         = 1024
	returnsBuffer = 4 * chunk
)

// closeWait bounds the wait for the broker's close-ok when a broken
// connection is dropped: a black-holed link never answers.
const closeWait = time.Second

// Config configures a Publisher. The zero value (or nil) works.
type Config struct {
	// RouteFunc maps a message to its exchange and routing key. Default:
	// Destination "exchange/routing-key", or, without a "/", the default
	// exchange with Destination as the routing key (the queue's name).
	RouteFunc func(m outbox.Message) (exchange, routingKey string)
	// DialFunc opens the connection (again after it broke); it should
	// bound its own time, since Publish waits for it. Default: the URL
	// given to New, dialled like amqp.Dial (10 s heartbeats) except that
	// the TCP connect and the AMQP handshake end with the Publish's
	// context, so a broker that accepts connections and never answers
	// costs one PublishTimeout, not amqp.Dial's 30 s.
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
	url string

	// mu guards the fields below. A batch holds it while it publishes,
	// not while it awaits its confirms, so the relay's concurrent passes
	// have their batches in flight together on the one channel.
	mu       sync.Mutex
	conn     *amqp.Connection
	ch       *amqp.Channel
	returns  chan amqp.Return
	returned map[string]amqp.Return // drained returns, by message ID, for the batch that owns them
	closed   bool
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
	}
	if c.RouteFunc == nil {
		c.RouteFunc = Route
	}
	return &Publisher{cfg: c, url: url}, nil
}

// dial opens a connection with DialFunc or, by default, within ctx.
func (p *Publisher) dial(ctx context.Context) (*amqp.Connection, error) {
	if p.cfg.DialFunc != nil {
		return p.cfg.DialFunc()
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	return amqp.DialConfig(p.url, amqp.Config{
		Heartbeat: 10 * time.Second,
		Locale:    "en_US",
		Dial: func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The handshake's deadline; amqp091 clears it once the
			// connection is open, and heartbeats take over.
			if err := conn.SetDeadline(deadline); err != nil {
				_ = conn.Close()
				return nil, err
			}
			return conn, nil
		},
	})
}

// Close closes the channel and the connection. Publish fails afterwards.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return p.resetLocked()
}

// resetLocked drops the channel and the connection (closing the
// connection closes its channel), waiting at most closeWait for the
// broker's answer.
func (p *Publisher) resetLocked() error {
	var err error
	if p.conn != nil {
		err = p.conn.CloseDeadline(time.Now().Add(closeWait))
	}
	p.ch, p.conn, p.returns, p.returned = nil, nil, nil, nil
	var ne net.Error
	if errors.Is(err, amqp.ErrClosed) || errors.As(err, &ne) && ne.Timeout() {
		err = nil
	}
	return err
}

func (p *Publisher) channelLocked(ctx context.Context) error {
	if p.closed {
		return errors.New("amqpoutbox: publisher closed")
	}
	if p.ch != nil && !p.ch.IsClosed() {
		return nil
	}
	_ = p.resetLocked()
	conn, err := p.dial(ctx)
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
	p.returns = ch.NotifyReturn(make(chan amqp.Return, returnsBuffer))
	p.returned = map[string]amqp.Return{}
	return nil
}

// Publish publishes the batch and waits for each confirm (or ctx).
func (p *Publisher) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := make([]error, len(batch))
	for lo := 0; lo < len(batch); lo += chunk {
		hi := min(lo+chunk, len(batch))
		p.publishChunk(ctx, batch[lo:hi], errs[lo:hi])
	}
	return errs
}

func (p *Publisher) publishChunk(ctx context.Context, batch []outbox.Message, errs []error) {
	p.mu.Lock()
	if err := p.channelLocked(ctx); err != nil {
		p.mu.Unlock()
		for i := range errs {
			errs[i] = err
		}
		return
	}
	// This channel's returns, even if another batch drops the channel
	// while this one awaits its confirms.
	ch, rets, returned := p.ch, p.returns, p.returned
	confirms := make([]*amqp.DeferredConfirmation, len(batch))
	broken := false
	for i, m := range batch {
		delete(returned, m.ID) // a stale return of an earlier attempt
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
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, ex, key, true, false, msg)
		if err != nil {
			errs[i] = fmt.Errorf("amqpoutbox: publish: %w", err)
			broken = true
			continue
		}
		confirms[i] = dc
	}
	p.mu.Unlock()

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

	p.mu.Lock()
	defer p.mu.Unlock()
	// Every return was buffered before its message's ack was processed;
	// returns of other batches in flight are kept for them.
	for drained := false; !drained; {
		select {
		case r := <-rets:
			returned[r.MessageId] = r
		default:
			drained = true
		}
	}
	for i, m := range batch {
		if r, ok := returned[m.ID]; ok {
			delete(returned, m.ID)
			if errs[i] == nil {
				errs[i] = outbox.Permanent(fmt.Errorf("amqpoutbox: returned by the broker: %d %s", r.ReplyCode, r.ReplyText))
			}
		}
	}
	if broken && p.ch == ch { // not a channel dialled since
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
