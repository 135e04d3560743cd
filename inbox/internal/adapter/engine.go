package adapter

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/inbox"
)

// Broker is what the Engine needs from one subscriber's broker to settle
// a message of type M (a JetStream message, an AMQP delivery, a Kafka
// record with its partition's state). Its methods say how; the Engine
// decides when. They are called from the subscriber's workers,
// concurrently for different messages.
type Broker[M any] interface {
	// MessageID returns m's business message ID. An error, or "", fails
	// the attempt; wrap it with inbox.Permanent to dead-letter m at once.
	MessageID(m M) (string, error)
	// Key names m for its poison budget and in the parking lot; id is
	// MessageID's answer, "" when it failed.
	Key(m M, id string) string
	// Ack settles m after its transaction committed; applied is false for
	// a duplicate.
	Ack(m M, applied bool) error
	// HandBack gives m back to the broker for another delivery, after
	// holding it for after (zero: at once).
	HandBack(ctx context.Context, m M, after time.Duration) error
	// Redeliver has m delivered again after a wait of after, without
	// holding the worker (a delayed negative ack, a retry queue). Never
	// called on an in-place engine.
	Redeliver(ctx context.Context, m M, after time.Duration) error
	// Wait holds m for d while its failure lasts, keeping it from being
	// redelivered (reported in progress, its partition paused), and
	// reports whether d elapsed; false when the wait was cut short (the
	// subscriber stopping, ctx ending, the partition revoked). f.Held: no
	// further attempt, wait until cut short.
	Wait(ctx context.Context, m M, d time.Duration, f Failure) bool
	// DeadLetter stores the copy of m described by e at the dead-letter
	// destination. nil means the copy is known to be stored; m itself is
	// settled by Discard after it.
	DeadLetter(ctx context.Context, m M, e Envelope) error
	// Discard settles m for good after its copy was dead-lettered (a
	// terminate, an ack, a reject to the queue's own dead-letter
	// exchange).
	Discard(m M, reason string) error
}

// Envelope is what a dead-lettered copy says about its original, besides
// the original's own data and headers.
type Envelope struct {
	Reason   string // the last error, at most MaxErrorBytes
	Failures int    // attempts that failed with an ordinary error
	Attempts int    // attempts of this delivery, infrastructure failures included
}

// Failure is the state of a message an in-place wait holds.
type Failure struct {
	Attempts int   // attempts of this delivery so far, infrastructure failures included
	Err      error // the last failure
	Held     bool  // no further attempt until the wait is cut short
}

// Lot is where an Engine parks early messages (inbox.ErrNotYet): a
// *Parking, or a broker's own (Kafka keeps them in its partition workers).
type Lot[M any] interface {
	// MayPark reports whether m, early, may be parked now.
	MayPark(m M) bool
	// Gen moves whenever a message was applied.
	Gen() uint64
	// Park keeps m under key; false when there is no room.
	Park(key string, m M) bool
	// Forget drops what the lot remembers of key (m was settled).
	Forget(key string)
}

// Engine is the consumer policy every broker adapter runs: one attempt
// through the inbox (the handler's panic turned into an error), the
// verdict on its error, and what becomes of the message: acked, retried
// in place through an infrastructure failure, parked or handed back when
// early, handed back with backoff after an ordinary failure, dead-lettered
// when poison or permanently failing, handed back at once when stopping.
// It counts the poison budget per message in memory (FailureCounts) and
// reports each outcome to Metrics.
//
// Set its fields before the first Handle; it is then safe for concurrent
// use.
type Engine[M any] struct {
	Package   string // "natsinbox": the prefix of its errors and log records
	Processor inbox.Processor
	Consumer  string // the inbox consumer name
	Handler   func(ctx context.Context, tx *sql.Tx, m M) error
	Broker    Broker[M]
	Lot       Lot[M] // nil: park nothing
	Metrics   *Metrics
	Log       *slog.Logger

	// MaxFailures: the ordinary failure that makes it this many is
	// dead-lettered.
	MaxFailures      int
	Backoff          func(failures int) time.Duration
	TransientBackoff func(attempt int) time.Duration
	ProcessTimeout   time.Duration
	// DeadLetters: the subscriber has a dead-letter destination. Without
	// one, poison is handed back with backoff (in place: retried, and a
	// permanent failure held).
	DeadLetters bool
	// InPlace: every retry happens inside Handle, after Broker.Wait
	// (Kafka: a partition's order forbids handing a record back).
	InPlace bool
	// Quit is closed when the subscriber stops: in-place waits end, and
	// after the first infrastructure failure seen since, messages are
	// handed back without an attempt (the Stop bound).
	Quit <-chan struct{}

	fails FailureCounts // key → ordinary failures: the poison budget
	early FailureCounts // key → times it came early: its backoff
	down  atomic.Bool   // stopping during an infrastructure failure
}

