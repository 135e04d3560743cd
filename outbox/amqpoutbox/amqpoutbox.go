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
// confirmed on the broker's ack. Refused for good, and parked by the
// relay: a message the broker returns as unroutable, and one whose
// exchange does not exist (the broker closes the channel with 404
// NOT_FOUND naming it). Retried: a nack, a lost or black-holed
// connection, a channel the broker closed for any other reason. It dials
// lazily and again after a failure, so a broker that is away is retried
// with the relay's backoff.
type Publisher struct {
	cfg Config
	url string

	// mu guards the fields below. A batch holds it while it publishes,
	// not while it awaits its confirms, so the relay's concurrent passes
	// have their batches in flight together on the one channel.
	mu     sync.Mutex
	s      *session
	closed bool
}

// session is one connection and its confirm-mode channel. The batches in
// flight on it keep it after the Publisher has dropped it.
type session struct {
	conn     *amqp.Connection
	ch       *amqp.Channel
	netConn  net.Conn // the default dial's TCP connection, nil with DialFunc
	returns  chan amqp.Return
	returned map[string]amqp.Return // drained returns, by message ID, for the batch that owns them
	closes   chan *amqp.Error       // the channel's close (a connection's close closes its channels)

	// guarded by Publisher.mu
	dead bool
	err  *amqp.Error // why the broker or the library closed the channel, if known
}

// deadLocked reports whether the channel has closed, recording why.
func (s *session) deadLocked() bool {
	if s.dead {
		return true
	}
	select {
	case e, ok := <-s.closes:
		s.dead = true
		if ok && e != nil {
			s.err = e
		}
	default:
		if s.ch.IsClosed() {
			s.dead = true
		}
	}
	return s.dead
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

// dial opens a connection with DialFunc or, by default, within ctx; the
// default also returns its TCP connection.
func (p *Publisher) dial(ctx context.Context) (*amqp.Connection, net.Conn, error) {
	if p.cfg.DialFunc != nil {
		c, err := p.cfg.DialFunc()
		return c, nil, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	var tcp net.Conn
	c, err := amqp.DialConfig(p.url, amqp.Config{
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
			tcp = conn
			return conn, nil
		},
	})
	return c, tcp, err
}

// Close closes the channel and the connection. Publish fails afterwards.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return p.resetLocked()
}

// resetLocked drops the session (closing the connection closes its
// channel), waiting at most closeWait for the broker's answer.
func (p *Publisher) resetLocked() error {
	s := p.s
	p.s = nil
	if s == nil {
		return nil
	}
	s.dead = true
	err := s.conn.CloseDeadline(time.Now().Add(closeWait))
	var ne net.Error
	if errors.Is(err, amqp.ErrClosed) || errors.As(err, &ne) && ne.Timeout() {
		err = nil
	}
	return err
}

// sessionLocked returns the open session, dialling a new one when there
// is none or the last one's channel or connection has closed.
func (p *Publisher) sessionLocked(ctx context.Context) (*session, error) {
	if p.closed {
		return nil, errors.New("amqpoutbox: publisher closed")
	}
	if p.s != nil && !p.s.deadLocked() {
		return p.s, nil
	}
	_ = p.resetLocked()
	conn, tcp, err := p.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("amqpoutbox: dial: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.CloseDeadline(time.Now().Add(closeWait))
		return nil, fmt.Errorf("amqpoutbox: channel: %w", err)
	}
	p.s = &session{
		conn:     conn,
		ch:       ch,
		netConn:  tcp,
		returns:  ch.NotifyReturn(make(chan amqp.Return, returnsBuffer)),
		returned: map[string]amqp.Return{},
		closes:   ch.NotifyClose(make(chan *amqp.Error, 1)),
	}
	return p.s, nil
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
	s, err := p.sessionLocked(ctx)
	if err != nil {
		p.mu.Unlock()
		for i := range errs {
			errs[i] = err
		}
		return
	}
	// A write that blocks (a full socket buffer on a dead link) ends with
	// ctx: its deadline is moved to now, the write fails and amqp091
	// closes the connection.
	stopWatch := func() bool { return true }
	if s.netConn != nil {
		stopWatch = context.AfterFunc(ctx, func() { _ = s.netConn.SetWriteDeadline(time.Now()) })
	}
	confirms := make([]*amqp.DeferredConfirmation, len(batch))
	exchanges := make([]string, len(batch))
	broken := false
	for i, m := range batch {
		delete(s.returned, m.ID) // a stale return of an earlier attempt
		ex, key := p.cfg.RouteFunc(m)
		exchanges[i] = ex
		if broken {
			errs[i] = errors.New("amqpoutbox: publish: the channel broke earlier in the batch")
			continue
		}
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
		dc, err := s.ch.PublishWithDeferredConfirmWithContext(ctx, ex, key, true, false, msg)
		if err != nil {
			errs[i] = fmt.Errorf("amqpoutbox: publish: %w", err)
			broken = true
			continue
		}
		confirms[i] = dc
	}
	if !stopWatch() { // the deadline was moved: the connection is spent
		broken = true
	}
	p.mu.Unlock()

	// A closed channel resolves its outstanding confirms as nacks (the
	// library does it), so this wait ends with ctx, an answer for each
	// message, or the channel's end.
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
	// returns of other batches in flight are kept for them. The library
	// closes the returns channel with the channel.
	for drained := false; !drained; {
		select {
		case r, ok := <-s.returns:
			if !ok {
				drained = true
				break
			}
			s.returned[r.MessageId] = r
		default:
			drained = true
		}
	}
	dead := s.deadLocked()
	missing, _ := missingExchange(s.err)
	for i, m := range batch {
		if r, ok := s.returned[m.ID]; ok {
			delete(s.returned, m.ID)
			if errs[i] == nil {
				class := outbox.ReasonRejected
				if r.ReplyCode == amqp.NoRoute {
					class = outbox.ReasonNoRoute
				}
				errs[i] = outbox.PermanentAs(class, fmt.Errorf("amqpoutbox: returned by the broker: %d %s", r.ReplyCode, r.ReplyText))
			}
			continue
		}
		if errs[i] == nil || !dead {
			continue
		}
		switch {
		case missing != "" && exchanges[i] == missing:
			errs[i] = outbox.PermanentAs(outbox.ReasonMissingExchange, fmt.Errorf("amqpoutbox: exchange %q does not exist: %d %s", missing, s.err.Code, s.err.Reason))
		case s.err != nil:
			errs[i] = fmt.Errorf("amqpoutbox: the channel closed: %d %s", s.err.Code, s.err.Reason)
		default:
			errs[i] = errors.New("amqpoutbox: the channel closed")
		}
	}
	if (broken || dead) && p.s == s { // not a session dialled since
		_ = p.resetLocked()
	}
}

// missingExchange returns the exchange named by a channel close with 404
// NOT_FOUND "no exchange 'x' in vhost 'v'", the broker's answer to a
// publish to an exchange that does not exist.
func missingExchange(e *amqp.Error) (string, bool) {
	if e == nil || e.Code != amqp.NotFound {
		return "", false
	}
	_, rest, ok := strings.Cut(e.Reason, "no exchange '")
	if !ok {
		return "", false
	}
	i := strings.LastIndex(rest, "' in vhost '")
	if i < 0 {
		return "", false
	}
	return rest[:i], true
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
