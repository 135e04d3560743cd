package natsoutbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outbox"
)

// OrderingKeyHeader carries a message's ordering key (when it has one), for
// consumers that want it.
const OrderingKeyHeader = "Idem-Ordering-Key"

// Config configures a Publisher. The zero value (or nil) works.
type Config struct {
	// SubjectFunc maps a message to its subject. Default: the message's
	// Destination.
	SubjectFunc func(m outbox.Message) string
}

// Publisher publishes outbox messages to JetStream and reports each one
// confirmed when the stream's PubAck arrived. It sets Nats-Msg-Id to the
// message's ID, so the stream drops the relay's own repeats within its
// duplicate window, and natsinbox reads the same header by default.
type Publisher struct {
	js  jetstream.JetStream
	cfg Config
}

var _ outbox.Publisher = (*Publisher)(nil)

// New returns a Publisher on js.
func New(js jetstream.JetStream, cfg *Config) (*Publisher, error) {
	if js == nil {
		return nil, configError("js", "nil jetstream.JetStream")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.SubjectFunc == nil {
		c.SubjectFunc = func(m outbox.Message) string { return m.Destination }
	}
	return &Publisher{js: js, cfg: c}, nil
}

// Publish sends the batch asynchronously and waits for every PubAck (or
// ctx). Refused for good (outbox.Permanent: the relay parks it with the
// reason): a payload over the server's max_payload or over the stream's
// MaxMsgSize (JetStream 10054), a subject that is not valid (a space, an
// empty token). Everything else — no stream for the subject, a timeout, a
// closed connection, too many pending acks — is transient: the relay
// retries it with a backoff, and a stream created later receives it.
// Application headers starting with "Nats-" (JetStream's control
// headers) are not copied: the publisher sets Nats-Msg-Id itself, and a
// copied expectation such as Nats-Expected-Last-Sequence would be refused
// on every attempt.
func (p *Publisher) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := make([]error, len(batch))
	futures := make([]jetstream.PubAckFuture, len(batch))
	for i, m := range batch {
		// Past the client's limit of pending acks (4,000 by default) each
		// async publish stalls, and gives up after a short wait; so the
		// loop checks ctx before each one, and once the client says too
		// many are stalled the rest of the batch fails with it (retried
		// later) instead of stalling in turn.
		if err := ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("natsoutbox: publish: %w", err)
			continue
		}
		if i > 0 && errors.Is(errs[i-1], jetstream.ErrTooManyStalledMsgs) {
			errs[i] = errs[i-1]
			continue
		}
		msg := nats.NewMsg(p.cfg.SubjectFunc(m))
		msg.Data = m.Payload
		for k, v := range m.Headers {
			if isControlHeader(k) {
				continue
			}
			msg.Header.Set(k, v)
		}
		if m.OrderingKey != "" {
			msg.Header.Set(OrderingKeyHeader, m.OrderingKey)
		}
		opts := []jetstream.PublishOpt{jetstream.WithMsgID(m.ID)}
		if d, ok := ctx.Deadline(); ok {
			// A stall waits at most until ctx's deadline.
			opts = append(opts, jetstream.WithStallWait(max(time.Until(d), time.Millisecond)))
		}
		f, err := p.js.PublishMsgAsync(msg, opts...)
		if err != nil {
			errs[i] = classify(err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = classify(err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("natsoutbox: waiting for the PubAck: %w", ctx.Err())
		}
	}
	return errs
}

// isControlHeader reports whether an application header is one of
// NATS's control headers (Nats-Msg-Id, Nats-Expected-Last-Sequence, …):
// the publisher sets Nats-Msg-Id itself, and an expectation copied from
// the application would make JetStream refuse the message on every
// attempt, so they are not copied.
func isControlHeader(k string) bool {
	return len(k) >= 5 && strings.EqualFold(k[:5], "Nats-")
}

// Check refuses a message that JetStream would refuse on every attempt
// and that the message alone shows: an application header named like a
// NATS control header ("Nats-" in any case: the publisher sets
// Nats-Msg-Id itself, and an expectation such as
// Nats-Expected-Last-Sequence would make the stream refuse it), or a
// Destination that is not a subject one can publish to (empty tokens,
// white space, a wildcard). Set it as outbox.Config.CheckFunc so that Enqueue
// refuses such a message in the business transaction, with
// outbox.ErrInvalidMessage. With Config.SubjectFunc the subject is known
// only to the publisher: check the Destination with a CheckFunc of your own.
func Check(m outbox.Message) error {
	for k := range m.Headers {
		if isControlHeader(k) {
			return fmt.Errorf("natsoutbox: header %q is a NATS control header (Nats-*); the relay sets Nats-Msg-Id itself", k)
		}
	}
	if !validSubject(m.Destination) {
		return fmt.Errorf("natsoutbox: destination %q is not a NATS subject one can publish to", m.Destination)
	}
	return nil
}

// validSubject reports whether s is a subject a client may publish to:
// non-empty dot-separated tokens without white space or wildcards.
func validSubject(s string) bool {
	if s == "" {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return false
		}
		if strings.ContainsFunc(tok, unicode.IsSpace) {
			return false
		}
	}
	return true
}