// Handle runs m through the inbox until it is settled, parked, or handed
// back, and returns what became of it; the error is the reason for any
// action but Acked and AckedDuplicate. When m was applied, the parked
// messages run again (a *Parking lot), since one may have waited for it.
func (e *Engine[M]) Handle(ctx context.Context, m M) (inbox.Action, error) {
	act, err := e.handle(ctx, m)
	if act == inbox.Acked {
		if p, ok := e.Lot.(*Parking[M]); ok {
			p.Applied(func(it Parked[M]) bool {
				act, _ := e.handle(ctx, it.Msg)
				return act == inbox.Acked
			})
		}
	}
	return act, err
}

func (e *Engine[M]) handle(ctx context.Context, m M) (inbox.Action, error) {
	if e.down.Load() {
		// Stopping during an outage: an attempt would only wait for the
		// database. Hand the message back at once.
		e.settled("hand back", e.Broker.HandBack(ctx, m, 0))
		return inbox.HandedBack, errStopping{e.Package}
	}
	tries, waits, rerun := 0, 0, 0
	for {
		tries++
		parking := e.mayPark(m)
		var gen uint64
		if parking {
			gen = e.Lot.Gen()
		}
		actx, cancel := AttemptContext(ctx, e.ProcessTimeout)
		if parking {
			actx = inbox.WithoutEarlyWait(actx) // parked instead, below
		}
		id, out, err := e.attempt(actx, m)
		verdict := Classify(actx, err)
		cancel()
		key := e.Broker.Key(m, id)
		if err == nil {
			// The transaction has committed: only now may the broker forget
			// the message. If the ack is lost, the redelivery is a Duplicate.
			e.settled("ack", e.Broker.Ack(m, out != inbox.Duplicate))
			e.fails.Forget(key)
			e.early.Forget(key)
			if e.Lot != nil {
				e.Lot.Forget(key)
			}
			if out == inbox.Duplicate {
				e.Metrics.Inc(inbox.DeliveryDuplicate)
				e.debug(ctx, "duplicate acked", id)
				return inbox.AckedDuplicate, nil
			}
			e.Metrics.Inc(inbox.DeliveryProcessed)
			e.debug(ctx, "processed", id)
			return inbox.Acked, nil
		}
		if ctx.Err() != nil {
			// Stopping hard: not the message's fault. Hand it back now.
			e.settled("hand back", e.Broker.HandBack(ctx, m, 0))
			return inbox.HandedBack, err
		}
		log := e.Log.With("id", id, "key", key, "attempt", tries, "err", err)
		var delay time.Duration
		switch verdict {
		case Transient:
			// Not the message's fault: keep it and try again when the
			// infrastructure is back; the poison budget is not touched.
			e.Metrics.Inc(inbox.DeliveryRetried)
			if e.Stopping() {
				e.down.Store(true)
				log.Warn(e.Package + ": infrastructure failure while stopping: handed back")
				e.settled("hand back", e.Broker.HandBack(ctx, m, 0))
				return inbox.HandedBack, err
			}
			waits++
			delay = e.TransientBackoff(waits)
			log.Warn(e.Package+": infrastructure failure, retrying in place", "delay", delay)
		case NotYet:
			// Its predecessor has not been applied yet; it may be right
			// behind this message. Park it until another message is applied
			// (at once again if one was applied meanwhile), or have it
			// delivered later; never counted as a failure.
			e.Metrics.Inc(inbox.DeliveryRetried)
			if parking {
				if e.Lot.Gen() != gen && rerun < 3 {
					rerun++
					tries--
					continue
				}
				if e.Lot.Park(key, m) {
					log.Debug(e.Package + ": message came early, parked")
					return inbox.Parked, err
				}
			}
			if e.Lot != nil {
				e.Lot.Forget(key) // no longer parked: a later parking starts its clock again
			}
			if !e.InPlace {
				delay = e.EarlyBackoff(key)
				log.Info(e.Package+": message came early, redelivery scheduled", "delay", delay)
				return e.redeliver(ctx, m, delay, err)
			}
			waits++
			delay = e.TransientBackoff(waits)
			log.Info(e.Package+": message came early and cannot be parked, retrying in place", "delay", delay)
			if !e.Broker.Wait(ctx, m, delay, Failure{Attempts: tries, Err: err}) {
				return e.handBack(ctx, m, err)
			}
			continue
		case Permanent:
			return e.poison(ctx, m, key, tries, e.fails.Add(key), err, true, log)
		default:
			failures := e.fails.Add(key)
			if failures >= e.MaxFailures {
				act, perr := e.poison(ctx, m, key, tries, failures, err, false, log)
				if act != 0 {
					return act, perr
				}
				continue
			}
			e.Metrics.Inc(inbox.DeliveryRetried)
			delay = e.Backoff(failures)
			log.Warn(e.Package+": processing failed, redelivery scheduled", "failures", failures, "delay", delay)
			if !e.InPlace {
				return e.redeliver(ctx, m, delay, err)
			}
		}
		if !e.Broker.Wait(ctx, m, delay, Failure{Attempts: tries, Err: err}) {
			return e.handBack(ctx, m, err)
		}
	}
}

