package promidem

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/inbox"
)

// InboxObserver counts what the inbox broker adapters (natsinbox,
// amqpinbox, kafkainbox) do with deliveries: it is an inbox.Observer for
// their Config.Observer.
//
// It serves idem_inbox_messages_total{adapter, consumer, outcome}, outcome
// one of processed, duplicate, retried and dead_lettered
// (inbox.DeliveryOutcome's String). The four series of a subscriber exist
// at zero from its first delivery on.
type InboxObserver struct {
	vec  *prometheus.CounterVec
	subs sync.Map // adapter + "\x00" + consumer → *[4]prometheus.Counter
}

var _ inbox.Observer = (*InboxObserver)(nil)

// NewInboxObserver registers idem_inbox_messages_total on reg. Share one
// InboxObserver among all the subscribers of a process; a second call on
// the same Registerer returns an observer counting into the same family.
func NewInboxObserver(reg prometheus.Registerer) (*InboxObserver, error) {
	if reg == nil {
		return nil, configError("reg", "nil Registerer")
	}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_inbox_messages_total",
		Help: "Deliveries handled by an inbox broker adapter, by outcome.",
	}, []string{"adapter", "consumer", "outcome"})
	if err := reg.Register(vec); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
		if !ok {
			return nil, err
		}
		vec = existing
	}
	return &InboxObserver{vec: vec}, nil
}

var inboxOutcomes = [...]inbox.DeliveryOutcome{inbox.DeliveryProcessed, inbox.DeliveryDuplicate, inbox.DeliveryRetried, inbox.DeliveryDeadLettered}

// ObserveDelivery counts d.
func (o *InboxObserver) ObserveDelivery(d inbox.Delivery) {
	i := int(d.Outcome) - 1
	if i < 0 || i >= len(inboxOutcomes) {
		return
	}
	k := d.Adapter + "\x00" + d.Consumer
	v, ok := o.subs.Load(k)
	if !ok {
		var cs [len(inboxOutcomes)]prometheus.Counter
		for j, out := range inboxOutcomes {
			cs[j] = o.vec.WithLabelValues(d.Adapter, d.Consumer, out.String())
		}
		v, _ = o.subs.LoadOrStore(k, &cs)
	}
	v.(*[len(inboxOutcomes)]prometheus.Counter)[i].Inc()
}
