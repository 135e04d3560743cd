package inbox

import (
	"context"
	"strconv"
)

// Processor is what a broker adapter (natsinbox, amqpinbox, kafkainbox)
// needs from an inbox: *Inbox implements it. Wrap or fake it in tests, or
// to add tracing around each message.
type Processor interface {
	Process(ctx context.Context, consumer, messageID string, h Handler) (Outcome, error)
}

var _ Processor = (*Inbox)(nil)

// DeliveryOutcome is what a broker adapter did with one delivery, as an
// Observer sees it.
type DeliveryOutcome uint8

const (
	// DeliveryProcessed: the handler ran and committed; the delivery was acked.
	DeliveryProcessed DeliveryOutcome = iota + 1
	// DeliveryDuplicate: processed before; acked without running the handler.
	DeliveryDuplicate
	// DeliveryRetried: an attempt failed and the message will be tried
	// again (in place, or redelivered later).
	DeliveryRetried
	// DeliveryDeadLettered: poison, moved to the dead-letter destination.
	DeliveryDeadLettered
)

// String returns "processed", "duplicate", "retried", "dead_lettered"
// (the outcome label of idem_inbox_messages_total) or "DeliveryOutcome(n)".
func (o DeliveryOutcome) String() string {
	switch o {
	case DeliveryProcessed:
		return "processed"
	case DeliveryDuplicate:
		return "duplicate"
	case DeliveryRetried:
		return "retried"
	case DeliveryDeadLettered:
		return "dead_lettered"
	}
	return "DeliveryOutcome(" + strconv.Itoa(int(o)) + ")"
}

// Delivery is one observation of a broker adapter.
type Delivery struct {
	Adapter  string // "nats", "amqp" or "kafka"
	Consumer string // the inbox consumer name (the adapter's Config.Consumer)
	Outcome  DeliveryOutcome
}

// An Observer is told what the broker adapters do with each delivery, so
// that a metrics or tracing package can count it without the adapters (or
// this package) importing one: promidem.NewInboxObserver counts
// idem_inbox_messages_total{adapter, consumer, outcome}. ObserveDelivery
// is called on the adapter's workers, concurrently, once per outcome: it
// must be safe for concurrent use and should return quickly.
type Observer interface {
	ObserveDelivery(d Delivery)
}

// ObserverFunc is a function that is an Observer.
type ObserverFunc func(d Delivery)

// ObserveDelivery calls f(d).
func (f ObserverFunc) ObserveDelivery(d Delivery) { f(d) }

// DeliveryStats are a broker adapter's counters since its subscriber was
// created (the Stats method of natsinbox, amqpinbox and kafkainbox), the
// same outcomes an Observer is told of.
type DeliveryStats struct {
	Processed    uint64 // the handler ran and committed; acked
	Duplicates   uint64 // processed before; acked without running the handler
	Retried      uint64 // attempts that failed or came early and will be tried again (in place, parked, or redelivered)
	DeadLettered uint64 // poison stored at the dead-letter destination, then settled
	Parked       int    // early messages kept aside now, unsettled (a gauge)
}