// poison deals with a message that is to be dead-lettered: failed
// permanently, or failures times with an ordinary error. It returns 0
// when an in-place engine is to try the message again.
func (e *Engine[M]) poison(ctx context.Context, m M, key string, tries, failures int, cause error, permanent bool, log *slog.Logger) (inbox.Action, error) {
	if !e.DeadLetters {
		if e.InPlace && permanent {
			log.Error(e.Package + ": permanent failure and no dead-letter destination: held until the subscriber lets go of it")
			e.Broker.Wait(ctx, m, -1, Failure{Attempts: tries, Err: cause, Held: true})
			return e.handBack(ctx, m, cause)
		}
		e.Metrics.Inc(inbox.DeliveryRetried)
		delay := e.Backoff(failures)
		log.Error(e.Package+": poison message kept (no dead-letter destination): redelivery scheduled", "failures", failures, "delay", delay)
		return e.later(ctx, m, delay, cause, tries)
	}
	env := Envelope{Reason: Truncate(cause.Error(), MaxErrorBytes), Failures: failures, Attempts: tries}
	if err := e.Broker.DeadLetter(ctx, m, env); err != nil {
		e.Metrics.Inc(inbox.DeliveryRetried)
		delay := e.Backoff(max(failures, 1))
		log.Error(e.Package+": dead letter not stored; poison message kept, redelivery scheduled", "delay", delay, "dead_letter_err", err)
		if e.InPlace {
			return e.later(ctx, m, delay, cause, tries)
		}
		e.settled("hand back", e.Broker.HandBack(ctx, m, delay))
		return inbox.HandedBack, errors.Join(cause, err)
	}
	e.Metrics.Inc(inbox.DeliveryDeadLettered)
	e.fails.Forget(key)
	e.early.Forget(key)
	log.Error(e.Package+": poison message dead-lettered", "failures", failures)
	e.settled("settle the dead-lettered original", e.Broker.Discard(m, env.Reason))
	return inbox.DeadLettered, cause
}

// later has m tried again after delay: redelivered, or, in place, after a
// wait (0: try again).
func (e *Engine[M]) later(ctx context.Context, m M, delay time.Duration, cause error, tries int) (inbox.Action, error) {
	if !e.InPlace {
		return e.redeliver(ctx, m, delay, cause)
	}
	if !e.Broker.Wait(ctx, m, delay, Failure{Attempts: tries, Err: cause}) {
		return e.handBack(ctx, m, cause)
	}
	return 0, nil
}