// classify wraps a publish error: refused for good (outbox.Permanent, the
// relay parks the message) when no retry can change it — a payload over
// the server's max_payload, over the stream's MaxMsgSize (JetStream
// error 10054), a subject that is not valid — and transient otherwise.
func classify(err error) error {
	var jsErr jetstream.JetStreamError
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return outbox.PermanentAs(outbox.ReasonTooLarge, fmt.Errorf("natsoutbox: %w", err))
	case errors.Is(err, nats.ErrBadSubject):
		return outbox.PermanentAs(outbox.ReasonInvalidDestination, fmt.Errorf("natsoutbox: %w", err))
	case errors.As(err, &jsErr) && jsErr.APIError() != nil && jsErr.APIError().ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return outbox.PermanentAs(outbox.ReasonTooLarge, fmt.Errorf("natsoutbox: %w", err))
	}
	return fmt.Errorf("natsoutbox: %w", err)
}

// configError is the *idem.ConfigError of package natsoutbox.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "natsoutbox", Field: field, Reason: reason}
}

// CheckDuplicateWindow reads the duplicate window (StreamConfig.Duplicates)
// of the stream that captures subject and returns an error saying so when
// it is shorter than the longest a relay configured with cfg may take to
// publish a message again after the stream stored it: PublishTimeout (a
// PubAck lost, the attempt given up) or PassTimeout (a relay whose host
// vanished, its claim ended on the server), plus MaxBackoff (the wait
// before the next attempt). A repeat after the window is stored again
// and reaches the consumers, whose inbox drops it; a consumer without an
// inbox applies it twice. Call it when the relay starts, and log the
// error. A relay that is down longer than the window republishes its
// unmarked messages too: no setting shows that.
func CheckDuplicateWindow(ctx context.Context, js jetstream.JetStream, subject string, cfg *outbox.RelayConfig) error {
	if js == nil {
		return configError("js", "nil jetstream.JetStream")
	}
	var c outbox.RelayConfig
	if cfg != nil {
		c = *cfg
	}
	// The relay's defaults (see outbox.RelayConfig).
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = 10 * time.Second
	}
	if c.PassTimeout <= 0 {
		c.PassTimeout = c.PublishTimeout + 20*time.Second
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 30 * time.Second
	}
	name, err := js.StreamNameBySubject(ctx, subject)
	if err != nil {
		return fmt.Errorf("natsoutbox: the stream of subject %q: %w", subject, err)
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("natsoutbox: stream %q: %w", name, err)
	}
	window := st.CachedInfo().Config.Duplicates
	worst := max(c.PublishTimeout, c.PassTimeout) + c.MaxBackoff
	if window < worst {
		return fmt.Errorf("natsoutbox: stream %q drops repeats of a Nats-Msg-Id for %v (Duplicates), less than the %v a relay with PassTimeout %v and MaxBackoff %v may take to publish a message again: repeats after the window are stored twice (the consumers' inbox must drop them)",
			name, window, worst, c.PassTimeout, c.MaxBackoff)
	}
	return nil
}