func (e *Engine[M]) redeliver(ctx context.Context, m M, delay time.Duration, cause error) (inbox.Action, error) {
	e.settled("redeliver", e.Broker.Redeliver(ctx, m, delay))
	return inbox.HandedBack, cause
}

func (e *Engine[M]) handBack(ctx context.Context, m M, cause error) (inbox.Action, error) {
	e.settled("hand back", e.Broker.HandBack(ctx, m, 0))
	return inbox.HandedBack, cause
}

// attempt extracts the ID and runs m through the inbox once.
func (e *Engine[M]) attempt(ctx context.Context, m M) (string, inbox.Outcome, error) {
	id, err := e.Broker.MessageID(m)
	if err == nil && id == "" {
		err = errNoID
	}
	if err != nil {
		// No usable ID, no dedup: processing it could repeat an effect on
		// every redelivery. Never fall back to another key.
		return "", 0, fmt.Errorf("%s: message ID: %w", e.Package, err)
	}
	out, err := e.Processor.Process(ctx, e.Consumer, id, func(ctx context.Context, tx *sql.Tx) error {
		return CallHandler(e.Package, func() error { return e.Handler(ctx, tx, m) })
	})
	return id, out, err
}

// mayPark reports whether m, if early, is parked. A *Parking lot parks
// nothing once Stop was called (its keeper hands every parked message
// back); a broker's own lot decides alone (Kafka keeps a record parked
// while stopping: the partition's next owner reads it again).
func (e *Engine[M]) mayPark(m M) bool {
	if e.Lot == nil || !e.Lot.MayPark(m) {
		return false
	}
	_, kept := e.Lot.(*Parking[M])
	return !kept || !e.Stopping()
}

// errNoID fails an attempt whose MessageID returned "" without an error.
var errNoID = errors.New("empty message ID")

// EarlyBackoff counts one more early arrival of key and returns the wait
// before its next delivery.
func (e *Engine[M]) EarlyBackoff(key string) time.Duration {
	return e.TransientBackoff(e.early.Add(key))
}

// Stopping reports whether Quit is closed.
func (e *Engine[M]) Stopping() bool {
	select {
	case <-e.Quit:
		return true
	default:
		return false
	}
}

// KeepParked runs until Quit or stop is closed or ctx ends, then hands
// every parked message back at once. Every tick, it hands back (with
// EarlyBackoff) the messages parked longer than timeout, and calls keep
// for the others (to report them in progress; nil: nothing to do).
func (e *Engine[M]) KeepParked(ctx context.Context, lot *Parking[M], tick, timeout time.Duration, keep func(M), stop <-chan struct{}) {
	t := time.NewTicker(tick)
	defer t.Stop()
	if keep == nil {
		keep = func(M) {}
	}
	for {
		select {
		case <-e.Quit:
		case <-stop:
		case <-ctx.Done():
		case <-t.C:
			for _, p := range lot.Sweep(time.Now().Add(-timeout), keep) {
				delay := e.EarlyBackoff(p.Key)
				e.Log.Info(e.Package+": parked message still early, redelivery scheduled", "key", p.Key, "parked", time.Since(p.Since), "delay", delay)
				e.settled("redeliver", e.Broker.Redeliver(ctx, p.Msg, delay))
			}
			continue
		}
		for _, p := range lot.Close() {
			e.settled("hand back", e.Broker.HandBack(ctx, p.Msg, 0))
		}
		return
	}
}

func (e *Engine[M]) debug(ctx context.Context, msg, id string) {
	if e.Log.Enabled(ctx, slog.LevelDebug) {
		e.Log.Debug(e.Package+": "+msg, "id", id)
	}
}

func (e *Engine[M]) settled(what string, err error) {
	if err != nil {
		e.Log.Warn(e.Package+": "+what+" failed; the broker will deliver the message again", "err", err)
	}
}

// errStopping is the reason for a message handed back unattempted.
type errStopping struct{ pkg string }

func (e errStopping) Error() string {
	return e.pkg + ": stopping during an infrastructure failure; message handed back without an attempt"
}
